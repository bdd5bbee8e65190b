package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"os"
	"slices"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/shellbox/shellbox/config"
	"github.com/shellbox/shellbox/executor/executortest"
	"github.com/shellbox/shellbox/sandbox/containerd/containerdtest"
	"github.com/shellbox/shellbox/sandbox/docker/dockertest"
	"github.com/shellbox/shellbox/server"
	"github.com/shellbox/shellbox/server/client"
	"github.com/shellbox/shellbox/server/servertest"
	"github.com/shellbox/shellbox/session"
	"github.com/shellbox/shellbox/tools"
)

// testServe starts serve's own session layer (the wiring `shellbox serve`
// uses) behind a test server, on a test engine and directories, or on the
// local executor.
func testServe(t testing.TB, kind string) (*session.Service, *servertest.Server) {
	t.Helper()
	cfg, err := config.Defaults()
	if err != nil {
		t.Fatal(err)
	}
	cfg.Backend = kind
	cfg.Local.Root, cfg.Local.SpillDir = t.TempDir(), t.TempDir()
	if kind == "docker" {
		requireEngine(t)
		cfg.Sandbox.StateDir = dockertest.StateDir(t)
		cfg.Sandbox.Owner = dockertest.Owner(t)
		cfg.Sandbox.Image = dockertest.Image
		cfg.Sandbox.Agent = dockertest.Agent(t)
		cfg.Sandbox.Labels = dockertest.Labels()
		cfg.Sandbox.PidsLimit = 256
	}
	if kind == "containerd" {
		cc := containerdtest.Config(t, containerdtest.Address(t))
		cfg.Containerd.Address, cfg.Containerd.Namespace, cfg.Containerd.RuncRoot = cc.Address, cc.Namespace, cc.RuncRoot
		cfg.Containerd.RuntimeConfigs = cc.RuntimeConfigs
		cfg.Sandbox.StateDir = cc.StateDir
		cfg.Sandbox.Owner = dockertest.Owner(t)
		cfg.Sandbox.Image = dockertest.Image
		cfg.Sandbox.Agent = cc.AgentBinary
		cfg.Sandbox.Labels = dockertest.Labels()
		cfg.Sandbox.PidsLimit = 256
	}
	var (
		l            *session.Service
		closeRuntime func() error
	)
	s := servertest.Start(t, nil, func(c *server.Config) {
		c.NewBackend = func(n server.Notifier, m server.Metrics) (server.Backend, error) {
			var err error
			l, closeRuntime, err = newLayer(cfg, nil, n, m, slog.New(slog.NewJSONHandler(io.Discard, nil)))
			return l, err
		}
	})
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
		defer cancel()
		list, _ := l.Sandboxes(ctx)
		for _, sb := range list {
			l.DeleteSession(ctx, sb.Tenant, sb.Session)
		}
		l.Close(ctx)
		closeRuntime()
	})
	return l, s
}

func envInt(name string, def int) int {
	if v, err := strconv.Atoi(os.Getenv(name)); err == nil && v > 0 {
		return v
	}
	return def
}

