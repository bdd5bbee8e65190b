package session

import (
	"context"
	"fmt"
	"sync"
	"time"
)

// Readiness on a shared engine.
//
// /readyz asks Ready every few seconds on every replica (the kubelet's
// probe: every 5 s, 5 s to answer). On Kubernetes the engine Ready checks
// is the API server, which all replicas share. A Ready that waited for the
// engine's answer under the probe's timeout failed on every replica at
// once whenever the API server was slow (a loaded control plane, a rolling
// update making and deleting pods): the Service was left with no ready
// endpoint and every client's connection was refused, an outage made by
// the probe itself (CI, 2026-12-07: 624 of 10,453 calls refused during a
// rolling update, while the replicas served the calls that reached them).
//
// So Ready never waits for the engine once it has an answer: it answers
// from the checks made so far and starts a new one in the background when
// the last began readyCheckEvery ago or more, one at a time, each under
// readyCheckTimeout. The engine counts as unavailable once no check has
// succeeded for readyGrace (checks failing, or one still waiting): a blip
// is not unreadiness, an engine gone for longer is. Only the first Ready
// waits (within its context) for the first check: a server whose engine
// does not answer when it starts is not ready.
const (
	readyCheckEvery   = 2 * time.Second
	readyCheckTimeout = 10 * time.Second
	readyGrace        = 30 * time.Second
)

// engineHealth is the readiness of one engine (Ready).
type engineHealth struct {
	ping                  func(context.Context) error
	every, timeout, grace time.Duration
	now                   func() time.Time

	mu sync.Mutex
	// began is when the running or last check began; running is closed
	// when the running check ends (nil: none runs).
	began   time.Time
	running chan struct{}
	// okAt is when the last successful check ended, lastErr the error of
	// the last that ended: one of them is set once a check has ended.
	okAt    time.Time
	lastErr error
}

func newEngineHealth(ping func(context.Context) error) *engineHealth {
	return &engineHealth{ping: ping, every: readyCheckEvery, timeout: readyCheckTimeout, grace: readyGrace, now: time.Now}
}

// ready reports whether the engine has answered within the grace.
func (h *engineHealth) ready(ctx context.Context) error {
	h.mu.Lock()
	if h.running == nil && (h.began.IsZero() || h.now().Sub(h.began) >= h.every) {
		h.startLocked()
	}
	running, checked := h.running, !h.okAt.IsZero() || h.lastErr != nil
	h.mu.Unlock()
	if !checked {
		select {
		case <-running:
		case <-ctx.Done():
			return fmt.Errorf("no answer yet: %w", ctx.Err())
		}
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	if !h.okAt.IsZero() && h.now().Sub(h.okAt) < h.grace {
		return nil
	}
	if h.lastErr != nil {
		if h.okAt.IsZero() {
			return h.lastErr
		}
		return fmt.Errorf("%w (no answer for %s)", h.lastErr, h.now().Sub(h.okAt).Round(time.Second))
	}
	// The last check ended well but before the grace, and the one after it
	// has not ended.
	return fmt.Errorf("no answer for %s", h.now().Sub(h.okAt).Round(time.Second))
}

// startLocked starts a check; h.mu is held.
func (h *engineHealth) startLocked() {
	done := make(chan struct{})
	h.running, h.began = done, h.now()
	go func() {
		// The check's own lifetime: no caller waits for it past the first.
		ctx, cancel := context.WithTimeout(context.Background(), h.timeout)
		err := h.ping(ctx)
		cancel()
		h.mu.Lock()
		h.lastErr, h.running = err, nil
		if err == nil {
			h.okAt = h.now()
		}
		h.mu.Unlock()
		close(done)
	}()
}
