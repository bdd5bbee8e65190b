// Package servertest runs a real server.Server for tests and benchmarks:
// a Backend over executor/local (no engine needed) and an httptest
// listener with two tenants.
package servertest

import (
	"context"
	"fmt"
	"io"
	"net/http/httptest"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/shellbox/shellbox/executor"
	"github.com/shellbox/shellbox/executor/files"
	"github.com/shellbox/shellbox/executor/local"
	"github.com/shellbox/shellbox/server"
	"github.com/shellbox/shellbox/tools"
)

// Tokens of the two tenants Start configures.
const (
	TokenAcme = "acme-test-token"
	TokenBeta = "beta-test-token"
)

// LocalBackend is a server.Backend over executor/local: one executor and
// Toolset per tenant, each tenant with its own root and spill directory.
// Sessions are those created through CreateSession.
type LocalBackend struct {
	Dir    string
	Limits executor.Limits
	// Notify receives the Toolsets' completion notices (server.Notify).
	Notify func(tenant, session string, n tools.Notice)
	// Toolsets, if set, supplies a tenant's Toolset instead (the
	// conformance suite hands in its own).
	Toolsets func(tenant string) *tools.Toolset

	// Gate, if set, supplies a tenant's policy gate (nil: allow all).
	Gate func(tenant string) tools.Gate
	// FileLimits cap file transfers (zero: the files package's defaults).
	FileLimits files.Limits

	mu       sync.Mutex
	sets     map[string]*tools.Toolset
	execs    []*local.Executor
	byTenant map[string]*local.Executor
	sessions map[string]map[string]server.SessionInfo
}

// NewLocalBackend returns a backend whose files live under t.TempDir() and
// whose executors are closed when t ends.
func NewLocalBackend(t testing.TB) *LocalBackend {
	lim := executor.DefaultLimits()
	lim.Grace = 300 * time.Millisecond
	b := &LocalBackend{Dir: t.TempDir(), Limits: lim, sets: map[string]*tools.Toolset{},
		sessions: map[string]map[string]server.SessionInfo{}}
	t.Cleanup(b.close)
	return b
}

func (b *LocalBackend) close() {
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
}

