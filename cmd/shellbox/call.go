package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"time"

	"github.com/spf13/cobra"

	"github.com/shellbox/shellbox/config"
	"github.com/shellbox/shellbox/executor/local"
	"github.com/shellbox/shellbox/internal/termsafe"
	"github.com/shellbox/shellbox/policies"
	"github.com/shellbox/shellbox/tools"
)

// maxStdinArgs bounds arguments read from standard input.
const maxStdinArgs = 1 << 20

func newCallCmd() *cobra.Command {
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "call TOOL ['JSON-ARGS' | -]",
		Short: "Run one tool call and print exactly what the model would see",
		Long: `Run one tool call and print the model-facing text on stdout.

Exit status: 0 for a result (a non-zero exit of the command is a result too),
1 for an error result ("Error: ..."), 2 for a usage or configuration error.
JSON-ARGS "-" (or none) reads the arguments from standard input.
On a terminal, control characters of the output (escape sequences) are shown
as \xHH or \uHHHH instead of being sent; a pipe or file gets the text as is.`,
		Args: cobra.RangeArgs(1, 2),
		RunE: func(cmd *cobra.Command, args []string) error {
			raw, err := callArgs(cmd.InOrStdin(), args)
			if err != nil {
				return err
			}
			c, err := remote(cmd)
			if err != nil {
				return err
			}
			if c != nil {
				session, _ := cmd.Flags().GetString("session")
				res, err := c.Call(cmd.Context(), session, args[0], raw)
				if err != nil {
					return err
				}
				return printResult(cmd, res, asJSON)
			}
			cfg, err := loadConfig(cmd)
			if err != nil {
				return err
			}
			ctx := cmd.Context()
			if _, err := chooseBackend(ctx, &cfg); err != nil {
				return err
			}
			runtime, _ := cmd.Flags().GetString("runtime")
			var pol *policies.Engine
			if cfg.Policies.Dir != "" {
				// The tenant's policy decides the call and sets the limits
				// and the sandbox; an ask is denied (no approver here).
				e, p, closePolicies, err := policyFor(cfg)
				if err != nil {
					return err
				}
				defer closePolicies()
				pol = e
				cfg.Limits = p.Limits
			}
			ts, watch, cleanup, err := newToolset(ctx, cfg, runtime, pol, cmd.ErrOrStderr())
			if err != nil {
				return err
			}
			stop := watch.announce(cfg.Tenant, cfg.Session, cmd.ErrOrStderr())
			res := ts.Call(ctx, tools.Invocation{Tenant: cfg.Tenant, Session: cfg.Session, Tool: args[0], Args: raw})
			stop()
			if bg, ok := res.Value.(*tools.Background); ok && cfg.Backend == "local" {
				fmt.Fprintf(cmd.ErrOrStderr(), "shellbox: the local backend keeps background tasks only while this process runs: task %s is killed when it exits\n", bg.TaskID)
			}
			cleanup()
			return printResult(cmd, res, asJSON)
		},
	}
	addRemoteFlags(cmd)
	cmd.Flags().String("backend", config.BackendAuto, backendUsage)
	cmd.Flags().String("tenant", "default", "tenant the session belongs to (docker backend)")
	cmd.Flags().String("runtime", "", "container runtime for a new sandbox: runc or runsc (default sandbox.runtime)")
	cmd.Flags().String("session", "default", "session id: scopes tasks, spill files and the sandbox")
	cmd.Flags().String("policies", "", "policies directory: the tenant's policy decides the call (default policies.dir)")
	cmd.Flags().BoolVar(&asJSON, "json", false, "print the whole result as JSON (text, isError, typed result, notices)")
	return cmd
}

// printResult prints a tool result: the model text on stdout and notices on
// stderr, or the whole result as JSON; an error result exits 1.
func printResult(cmd *cobra.Command, res tools.Result, asJSON bool) error {
	out := termsafe.Writer(cmd.OutOrStdout())
	if asJSON {
		enc := json.NewEncoder(out)
		enc.SetIndent("", "  ")
		if err := enc.Encode(res); err != nil {
			return err
		}
	} else {
		fmt.Fprintln(out, res.Text)
		for _, n := range res.Notices {
			fmt.Fprintf(cmd.ErrOrStderr(), "notice: %s\n", n.Text)
		}
	}
	if res.IsError {
		return exitError{1}
	}
	return nil
}

// callArgs returns the JSON arguments from the command line or stdin.
func callArgs(stdin io.Reader, args []string) (json.RawMessage, error) {
	if len(args) == 2 && args[1] != "-" {
		return json.RawMessage(args[1]), nil
	}
	b, err := io.ReadAll(io.LimitReader(stdin, maxStdinArgs+1))
	if err != nil {
		return nil, fmt.Errorf("read arguments from stdin: %w", err)
	}
	if len(b) > maxStdinArgs {
		return nil, fmt.Errorf("arguments on stdin exceed %d bytes", maxStdinArgs)
	}
	return b, nil
}

// newToolset wires the session layer of the configured backend under the
// tools, for one call of cfg.Tenant. pol (may be nil) is the policy engine:
// it decides the call and sets the tenant's limits and sandbox. runtime, if
// set, is the sandbox runtime asked for (within the policy; without one it
// replaces sandbox.runtime). warn hears what the layer logs (refused egress).
// cleanup stops watchers and releases the backend (killing the local
// backend's tasks).
func newToolset(ctx context.Context, cfg config.Config, runtime string, pol *policies.Engine, warn io.Writer) (*tools.Toolset, *creationWatch, func(), error) {
	if cfg.Backend == "local" {
		// Leftovers of a crashed run (their creator is gone) are killed and
		// removed; a failure here does not stop this call.
		_, _ = local.Cleanup("")
	}
	if runtime != "" && pol == nil {
		cfg.Sandbox.Runtime = runtime
	}
	if runtime != "" && pol != nil {
		// A flag the policy contradicts is a usage error, not a result.
		p, err := pol.Policy(cfg.Tenant)
		if err != nil {
			return nil, nil, nil, err
		}
		if runtime != p.Runtime {
			return nil, nil, nil, fmt.Errorf("runtime %s is not allowed by policy %s (sandbox.runtime: %s)", runtime, p.Tenant, p.Runtime)
		}
	}
	log := slog.New(slog.NewTextHandler(warn, &slog.HandlerOptions{Level: slog.LevelWarn}))
	watch := newCreationWatch()
	l, closeRuntime, err := buildLayer(cfg, pol, nil, nil, log, true, watch, nil)
	if err != nil {
		return nil, nil, nil, err
	}
	ts, err := l.Toolset(ctx, cfg.Tenant)
	if err != nil {
		l.Close(ctx)
		closeRuntime()
		return nil, nil, nil, err
	}
	cleanup := func() {
		// Cleanup must finish even if the caller's context is gone.
		cctx, cancel := context.WithTimeout(context.Background(), cfg.Limits.Grace+5*time.Second)
		defer cancel()
		_ = l.Close(cctx)
		_ = closeRuntime()
	}
	return ts, watch, cleanup, nil
}
