package supervisor

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"runtime"
	"strconv"
	"sync"
	"syscall"
)

// Children are started with Pdeathsig, which Linux delivers when the thread
// that forked the child exits, not when the process does. Go may retire the
// OS thread of any goroutine, so every child is started by one goroutine that
// locks itself to its thread and never returns: the signal then fires only
// when the supervising process itself dies.

type spawnRequest struct {
	cmd   *exec.Cmd
	nice  int
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
		req.reply <- startNice(req.cmd, req.nice)
	}
}

// canRenice reports whether this process may lower a niceness it raised
// (only a privileged process may), which Spec.Nice needs: the spawner
// thread takes the child's niceness for the fork and returns to 0 after.
var canRenice = os.Geteuid() == 0

// startNice starts cmd on the calling (spawner) thread; a child forked by a
// thread inherits that thread's niceness, and so do all its threads.
func startNice(cmd *exec.Cmd, nice int) error {
	if nice == 0 || !canRenice {
		return cmd.Start()
	}
	tid := syscall.Gettid()
	if err := syscall.Setpriority(syscall.PRIO_PROCESS, tid, nice); err != nil {
		return fmt.Errorf("setting niceness %d: %w", nice, err)
	}
	err := cmd.Start()
	if rerr := syscall.Setpriority(syscall.PRIO_PROCESS, tid, 0); rerr != nil {
		// Cannot happen for a privileged process; every later child
		// would inherit the niceness, so say it loudly.
		panic(fmt.Sprintf("supervisor: restoring the spawner's niceness: %v", rerr))
	}
	return err
}

// renice sets the niceness of every thread of pid (Linux keeps one per
// thread; threads created later inherit their creator's).
func renice(pid, nice int) error {
	tasks, err := os.ReadDir(fmt.Sprintf("/proc/%d/task", pid))
	if err != nil {
		return err
	}
	var errs []error
	for _, t := range tasks {
		tid, err := strconv.Atoi(t.Name())
		if err != nil {
			continue
		}
		if err := syscall.Setpriority(syscall.PRIO_PROCESS, tid, nice); err != nil && !errors.Is(err, syscall.ESRCH) {
			errs = append(errs, fmt.Errorf("thread %d: %w", tid, err))
		}
	}
	return errors.Join(errs...)
}

// spawn starts cmd on the spawner thread. ctx bounds only the wait for the
// spawner; once the spawner has taken the request, spawn waits for its
// answer so that a started child is never lost.
func spawn(ctx context.Context, cmd *exec.Cmd, nice int) error {
	spawnerOnce.Do(func() {
		spawnCh = make(chan spawnRequest)
		go spawnLoop(spawnCh)
	})
	req := spawnRequest{cmd: cmd, nice: nice, reply: make(chan error, 1)}
	select {
	case spawnCh <- req:
	case <-ctx.Done():
		return ctx.Err()
	}
	return <-req.reply
}
