package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"time"

	"github.com/spf13/cobra"

	"github.com/shellbox/shellbox/config"
	"github.com/shellbox/shellbox/server"
	"github.com/shellbox/shellbox/session"
	"github.com/shellbox/shellbox/usage"
)

func newServeCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "serve",
		Short: "Serve the tools over MCP (/mcp) and a REST API to authenticated tenants",
		Long: `Serve the tools on one HTTP listener: MCP over streamable HTTP at /mcp, the
REST API under /v1 (OpenAPI document at /openapi.json), /healthz, /readyz and
Prometheus /metrics. Tenants and their bearer-token hashes come from the
config (server.tenants); see the README's Server section.

SIGTERM or SIGINT: for server.drainDelay keep serving but fail /readyz and
close each connection after its answer (clients move to another replica),
then stop accepting, let tool calls in flight finish within
server.shutdownTimeout, and exit leaving sandboxes and background tasks
running for the next process to adopt.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			cfg, err := loadConfig(cmd)
			if err != nil {
				return err
			}
			if len(cfg.Server.Tenants) == 0 {
				return errors.New("config: server.tenants is empty: no one could authenticate (make a token with `shellbox token`)")
			}
			log := newLogger(cmd.ErrOrStderr(), cfg.Server.LogLevel)
			choice, err := chooseBackend(cmd.Context(), &cfg)
			if err != nil {
				logProbes(log, choice)
				return err
			}
			logBackend(log, cfg.Backend, choice)
			return serve(cmd.Context(), cfg, log)
		},
	}
	cmd.Flags().String("backend", config.BackendAuto, backendUsage)
	cmd.Flags().String("listen", "127.0.0.1:8080", "address to listen on (server.listen)")
	cmd.Flags().String("policies", "", "per-tenant policy files (policies.dir); unset: every call is allowed")
	return cmd
}

func newLogger(w io.Writer, level string) *slog.Logger {
	var l slog.Level
	_ = l.UnmarshalText([]byte(level))
	return slog.New(slog.NewJSONHandler(w, &slog.HandlerOptions{Level: l}))
}

// serve runs the server until ctx is done, then shuts down gracefully.
func serve(ctx context.Context, cfg config.Config, log *slog.Logger) error {
	// On kube the replicas of a release share the asks for approval.
	store, closeStore, err := approvalStore(ctx, cfg, log)
	if err != nil {
		return err
	}
	defer closeStore()
	pol, closePolicies, err := servePolicies(cfg, log, false, store)
	if err != nil {
		return err
	}
	defer closePolicies()
	var approvals server.Approvals
	if pol != nil {
		approvals = session.Approvals(pol)
	}
	if cfg.Backend == "kube" {
		rt, err := openKube(cfg)
		if err != nil {
			return err
		}
		if err := prepareKube(ctx, rt); err != nil {
			return err
		}
	}
	// On kube the replicas of a release hear each other's notices.
	relay, closeRelay, err := eventRelay(ctx, cfg, log)
	if err != nil {
		return err
	}
	defer closeRelay()
	tenants := map[string]server.TenantConfig{}
	for name, t := range cfg.Server.Tenants {
		tenants[name] = t.TenantConfig
	}
	var (
		b            *session.Service
		closeRuntime func() error
	)
	meter, err := usageMeter(ctx, cfg)
	if err != nil {
		return err
	}
	// Open while the layer takes over a previous process's sandboxes (Start
	// below): the server listens and answers its probes meanwhile.
	starting := make(chan struct{})
	srv, err := server.New(server.Config{
		Starting: starting,
		NewBackend: func(n server.Notifier, m server.Metrics) (server.Backend, error) {
			var err error
			b, closeRuntime, err = newMeasuredLayer(cfg, pol, n, m, meter, log)
			return b, err
		},
		Usage:             meter,
		Approvals:         approvals,
		Relay:             relay,
		Tenants:           tenants,
		MaxBodyBytes:      cfg.Server.MaxBodyBytes,
		EventBuffer:       cfg.Server.EventBuffer,
		MCPSessionTimeout: cfg.Server.MCPSessionTimeout,
		Logger:            log,
		Version:           versionString(),
		Console:           consoleConfig(cfg),
	})
	if err != nil {
		return err
	}
	defer closeRuntime()
	life, stopLife := context.WithCancel(context.Background())
	defer stopLife()

	ln, err := net.Listen("tcp", cfg.Server.Listen)
	if err != nil {
		b.Close(context.Background())
		return err
	}
	hs := &http.Server{
		Handler:           srv.Handler(),
		ReadHeaderTimeout: 10 * time.Second,
		IdleTimeout:       2 * time.Minute,
		ErrorLog:          slog.NewLogLogger(log.Handler(), slog.LevelWarn),
		// Requests do not inherit the process's signal context: a SIGTERM
		// must not abort the calls it lets finish.
		BaseContext: func(net.Listener) context.Context { return context.Background() },
	}
	served := make(chan error, 1)
	go func() { served <- hs.Serve(ln) }()
	// Sandboxes (and background tasks) of a previous process of this owner
	// are taken over; idle ones are reaped from now on. Until then /readyz
	// answers "starting" and calls wait (server.Config.Starting): a
	// liveness probe sees the process alive however long adopting takes.
	b.Start(life)
	close(starting)
	// Logged once calls are served: tests and scripts wait for this line.
	log.Info("listening", "addr", ln.Addr().String(), "backend", cfg.Backend, "tenants", len(tenants), "version", versionString())
	if meter != nil {
		// A replica that does not sample (kube: all but the leader)
		// writes the calls it counted and reads the fleet's day.
		go meter.Sync(life, usage.FlushInterval, log)
	}

	select {
	case err := <-served:
		b.Close(context.Background())
		return fmt.Errorf("serve: %w", err)
	case <-ctx.Done():
	}
	if d := cfg.Server.DrainDelay; d > 0 {
		// Behind a load balancer: clients move to other replicas on
		// their next call before this one refuses any (server.Retire).
		srv.Retire()
		log.Info("retiring: serving on, closing each connection after its answer", "for", d.String())
		time.Sleep(d)
	}
	log.Info("shutting down", "deadline", cfg.Server.ShutdownTimeout.String())
	sctx, cancel := context.WithTimeout(context.Background(), cfg.Server.ShutdownTimeout)
	defer cancel()
	drained := make(chan error, 1)
	go func() { drained <- srv.Drain(sctx) }()
	shutErr := hs.Shutdown(sctx)
	drainErr := <-drained
	if shutErr != nil {
		// Streams or calls outlived the deadline: cut them.
		hs.Close()
	}
	stopLife()
	closeErr := b.Close(context.Background())
	log.Info("stopped", "drain", errString(drainErr), "shutdown", errString(shutErr))
	return closeErr
}

func errString(err error) string {
	if err == nil {
		return "ok"
	}
	return err.Error()
}
