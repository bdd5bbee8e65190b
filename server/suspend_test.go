package server

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
)

// holdingBackend records the calls the server holds per session, and
// answers suspend and resume.
type holdingBackend struct {
	*localBackend
	mu      sync.Mutex
	held    map[string]int
	resumed string
}

func (b *holdingBackend) HoldCall(tenant, session string) func() {
	b.mu.Lock()
	b.held[tenant+"/"+session]++
	b.mu.Unlock()
	return func() {
		b.mu.Lock()
		b.held[tenant+"/"+session]--
		b.mu.Unlock()
	}
}

func (b *holdingBackend) SuspendSession(_ context.Context, tenant, session string) (SessionInfo, error) {
	switch session {
	case "missing":
		return SessionInfo{}, NoSuchSession(session)
	case "busy":
		return SessionInfo{}, Errorf(ErrConflict, "1 call(s) in flight; suspend it when they have ended")
	}
	return SessionInfo{ID: session, Tenant: tenant, State: "suspended", Snapshot: "snap-1"}, nil
}

func (b *holdingBackend) Sessions(ctx context.Context, tenant string) ([]SessionInfo, error) {
	list, err := b.localBackend.Sessions(ctx, tenant)
	if tenant == "acme" {
		list = append(list, SessionInfo{ID: "asleep", Tenant: tenant, State: "suspended"})
	}
	return list, err
}

func (b *holdingBackend) ResumeSession(_ context.Context, tenant, session, snapshot string) (SessionInfo, error) {
	b.mu.Lock()
	b.resumed = snapshot
	b.mu.Unlock()
	if snapshot == "bad" {
		return SessionInfo{}, Errorf(ErrInvalid, "session %s has no snapshot %q", session, snapshot)
	}
	return SessionInfo{ID: session, Tenant: tenant, State: "running"}, nil
}

// TestCallHoldAndSuspendRoutes: a tool call holds its session for the
// backend (CallHolder) while it runs and releases it after; the suspend
// and resume routes reach a Suspender with the token's tenant and answer
// its errors by class.
func TestCallHoldAndSuspendRoutes(t *testing.T) {
	var hb *holdingBackend
	r := newRig(t, func(c *Config) {
		hb = &holdingBackend{localBackend: c.Backend.(*localBackend), held: map[string]int{}}
		c.Backend = hb
	})
	code, m := r.json("POST", "/v1/sessions/s1/tools/bash", tokenAcme, map[string]any{"command": "echo hi", "description": "d"})
	if code != 200 || m["text"] != "hi" {
		t.Fatalf("call: %d %v", code, m)
	}
	hb.mu.Lock()
	if n, ok := hb.held["acme/s1"]; !ok || n != 0 {
		t.Errorf("after the call: held %v, want acme/s1 held and released", hb.held)
	}
	hb.mu.Unlock()

	code, m = r.json("POST", "/v1/sessions/s1/suspend", tokenAcme, nil)
	if code != 200 || m["state"] != "suspended" || m["snapshot"] != "snap-1" || m["tenant"] != "acme" {
		t.Errorf("suspend: %d %v", code, m)
	}
	if code, m = r.json("POST", "/v1/sessions/busy/suspend", tokenAcme, nil); code != 409 || !strings.Contains(strings.ToLower(fmtAny(m)), "conflict") {
		t.Errorf("suspend of a session with a call in flight: %d %v, want 409 conflict", code, m)
	}
	if code, m = r.json("POST", "/v1/sessions/missing/suspend", tokenAcme, nil); code != 404 {
		t.Errorf("suspend of a missing session: %d %v", code, m)
	}
	if code, m = r.json("POST", "/v1/sessions/s1/resume", tokenAcme, map[string]any{"snapshot": "snap-0"}); code != 200 || m["state"] != "running" || hb.resumed != "snap-0" {
		t.Errorf("resume from snap-0: %d %v (backend got %q)", code, m, hb.resumed)
	}
	if code, m = r.json("POST", "/v1/sessions/s1/resume", tokenAcme, nil); code != 200 || hb.resumed != "" {
		t.Errorf("resume with no body: %d %v (backend got %q)", code, m, hb.resumed)
	}
	if code, m = r.json("POST", "/v1/sessions/s1/resume", tokenAcme, map[string]any{"snapshot": "bad"}); code != 400 || !strings.Contains(errMsg(m), "no snapshot") {
		t.Errorf("resume from a bad snapshot: %d %v", code, m)
	}
	if code, m = r.json("POST", "/v1/sessions/s1/resume", tokenAcme, "{"); code != 400 {
		t.Errorf("resume with malformed JSON: %d %v", code, m)
	}
	if code, m = r.json("POST", "/v1/sessions/s1/suspend", "", nil); code != 401 {
		t.Errorf("suspend without a token: %d %v", code, m)
	}
	// Suspended sessions are counted apart from active ones.
	_, body := r.do("GET", "/metrics", "", "", nil)
	for _, want := range []string{`shellbox_active_sessions{tenant="acme"} 0`, `shellbox_suspended_sessions{tenant="acme"} 1`, `shellbox_suspended_sessions{tenant="beta"} 0`} {
		if !strings.Contains(string(body), want) {
			t.Errorf("metrics lack %s", want)
		}
	}
}

// TestSuspendWithoutSuspender: a backend that suspends nothing answers 400.
func TestSuspendWithoutSuspender(t *testing.T) {
	r := newRig(t, nil)
	if code, m := r.json("POST", "/v1/sessions/s1/suspend", tokenAcme, nil); code != 400 || !strings.Contains(errMsg(m), "suspends no sessions") {
		t.Errorf("suspend: %d %v", code, m)
	}
}

func fmtAny(v any) string { return fmt.Sprint(v) }
