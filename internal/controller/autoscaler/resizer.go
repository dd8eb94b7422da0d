package autoscaler

import (
	"context"
	"sync"
	"time"

	"github.com/go-logr/logr"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/clock"
	"sigs.k8s.io/controller-runtime/pkg/client"

	fkev1 "fke.dev/fke/api/v1alpha1"
	"fke.dev/fke/internal/autoscaler/poolsize"
)

// resizeDone is told the outcome of a resize once its patch is done: the
// pool as the API server returned it (nil on error) and when. ctx is the
// writer's.
type resizeDone func(ctx context.Context, np *fkev1.NodePool, at time.Time, err error)

// resizer sets pools' spec.replicas off the autoscaler's pass, so that a
// pass does not wait on the management API server and the next pass can
// decide for pods that turned unschedulable meanwhile.
//
// Contract: sizes asked for one pool are written in the order asked; sizes
// asked while an earlier one is queued replace it (only the latest is
// written; every caller's done is told, in order). Desired returns the size
// last asked for a pool until the cache shows the write, so no pass decides
// the same nodes twice. A failed write is forgotten (the cache's size holds
// again) and its callers are told the error. Safe for concurrent use; run
// writes with run.
type resizer struct {
	c     client.Client
	clock clock.PassiveClock

	mu    sync.Mutex
	pools map[types.NamespacedName]*resizeState
	queue []types.NamespacedName // pools with a size to write, oldest first
	wake  chan struct{}
}

// resizeState is what the resizer knows of one pool.
type resizeState struct {
	// np is the pool as last asked for (a copy), the base of the patch.
	np *fkev1.NodePool
	to int
	// queued: to is waiting for the writer; writing: a patch is in flight.
	queued, writing bool
	// written is the generation the last completed patch made; the
	// cache's pool is current once it has reached it.
	written int64
	done    []resizeDone
}

func newResizer(c client.Client, clk clock.PassiveClock) *resizer {
	return &resizer{c: c, clock: clk, pools: map[types.NamespacedName]*resizeState{}, wake: make(chan struct{}, 1)}
}

// Desired returns the pool's desired size: the size last asked for it while
// that is not yet in np (the cache's pool), else np's own.
func (z *resizer) Desired(np *fkev1.NodePool) int {
	z.mu.Lock()
	defer z.mu.Unlock()
	key := client.ObjectKeyFromObject(np)
	s := z.pools[key]
	if s == nil {
		return np.DesiredReplicas()
	}
	if !s.queued && !s.writing && np.Generation >= s.written {
		delete(z.pools, key)
		return np.DesiredReplicas()
	}
	return s.to
}

// Resize asks for the pool to be set to size to; done, if not nil, is
// called from the writer once the size is written or has failed.
func (z *resizer) Resize(np *fkev1.NodePool, to int, done resizeDone) {
	z.mu.Lock()
	key := client.ObjectKeyFromObject(np)
	s := z.pools[key]
	if s == nil {
		s = &resizeState{}
		z.pools[key] = s
	}
	s.np, s.to = np.DeepCopy(), to
	if done != nil {
		s.done = append(s.done, done)
	}
	if !s.queued {
		s.queued = true
		z.queue = append(z.queue, key)
	}
	z.mu.Unlock()
	select {
	case z.wake <- struct{}{}:
	default:
	}
}

// run writes the sizes asked for until ctx ends.
func (z *resizer) run(ctx context.Context) error {
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-z.wake:
		}
		for z.writeNext(ctx) {
		}
	}
}

// writeNext writes the oldest size asked for; false when there is none.
func (z *resizer) writeNext(ctx context.Context) bool {
	z.mu.Lock()
	if len(z.queue) == 0 {
		z.mu.Unlock()
		return false
	}
	key := z.queue[0]
	z.queue = z.queue[1:]
	s := z.pools[key]
	s.queued, s.writing = false, true
	np, to, done := s.np, s.to, s.done
	s.np, s.done = nil, nil
	z.mu.Unlock()

	_, err := poolsize.SetReplicas(ctx, z.c, np, to)
	at := z.clock.Now()
	if err != nil {
		logr.FromContextOrDiscard(ctx).Error(err, "resize failed", "to", to)
		np = nil
	}

	z.mu.Lock()
	s.writing = false
	switch {
	case err == nil:
		s.written = np.Generation
	case !s.queued:
		delete(z.pools, key) // the cache's size holds again
	}
	z.mu.Unlock()
	for _, f := range done {
		var own *fkev1.NodePool // each caller gets its own copy to keep
		if np != nil {
			own = np.DeepCopy()
		}
		f(ctx, own, at, err)
	}
	return true
}
