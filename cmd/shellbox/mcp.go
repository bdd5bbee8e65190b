package main

import (
	"context"
	"time"

	"github.com/spf13/cobra"

	"github.com/shellbox/shellbox/config"
	"github.com/shellbox/shellbox/server"
	"github.com/shellbox/shellbox/session"
)

func newMCPCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "mcp",
		Short: "Serve the tools over MCP on stdin/stdout, for a local harness",
		Long: `Serve the tools over MCP (JSON-RPC on stdin/stdout) as the configured tenant
and session, on the configured backend. No token: whoever can start this
process is the tenant. Logs go to stderr as JSON, the first line naming the
backend.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			cfg, err := loadConfig(cmd)
			if err != nil {
				return err
			}
			ctx := cmd.Context()
			log := newLogger(cmd.ErrOrStderr(), cfg.Server.LogLevel)
			choice, err := chooseBackend(ctx, &cfg)
			if err != nil {
				logProbes(log, choice)
				return err
			}
			logBackend(log, cfg.Backend, choice)
			pol, closePolicies, err := servePolicies(cfg, log, true, nil)
			if err != nil {
				return err
			}
			defer closePolicies()
			var (
				b            *session.Service
				closeRuntime func() error
			)
			srv, err := server.New(server.Config{
				NewBackend: func(n server.Notifier, m server.Metrics) (server.Backend, error) {
					var err error
					b, closeRuntime, err = newLayer(cfg, pol, n, m, log)
					return b, err
				},
				Logger: log, Version: versionString(),
			})
			if err != nil {
				return err
			}
			defer func() {
				cctx, cancel := context.WithTimeout(context.Background(), cfg.Limits.Grace+5*time.Second)
				defer cancel()
				b.Close(cctx)
				closeRuntime()
			}()
			in, out := cmd.InOrStdin(), cmd.OutOrStdout()
			return srv.ServeStdio(ctx, cfg.Tenant, cfg.Session, readCloser{in}, writeCloser{out})
		},
	}
	cmd.Flags().String("backend", config.BackendAuto, backendUsage)
	cmd.Flags().String("tenant", "default", "tenant the session belongs to")
	cmd.Flags().String("session", "default", "session id: scopes tasks, spill files and the sandbox")
	cmd.Flags().String("policies", "", "per-tenant policy files (policies.dir); an ask is denied at once (no approver on stdio)")
	return cmd
}

type readCloser struct {
	r interface{ Read([]byte) (int, error) }
}

func (r readCloser) Read(p []byte) (int, error) { return r.r.Read(p) }
func (r readCloser) Close() error               { return nil }

type writeCloser struct {
	w interface{ Write([]byte) (int, error) }
}

func (w writeCloser) Write(p []byte) (int, error) { return w.w.Write(p) }
func (w writeCloser) Close() error                { return nil }
