package supervisor

import (
	"context"
	"os/exec"
	"runtime"
	"sync"
)

// Children are started with Pdeathsig, which Linux delivers when the thread
// that forked the child exits, not when the process does. Go may retire the
// OS thread of any goroutine, so every child is started by one goroutine that
// locks itself to its thread and never returns: the signal then fires only
// when the supervising process itself dies.

type spawnRequest struct {
	cmd   *exec.Cmd
	reply chan error
}

var (
	spawnerOnce sync.Once
	spawnCh     chan spawnRequest
)

func spawnLoop(reqs <-chan spawnRequest) {
	runtime.LockOSThread()
	// Never unlocked and never returns: the thread lives as long as the
	// process.
	for req := range reqs {
		req.reply <- req.cmd.Start()
	}
}

// spawn starts cmd on the spawner thread. ctx bounds only the wait for the
// spawner; once the spawner has taken the request, spawn waits for its
// answer so that a started child is never lost.
func spawn(ctx context.Context, cmd *exec.Cmd) error {
	spawnerOnce.Do(func() {
		spawnCh = make(chan spawnRequest)
		go spawnLoop(spawnCh)
	})
	req := spawnRequest{cmd: cmd, reply: make(chan error, 1)}
	select {
	case spawnCh <- req:
	case <-ctx.Done():
		return ctx.Err()
	}
	return <-req.reply
}
