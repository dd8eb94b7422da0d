package managementplane

import (
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// A daemon starting while something probes the lock (fke up polls
// lockHeld) gets it once the probe lets go; one that meets a daemon which
// keeps it is refused.
func TestAcquireLockWaitsOutProbes(t *testing.T) {
	path := filepath.Join(t.TempDir(), "daemon.lock")
	holder, err := acquireLock(path)
	if err != nil {
		t.Fatal(err)
	}
	released := make(chan struct{})
	go func() {
		time.Sleep(200 * time.Millisecond) // a probe that holds the lock a little long
		_ = syscall.Flock(int(holder.Fd()), syscall.LOCK_UN)
		close(released)
	}()
	lock, err := acquireLock(path)
	if err != nil {
		t.Fatalf("acquireLock while a probe held the lock: %v", err)
	}
	<-released
	if !lockHeld(path) {
		t.Fatal("lockHeld does not see the daemon's lock")
	}
	start := time.Now()
	if _, err := acquireLock(path); err == nil || !strings.Contains(err.Error(), "another fke daemon runs") {
		t.Fatalf("second daemon: %v, want refused", err)
	}
	if waited := time.Since(start); waited < lockWait {
		t.Fatalf("refused after %s, want after waiting %s", waited, lockWait)
	}
	lock.Close()
	holder.Close()
}