// TestLoadMCP runs SHELLBOX_LOAD_SESSIONS concurrent sessions (default 4),
// each an MCP client on /mcp making SHELLBOX_LOAD_COMMANDS calls (default
// 5) in its own Docker sandbox, and requires zero errors. It logs the p50
// and p99 of call latency (first calls, which create the sandbox, apart);
// timing is reported, never asserted. The README's numbers come from
//
//	SHELLBOX_LOAD_SESSIONS=50 SHELLBOX_LOAD_COMMANDS=20 go test ./cmd/shellbox/ -run TestLoadMCP -v
func TestLoadMCP(t *testing.T) {
	sessions := envInt("SHELLBOX_LOAD_SESSIONS", 4)
	commands := envInt("SHELLBOX_LOAD_COMMANDS", 5)
	_, s := testServe(t, "docker")
	var (
		mu         sync.Mutex
		warm, cold []time.Duration
		errs       []string
	)
	fail := func(format string, a ...any) {
		mu.Lock()
		errs = append(errs, fmt.Sprintf(format, a...))
		mu.Unlock()
	}
	start := time.Now()
	var wg sync.WaitGroup
	for i := range sessions {
		wg.Go(func() {
			session := fmt.Sprintf("load-%d", i)
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
			defer cancel()
			c := mcp.NewClient(&mcp.Implementation{Name: "load", Version: "1"}, nil)
			cs, err := c.Connect(ctx, client.MCPTransport(s.URL+"/mcp", servertest.TokenAcme, session, nil), nil)
			if err != nil {
				fail("%s: connect: %v", session, err)
				return
			}
			defer cs.Close()
			for j := range commands {
				args := fmt.Sprintf(`{"command":"echo %s-%d","description":"load"}`, session, j)
				t0 := time.Now()
				r, err := client.CallMCP(ctx, cs, "bash", json.RawMessage(args))
				d := time.Since(t0)
				want := fmt.Sprintf("%s-%d", session, j)
				if err != nil || r.IsError || r.Text != want {
					fail("%s call %d: %v %q", session, j, err, r.Text)
					continue
				}
				mu.Lock()
				if j == 0 {
					cold = append(cold, d)
				} else {
					warm = append(warm, d)
				}
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	total := time.Since(start)
	for _, e := range errs {
		t.Error(e)
	}
	t.Logf("%d sessions × %d calls through /mcp on docker/runc in %s, %d errors", sessions, commands, total.Round(time.Millisecond), len(errs))
	t.Logf("warm calls: %s", percentiles(warm))
	t.Logf("first call of a session (creates its sandbox): %s", percentiles(cold))
}

func percentiles(lat []time.Duration) string {
	if len(lat) == 0 {
		return "none"
	}
	slices.Sort(lat)
	at := func(p float64) time.Duration { return lat[int(p*float64(len(lat)-1))].Round(100 * time.Microsecond) }
	return fmt.Sprintf("n=%d p50=%s p99=%s max=%s", len(lat), at(0.5), at(0.99), lat[len(lat)-1].Round(100*time.Microsecond))
}

// BenchmarkToolCall compares one warm `true` through tools in process,
// through the REST API (server/client over loopback HTTP) and through /mcp
// (the official MCP client), on the local, docker and containerd backends,
// beside the host's own `bash -c true`: where a warm call's time goes,
// step by step (host fork → the session, agent and exec in the sandbox →
// HTTP → MCP). Run with
//
//	go test ./cmd/shellbox/ -run XXX -bench ToolCall -benchtime 500x
func BenchmarkToolCall(b *testing.B) {
	b.Run("host-fork", func(b *testing.B) { executortest.HostFork(b) })
	for _, kind := range []string{"local", "docker", "containerd"} {
		b.Run(kind, func(b *testing.B) {
			be, s := testServe(b, kind)
			args := json.RawMessage(`{"command":"true","description":"do nothing"}`)
			ctx := context.Background()
			ts, err := be.Toolset(ctx, "acme")
			if err != nil {
				b.Fatal(err)
			}
			rc := client.New(s.URL, servertest.TokenAcme, nil)
			c := mcp.NewClient(&mcp.Implementation{Name: "bench", Version: "1"}, nil)
			cs, err := c.Connect(ctx, client.MCPTransport(s.URL+"/mcp", servertest.TokenAcme, "bench", nil), nil)
			if err != nil {
				b.Fatal(err)
			}
			b.Cleanup(func() { cs.Close() })
			paths := []struct {
				name string
				call func() (tools.Result, error)
			}{
				{"in-process", func() (tools.Result, error) {
					return ts.Call(ctx, tools.Invocation{Tenant: "acme", Session: "bench", Tool: "bash", Args: args}), nil
				}},
				{"rest", func() (tools.Result, error) { return rc.Call(ctx, "bench", "bash", args) }},
				{"mcp", func() (tools.Result, error) { return client.CallMCP(ctx, cs, "bash", args) }},
			}
			// Warm the session (its sandbox) outside the timing.
			if r, err := paths[0].call(); err != nil || r.Text != "(no output)" {
				b.Fatalf("warm-up: %v %q", err, r.Text)
			}
			for _, p := range paths {
				b.Run(p.name, func(b *testing.B) {
					lat := make([]time.Duration, 0, b.N)
					for b.Loop() {
						t0 := time.Now()
						r, err := p.call()
						lat = append(lat, time.Since(t0))
						if err != nil || r.Text != "(no output)" {
							b.Fatalf("%v %q", err, r.Text)
						}
					}
					executortest.ReportPercentiles(b, lat)
				})
			}
		})
	}
}