// Toolset implements server.Backend.
func (b *LocalBackend) Toolset(_ context.Context, tenant string) (*tools.Toolset, error) {
	if b.Toolsets != nil {
		return b.Toolsets(tenant), nil
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if ts, ok := b.sets[tenant]; ok {
		return ts, nil
	}
	root := filepath.Join(b.Dir, tenant, "root")
	if err := os.MkdirAll(root, 0o755); err != nil {
		return nil, err
	}
	e, err := local.New(local.Config{Root: root, SpillDir: filepath.Join(b.Dir, tenant, "spill"), Limits: b.Limits})
	if err != nil {
		return nil, err
	}
	b.execs = append(b.execs, e)
	if b.byTenant == nil {
		b.byTenant = map[string]*local.Executor{}
	}
	b.byTenant[tenant] = e
	var gate tools.Gate
	if b.Gate != nil {
		gate = b.Gate(tenant)
	}
	ts, err := tools.New(e, tools.Config{Home: root, Gate: gate, OnNotice: func(session string, n tools.Notice) {
		if b.Notify != nil {
			b.Notify(tenant, session, n)
		}
	}})
	if err != nil {
		return nil, err
	}
	b.sets[tenant] = ts
	return ts, nil
}

// Sessions implements server.Backend.
func (b *LocalBackend) Sessions(_ context.Context, tenant string) ([]server.SessionInfo, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	var out []server.SessionInfo
	for _, si := range b.sessions[tenant] {
		out = append(out, si)
	}
	return out, nil
}

// CreateSession implements server.Backend. Images, runtimes and mounts are
// not supported.
func (b *LocalBackend) CreateSession(_ context.Context, tenant, session string, opts server.SessionOptions) (server.SessionInfo, error) {
	if opts.Image != "" || opts.Runtime != "" || opts.Mounts != nil {
		return server.SessionInfo{}, server.Errorf(server.ErrNotAllowed, "the local backend has no images, runtimes or mounts")
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.sessions[tenant] == nil {
		b.sessions[tenant] = map[string]server.SessionInfo{}
	}
	si, ok := b.sessions[tenant][session]
	if !ok {
		si = server.SessionInfo{ID: session, Tenant: tenant, State: "running", Created: time.Now().UTC()}
		b.sessions[tenant][session] = si
	}
	return si, nil
}

// DeleteSession implements server.Backend.
func (b *LocalBackend) DeleteSession(_ context.Context, tenant, session string) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	if _, ok := b.sessions[tenant][session]; !ok {
		return server.NoSuchSession(session)
	}
	delete(b.sessions[tenant], session)
	return nil
}

// PeekTask implements server.TaskPeeker: the task's output tails and
// status, the bash_output cursor untouched.
func (b *LocalBackend) PeekTask(ctx context.Context, tenant, session, id string) (server.TaskPeek, error) {
	b.mu.Lock()
	e := b.byTenant[tenant]
	b.mu.Unlock()
	if e == nil {
		return server.TaskPeek{}, fmt.Errorf("no such task: %s", id)
	}
	task, err := e.Task(ctx, session, id)
	if err != nil {
		return server.TaskPeek{}, err
	}
	p, ok := task.(interface {
		Peek(context.Context) (executor.Output, error)
	})
	if !ok {
		return server.TaskPeek{}, server.Errorf(server.ErrUnavailable, "task %s cannot be peeked", id)
	}
	o, err := p.Peek(ctx)
	if err != nil {
		return server.TaskPeek{}, err
	}
	return server.TaskPeek{Stdout: o.Stdout, Stderr: o.Stderr, Status: o.Status}, nil
}

// tree is the tenant's root as a files.Tree, the Toolset made first.
func (b *LocalBackend) tree(ctx context.Context, tenant string) (files.Tree, error) {
	if _, err := b.Toolset(ctx, tenant); err != nil {
		return files.Tree{}, err
	}
	return files.Tree{Root: filepath.Join(b.Dir, tenant, "root"), UID: -1, GID: -1}, nil
}

// PutFile implements server.FileTransfer in the tenant's root.
func (b *LocalBackend) PutFile(ctx context.Context, tenant, session, p string, body io.Reader, o server.PutFileOptions) (files.Written, error) {
	t, err := b.tree(ctx, tenant)
	if err != nil {
		return files.Written{}, err
	}
	w, err := t.Put(ctx, p, body, files.PutOptions{Tar: o.Tar, Mode: o.Mode, Limits: b.FileLimits})
	if err != nil {
		return files.Written{}, server.FileError(err)
	}
	return w, nil
}

// GetFile implements server.FileTransfer in the tenant's root.
func (b *LocalBackend) GetFile(ctx context.Context, tenant, session, p string, tar bool) (files.Info, io.ReadCloser, error) {
	t, err := b.tree(ctx, tenant)
	if err != nil {
		return files.Info{}, nil, err
	}
	info, body, err := t.Open(ctx, p, files.GetOptions{Tar: tar, Limits: b.FileLimits})
	if err != nil {
		return files.Info{}, nil, server.FileError(err)
	}
	return info, body, nil
}

// StatFile implements server.FileTransfer in the tenant's root.
func (b *LocalBackend) StatFile(ctx context.Context, tenant, session, p string) (files.Info, error) {
	t, err := b.tree(ctx, tenant)
	if err != nil {
		return files.Info{}, err
	}
	info, err := t.Stat(p)
	if err != nil {
		return files.Info{}, server.FileError(err)
	}
	return info, nil
}

// Ready implements server.Backend.
func (b *LocalBackend) Ready(context.Context) error { return nil }

// Server is a running server.
type Server struct {
	*server.Server
	URL  string
	HTTP *httptest.Server
}

// Start serves backend on a local listener with the tenants "acme" and
// "beta" (tokens TokenAcme, TokenBeta); mut may change the config first.
// The server is drained and closed when t ends.
func Start(t testing.TB, backend server.Backend, mut func(*server.Config)) *Server {
	t.Helper()
	cfg := server.Config{
		Backend: backend,
		Tenants: map[string]server.TenantConfig{
			// The conformance suite opens an MCP session per sandbox
			// session and keeps them all until it ends.
			"acme": {Tokens: []string{server.HashToken(TokenAcme)}, MaxConcurrentCalls: 256, RatePerSecond: 1e6, Burst: 1e6, MaxMCPSessions: 1024},
			"beta": {Tokens: []string{server.HashToken(TokenBeta)}, MaxConcurrentCalls: 256, RatePerSecond: 1e6, Burst: 1e6, MaxMCPSessions: 1024},
		},
	}
	if mut != nil {
		mut(&cfg)
	}
	srv, err := server.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if lb, ok := backend.(*LocalBackend); ok && lb.Notify == nil {
		lb.Notify = srv.Notify
	}
	hs := httptest.NewServer(srv.Handler())
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		srv.Drain(ctx)
		hs.CloseClientConnections()
		hs.Close()
	})
	return &Server{Server: srv, URL: hs.URL, HTTP: hs}
}
