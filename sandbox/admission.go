package sandbox

import (
	"context"
	"fmt"
	"sync"
	"time"
)

// Admission defaults (Config.MaxCreating, CreateQueue, CreateQueueWait).
const (
	DefaultMaxCreating     = 4
	DefaultCreateQueue     = 256
	DefaultCreateQueueWait = 30 * time.Second
)

// NoCreateQueue as Config.CreateQueue: no creation waits for a slot, one
// without a free slot fails at once. Zero, as for every field of Config,
// takes the default (DefaultCreateQueue).
const NoCreateQueue = -1

// admission bounds concurrent sandbox creations: max slots, then a queue
// of at most maxQueue waiting at most wait each.
type admission struct {
	slots    chan struct{}
	maxQueue int
	wait     time.Duration

	mu     sync.Mutex
	queued int
}

func newAdmission(max, maxQueue int, wait time.Duration) *admission {
	return &admission{slots: make(chan struct{}, max), maxQueue: maxQueue, wait: wait}
}

// acquire takes a slot, waiting in the queue if none is free; it returns
// the slot's release. The errors are ErrUnavailable and say how busy the
// host is; ctx ending returns ctx.Err().
func (a *admission) acquire(ctx context.Context) (func(), error) {
	select {
	case a.slots <- struct{}{}:
		return a.release, nil
	default:
	}
	a.mu.Lock()
	if a.queued >= a.maxQueue {
		q := a.queued
		a.mu.Unlock()
		return nil, fmt.Errorf("%w: too many sandboxes being created: %d in progress, %d queued (the queue is full)",
			ErrUnavailable, len(a.slots), q)
	}
	a.queued++
	a.mu.Unlock()
	defer func() {
		a.mu.Lock()
		a.queued--
		a.mu.Unlock()
	}()
	t := time.NewTimer(a.wait)
	defer t.Stop()
	select {
	case a.slots <- struct{}{}:
		return a.release, nil
	case <-t.C:
		a.mu.Lock()
		q := a.queued - 1
		a.mu.Unlock()
		return nil, fmt.Errorf("%w: too many sandboxes being created: %d in progress, %d queued; waited %s",
			ErrUnavailable, len(a.slots), q, a.wait)
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

// tryAcquire takes a slot only if one is free and nobody queues for one
// (a pool's filling gives way to sessions).
func (a *admission) tryAcquire() (func(), bool) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.queued > 0 {
		return nil, false
	}
	select {
	case a.slots <- struct{}{}:
		return a.release, true
	default:
		return nil, false
	}
}

func (a *admission) release() { <-a.slots }

// load reports the creations holding a slot and those queued for one.
func (a *admission) load() (creating, queued int) {
	a.mu.Lock()
	defer a.mu.Unlock()
	return len(a.slots), a.queued
}
