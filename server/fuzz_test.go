package server

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/shellbox/shellbox/executor"
	"github.com/shellbox/shellbox/tools"
)

// inertExecutor runs nothing: every foreground command "prints" its
// command, background tasks are refused, and no task exists. The fuzzer
// drives the handlers with it, so no fuzzed command ever runs.
type inertExecutor struct{}

func (inertExecutor) Resolve(ctx context.Context, req executor.Request) (executor.Spec, error) {
	return executor.DefaultLimits().Resolve(ctx, req, "/inert", nil)
}
func (inertExecutor) Run(_ context.Context, s executor.Spec) (executor.Result, error) {
	return executor.Result{Stdout: s.Command}, nil
}
func (inertExecutor) Start(context.Context, executor.Spec) (executor.Task, error) {
	return nil, executor.Errorf(executor.ErrLimit, "no background tasks here")
}
func (inertExecutor) Task(_ context.Context, _, id string) (executor.Task, error) {
	return nil, executor.NoSuchTask(id)
}
func (inertExecutor) Has(context.Context, string, executor.Shell) bool { return false }

type inertBackend struct{ ts *tools.Toolset }

func (b inertBackend) Toolset(context.Context, string) (*tools.Toolset, error) { return b.ts, nil }
func (inertBackend) Sessions(context.Context, string) ([]SessionInfo, error) {
	return []SessionInfo{{ID: "s1", Tenant: "acme"}}, nil
}
func (inertBackend) CreateSession(_ context.Context, tenant, id string, o SessionOptions) (SessionInfo, error) {
	if o.Image != "" {
		return SessionInfo{}, Errorf(ErrNotAllowed, "no images")
	}
	return SessionInfo{ID: id, Tenant: tenant}, nil
}
func (inertBackend) DeleteSession(_ context.Context, _, id string) error { return NoSuchSession(id) }
func (inertBackend) Ready(context.Context) error                         { return nil }

// FuzzHandlers sends arbitrary methods, paths, headers and bodies to the
// whole handler: it must never panic (a recovered panic answers 500, which
// fails too), every error must be a JSON error object, and no answer may be
// a 5xx but 503.
//
//	go test ./server/ -run XXX -fuzz FuzzHandlers -fuzztime 60s
func FuzzHandlers(f *testing.F) {
	ts, err := tools.New(inertExecutor{}, tools.Config{})
	if err != nil {
		f.Fatal(err)
	}
	srv, err := New(Config{
		Backend:      inertBackend{ts},
		Approvals:    newFakeApprovals(),
		MaxBodyBytes: 4096,
		Tenants: map[string]TenantConfig{
			"acme": {Tokens: []string{HashToken(tokenAcme)}, MaxConcurrentCalls: 1 << 20, RatePerSecond: 1e9, Burst: 1 << 30},
		},
	})
	if err != nil {
		f.Fatal(err)
	}
	h := srv.Handler()
	seeds := []struct {
		method, path, ctype, auth, body string
	}{
		{"POST", "/v1/sessions/s1/tools/bash", "application/json", "Bearer " + tokenAcme, `{"command":"echo hi","description":"d"}`},
		{"POST", "/v1/sessions/s1/tools/bash_output", "application/json", "Bearer " + tokenAcme, `{"task_id":"x"}`},
		{"POST", "/v1/sessions", "application/json", "Bearer " + tokenAcme, `{"id":"s2","image":"x"}`},
		{"GET", "/v1/sessions/s1", "", "Bearer " + tokenAcme, ``},
		{"DELETE", "/v1/sessions/s1", "", "Bearer " + tokenAcme, ``},
		{"POST", "/v1/approvals/a1/deny", "application/json; charset=utf-8", "Bearer " + tokenAcme, `{"reason":1}`},
		{"POST", "/mcp", "application/json", "Bearer " + tokenAcme, `{"jsonrpc":"2.0","id":1,"method":"initialize","params":{}}`},
		{"GET", "/openapi.json", "", "", ``},
		{"PUT", "/v1/sessions/%zz", "text/plain", "Bearer nope", `{`},
		{"POST", "/v1/sessions/s1/tools/bash", "application/json", "bearer " + tokenAcme, strings.Repeat("[", 5000)},
	}
	for _, s := range seeds {
		f.Add(s.method, s.path, s.ctype, s.auth, s.body)
	}
	f.Fuzz(func(t *testing.T, method, path, ctype, auth, body string) {
		if !strings.HasPrefix(path, "/") || strings.Contains(path, "events") || strings.HasPrefix(path, "/metrics") ||
			(strings.Contains(path, "mcp") && method != "POST") {
			// Streams (events, MCP GET) and /metrics (text) are not
			// request/response JSON.
			return
		}
		req, err := http.NewRequest(method, "http://shellbox.test"+path, strings.NewReader(body))
		if err != nil {
			return
		}
		req.Header.Set("Content-Type", ctype)
		req.Header.Set("Authorization", auth)
		req.Header.Set("Accept", "application/json, text/event-stream")
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req.WithContext(ctx))
		if rec.Code >= 500 && rec.Code != http.StatusServiceUnavailable {
			t.Fatalf("%s %q: %d %s", method, path, rec.Code, rec.Body)
		}
		if rec.Code >= 400 && !strings.HasPrefix(req.URL.Path, "/mcp") {
			var e apiError
			if err := json.Unmarshal(rec.Body.Bytes(), &e); err != nil || e.Error.Code == "" {
				t.Fatalf("%s %q: %d without a JSON error: %q", method, path, rec.Code, rec.Body)
			}
		}
	})
}
