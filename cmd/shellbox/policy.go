package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/spf13/cobra"

	"github.com/shellbox/shellbox/config"
	"github.com/shellbox/shellbox/policies"
)

func newPolicyCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "policy",
		Short: "Check policy files and explain their decisions",
	}
	cmd.AddCommand(newPolicyCheckCmd(), newPolicyExplainCmd())
	return cmd
}

func newPolicyCheckCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "check DIR",
		Short: "Validate every <tenant>.yaml of DIR, their examples and tests included",
		Long: `Validate every <tenant>.yaml of DIR: schema, types, regexes and globs,
conflicting settings, and each rule's examples and the file's tests.

Prints one FILE:LINE: KEY: PROBLEM line per problem and exits 1 if there
is any; exits 0 and says how many policies loaded otherwise.`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			good, bad, err := policies.LoadDir(args[0])
			if err != nil {
				return err
			}
			out := cmd.OutOrStdout()
			for _, e := range bad {
				fmt.Fprintln(out, e)
			}
			if len(bad) > 0 {
				return exitError{1}
			}
			if len(good) == 0 {
				fmt.Fprintf(out, "%s: no policy files (<tenant>.yaml)\n", args[0])
				return exitError{1}
			}
			tenants := make([]string, 0, len(good))
			for t := range good {
				tenants = append(tenants, t)
			}
			slices.Sort(tenants)
			fmt.Fprintf(out, "ok: %d policies (%s)\n", len(good), strings.Join(tenants, ", "))
			return nil
		},
	}
}

func newPolicyExplainCmd() *cobra.Command {
	var (
		dir, tenant, tool, workdir string
		background, egressTarget   bool
		perms                      []string
	)
	cmd := &cobra.Command{
		Use:   "explain [--policies DIR] --tenant T [--tool bash] 'COMMAND' | --egress HOST:PORT",
		Short: "Print the decision on a command and the rule and simple command behind it",
		Long: `Print the decision on COMMAND under the tenant's policy, without running it.

The first line is the decision: allow, ask or deny. Then the rule that
decided, the simple command that triggered it, the reason, and the policy
file. A tenant without a file of its own gets default.yaml.

With --egress, the argument is a destination (host:port) of the sandbox's
egress proxy instead, decided by sandbox.network.allow (allow or deny). The
server's egress.blocked ranges apply at connection time, to the addresses a
name resolves to; they are not checked here.`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if dir == "" {
				file, _ := cmd.Flags().GetString("config")
				cfg, err := config.Load(nil, file)
				if err != nil {
					return err
				}
				dir = cfg.Policies.Dir
			}
			if dir == "" {
				return errors.New("no policies directory: give --policies DIR or set policies.dir")
			}
			e, err := policies.Open(dir, policies.Options{NoWatch: true})
			if err != nil {
				return err
			}
			defer e.Close()
			out := cmd.OutOrStdout()
			if egressTarget {
				pol, err := e.Policy(tenant)
				if err != nil {
					return err
				}
				decision, reason := "allow", "sandbox.network.allow lists it"
				if err := pol.CheckEgress(args[0]); err != nil {
					decision, reason = "deny", err.Error()
				}
				fmt.Fprintln(out, decision)
				fmt.Fprintf(out, "rule: sandbox.network.allow\nreason: %s\npolicy: %s\n", reason, pol.File)
				return nil
			}
			x, err := e.ExplainCall(tenant, tool, args[0], workdir, background, perms)
			if err != nil {
				return err
			}
			fmt.Fprintln(out, x.Decision)
			fmt.Fprintf(out, "rule: %s\n", x.Rule)
			fmt.Fprintf(out, "command: %s\n", x.SimpleCommand)
			fmt.Fprintf(out, "reason: %s\n", x.Reason)
			fmt.Fprintf(out, "policy: %s\n", x.Policy)
			if err := e.Ready(); err != nil {
				fmt.Fprintf(cmd.ErrOrStderr(), "shellbox: warning: some policy files do not load:\n%v\n", err)
			}
			return nil
		},
	}
	cmd.Flags().StringVar(&dir, "policies", "", "policies directory (default policies.dir)")
	cmd.Flags().StringVar(&tenant, "tenant", "default", "tenant whose policy decides")
	cmd.Flags().StringVar(&tool, "tool", "bash", "tool: bash or pwsh")
	cmd.Flags().StringVar(&workdir, "workdir", "", "workdir of the call")
	cmd.Flags().BoolVar(&background, "background", false, "the call runs in the background")
	cmd.Flags().StringSliceVar(&perms, "permission", nil, "sandbox_permissions the call asks for (repeatable)")
	cmd.Flags().BoolVar(&egressTarget, "egress", false, "the argument is an egress destination, host:port, not a command")
	return cmd
}

func newAuditCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "audit",
		Short: "Read the audit log of policy decisions",
	}
	var (
		tenant, file string
		n            int
		asJSON       bool
	)
	tail := &cobra.Command{
		Use:   "tail [--tenant T] [--file F] [-n N]",
		Short: "Print the last N decisions (rotated files included), oldest first",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			if file == "" {
				cfgFile, _ := cmd.Flags().GetString("config")
				cfg, err := config.Load(nil, cfgFile)
				if err != nil {
					return err
				}
				file = cfg.Audit.File
			}
			recs, skipped, err := policies.ReadAudit(file, n, tenant)
			if err != nil {
				return err
			}
			out := cmd.OutOrStdout()
			for _, r := range recs {
				if asJSON {
					b, _ := jsonLine(r)
					out.Write(b)
					continue
				}
				fmt.Fprintln(out, formatRecord(r))
			}
			if skipped > 0 {
				fmt.Fprintf(cmd.ErrOrStderr(), "shellbox: %d lines of %s are not audit records\n", skipped, file)
			}
			return nil
		},
	}
	tail.Flags().StringVar(&tenant, "tenant", "", "only this tenant's decisions")
	tail.Flags().StringVar(&file, "file", "", "audit log (default audit.file)")
	tail.Flags().IntVarP(&n, "lines", "n", 20, "how many decisions")
	tail.Flags().BoolVar(&asJSON, "json", false, "print the records as JSON lines")
	cmd.AddCommand(tail)
	return cmd
}

// formatRecord is one decision on one line:
// TIME TENANT/SESSION TOOL DECISION RULE [by APPROVER] [+PERMS] COMMAND.
func formatRecord(r policies.Record) string {
	var b strings.Builder
	fmt.Fprintf(&b, "%s %s/%s %s %s %s", r.Time.UTC().Format("2006-01-02T15:04:05Z"), r.Tenant, r.Session, r.Tool, r.Decision, r.Rule)
	if r.Approver != "" {
		fmt.Fprintf(&b, " by %s", r.Approver)
	}
	if len(r.Escalation) > 0 {
		fmt.Fprintf(&b, " +%s", strings.Join(r.Escalation, ","))
	}
	fmt.Fprintf(&b, " %q", r.Command)
	return b.String()
}

// policyFor opens the policies of cfg for a one-shot call: no watching, and
// an ask is denied at once (nobody could answer it). close releases the
// engine and the audit log.
func policyFor(cfg config.Config) (*policies.Engine, *policies.Policy, func(), error) {
	var audit *policies.Audit
	if cfg.Audit.File != "" {
		a, err := policies.OpenAudit(cfg.Audit.File, policies.AuditOptions{MaxBytes: cfg.Audit.MaxBytes, MaxFiles: cfg.Audit.MaxFiles})
		if err != nil {
			return nil, nil, nil, err
		}
		audit = a
	}
	closeAudit := func() {
		if audit != nil {
			audit.Close()
		}
	}
	e, err := policies.Open(cfg.Policies.Dir, policies.Options{NoWatch: true, NoApprover: true, Audit: audit})
	if err != nil {
		closeAudit()
		return nil, nil, nil, err
	}
	p, err := e.Policy(cfg.Tenant)
	if err != nil {
		e.Close()
		closeAudit()
		return nil, nil, nil, err
	}
	return e, p, func() { e.Close(); closeAudit() }, nil
}

func jsonLine(v any) ([]byte, error) {
	b, err := json.Marshal(v)
	return append(b, '\n'), err
}
