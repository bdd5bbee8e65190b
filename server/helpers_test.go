package server

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/shellbox/shellbox/executor"
	"github.com/shellbox/shellbox/executor/local"
	"github.com/shellbox/shellbox/tools"
)

// localBackend is a Backend over executor/local for tests without an engine:
// one executor and Toolset per tenant, each with its own root.
type localBackend struct {
	dir      string
	lim      executor.Limits
	notify   func(tenant, session string, n tools.Notice)
	reported func(tenant, session, taskID string)

	mu       sync.Mutex
	sets     map[string]*tools.Toolset
	execs    []*local.Executor
	sessions map[string]map[string]SessionInfo
	lastOpts SessionOptions // of the last CreateSession
	// handedOver are the sessions WatchTasks was called for.
	handedOver  []string
	ready       error
	warnings    []Warning // Warnings' answer
	unsandboxed bool      // Sandboxed's answer, negated
	gate        tools.Gate
}

func newLocalBackend(t *testing.T) *localBackend {
	b := &localBackend{dir: t.TempDir(), sets: map[string]*tools.Toolset{}, sessions: map[string]map[string]SessionInfo{}}
	b.lim = executor.DefaultLimits()
	b.lim.Grace = 300 * time.Millisecond
	t.Cleanup(func() {
		b.mu.Lock()
		defer b.mu.Unlock()
		for _, ts := range b.sets {
			ts.Close()
		}
		for _, e := range b.execs {
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			e.Close(ctx)
			cancel()
		}
	})
	return b
}

func (b *localBackend) Toolset(_ context.Context, tenant string) (*tools.Toolset, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if ts, ok := b.sets[tenant]; ok {
		return ts, nil
	}
	root := filepath.Join(b.dir, tenant, "root")
	spill := filepath.Join(b.dir, tenant, "spill")
	os.MkdirAll(root, 0o755)
	e, err := local.New(local.Config{Root: root, SpillDir: spill, Limits: b.lim})
	if err != nil {
		return nil, err
	}
	b.execs = append(b.execs, e)
	ts, err := tools.New(e, tools.Config{Home: root, Gate: b.gate, OnNotice: func(session string, n tools.Notice) {
		if b.notify != nil {
			b.notify(tenant, session, n)
		}
	}, OnReported: func(session, id string) {
		if b.reported != nil {
			b.reported(tenant, session, id)
		}
	}})
	if err != nil {
		return nil, err
	}
	b.sets[tenant] = ts
	return ts, nil
}

// ReceiveNotice implements NoticeReceiver, as session.Service does.
func (b *localBackend) ReceiveNotice(tenant, session string, n tools.Notice) {
	if ts, err := b.Toolset(context.Background(), tenant); err == nil {
		ts.Deliver(session, n)
	}
}

// ForgetNotice implements NoticeReceiver.
func (b *localBackend) ForgetNotice(tenant, session, taskID string) {
	if ts, err := b.Toolset(context.Background(), tenant); err == nil {
		ts.Forget(session, taskID)
	}
}

// WatchTasks implements NoticeReceiver: the local executor's tasks are
// this process's; there is nothing to take over.
func (b *localBackend) WatchTasks(tenant, session string) {
	b.mu.Lock()
	b.handedOver = append(b.handedOver, tenant+"/"+session)
	b.mu.Unlock()
}

func (b *localBackend) Sessions(_ context.Context, tenant string) ([]SessionInfo, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	var out []SessionInfo
	for _, si := range b.sessions[tenant] {
		out = append(out, si)
	}
	return out, nil
}

func (b *localBackend) CreateSession(_ context.Context, tenant, session string, opts SessionOptions) (SessionInfo, error) {
	if opts.Image != "" && opts.Image != "allowed" {
		return SessionInfo{}, Errorf(ErrNotAllowed, "image %q is not allowed for tenant %s", opts.Image, tenant)
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	b.lastOpts = opts
	if b.sessions[tenant] == nil {
		b.sessions[tenant] = map[string]SessionInfo{}
	}
	si := SessionInfo{ID: session, Tenant: tenant, Image: opts.Image, Mounts: opts.Mounts, State: "running", Created: time.Now().UTC()}
	b.sessions[tenant][session] = si
	return si, nil
}

func (b *localBackend) DeleteSession(_ context.Context, tenant, session string) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	if _, ok := b.sessions[tenant][session]; !ok {
		return NoSuchSession(session)
	}
	delete(b.sessions[tenant], session)
	return nil
}

func (b *localBackend) Ready(context.Context) error { return b.ready }

func (b *localBackend) Sandboxed() bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	return !b.unsandboxed
}

func (b *localBackend) Warnings() []Warning {
	b.mu.Lock()
	defer b.mu.Unlock()
	return slices.Clone(b.warnings)
}

// Tokens of the test tenants.
const (
	tokenAcme = "acme-secret-token"
	tokenBeta = "beta-secret-token"
)

type rig struct {
	t   *testing.T
	srv *Server
	b   *localBackend
	ts  *httptest.Server
}

func newRig(t *testing.T, mut func(*Config)) *rig {
	t.Helper()
	b := newLocalBackend(t)
	cfg := Config{
		Backend: b,
		Tenants: map[string]TenantConfig{
			"acme": {Tokens: []string{HashToken(tokenAcme)}},
			"beta": {Tokens: []string{HashToken(tokenBeta)}},
		},
	}
	if mut != nil {
		mut(&cfg)
	}
	srv, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	b.notify = srv.Notify
	b.reported = srv.Reported
	ts := httptest.NewServer(srv.Handler())
	t.Cleanup(func() {
		ts.CloseClientConnections()
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		srv.Drain(ctx)
		ts.Close()
	})
	return &rig{t: t, srv: srv, b: b, ts: ts}
}

// do sends a request and returns status and body.
func (r *rig) do(method, path, token, ctype string, body []byte) (int, []byte) {
	r.t.Helper()
	req, err := http.NewRequest(method, r.ts.URL+path, bytes.NewReader(body))
	if err != nil {
		r.t.Fatal(err)
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	if ctype != "" {
		req.Header.Set("Content-Type", ctype)
	}
	resp, err := r.ts.Client().Do(req)
	if err != nil {
		r.t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, b
}

func (r *rig) json(method, path, token string, body any) (int, map[string]any) {
	r.t.Helper()
	var raw []byte
	if body != nil {
		if s, ok := body.(string); ok {
			raw = []byte(s)
		} else {
			raw, _ = json.Marshal(body)
		}
	}
	code, b := r.do(method, path, token, "application/json", raw)
	var m map[string]any
	if len(b) > 0 && json.Unmarshal(b, &m) != nil {
		r.t.Fatalf("%s %s: %d, not JSON: %q", method, path, code, b)
	}
	return code, m
}

func errCode(m map[string]any) string {
	e, _ := m["error"].(map[string]any)
	c, _ := e["code"].(string)
	return c
}

func errMsg(m map[string]any) string {
	e, _ := m["error"].(map[string]any)
	c, _ := e["message"].(string)
	return c
}
