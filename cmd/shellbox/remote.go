package main

import (
	"cmp"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/shellbox/shellbox/approval"
	"github.com/shellbox/shellbox/config"
	"github.com/shellbox/shellbox/eventstream"
	"github.com/shellbox/shellbox/internal/termsafe"
	"github.com/shellbox/shellbox/server/client"
)

// addRemoteFlags adds the client-mode flags: with --server (or
// SHELLBOX_SERVER) a command talks to a running `shellbox serve`. The
// variables are the client's own (config.ClientEnv): no server reads them.
func addRemoteFlags(cmd *cobra.Command) {
	cmd.PersistentFlags().String("server", "", "URL of a `shellbox serve` to use instead of a local backend (default $SHELLBOX_SERVER)")
	cmd.PersistentFlags().String("token", "", "bearer token for --server (default $SHELLBOX_TOKEN; the flag is visible to other local users, the variable is not)")
}

// remote returns the client of --server, or nil when the command runs
// against a local backend.
func remote(cmd *cobra.Command) (*client.Client, error) {
	url, _ := cmd.Flags().GetString("server")
	if url == "" {
		url = os.Getenv(config.EnvServer)
	}
	if url == "" {
		return nil, nil
	}
	tok, _ := cmd.Flags().GetString("token")
	if tok == "" {
		tok = os.Getenv(config.EnvToken)
	}
	if tok == "" {
		return nil, errors.New("--server needs a token: --token or $SHELLBOX_TOKEN")
	}
	return client.New(url, tok, nil), nil
}

func requireRemote(cmd *cobra.Command) (*client.Client, error) {
	c, err := remote(cmd)
	if err == nil && c == nil {
		err = errors.New("this command talks to a server: give --server URL (or $SHELLBOX_SERVER) and a token")
	}
	return c, err
}

func newApprovalsCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "approvals",
		Short: "List and decide the tenant's pending approvals on a server",
	}
	addRemoteFlags(cmd)
	var state string
	ls := &cobra.Command{
		Use:   "ls",
		Short: "List approvals (--state pending|approved|denied|expired)",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			c, err := requireRemote(cmd)
			if err != nil {
				return err
			}
			list, err := c.Approvals(cmd.Context(), state)
			if err != nil {
				return err
			}
			w := tabwriter.NewWriter(cmd.OutOrStdout(), 0, 4, 2, ' ', 0)
			// A summary: `approvals show ID` prints the whole call.
			fmt.Fprintln(w, "ID\tSTATE\tSESSION\tTOOL\tRULE\tRUNS\tPERMISSIONS\tCOMMAND")
			for _, a := range list {
				fmt.Fprintf(w, "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n", a.ID, a.State, a.Session, a.Tool, a.Rule,
					runsShort(a), oneLine(cmp.Or(strings.Join(a.Permissions, ","), "-"), 30), oneLine(a.Command, 60))
			}
			return w.Flush()
		},
	}
	ls.Flags().StringVar(&state, "state", "", "only approvals in this state")
	show := &cobra.Command{
		Use:   "show ID",
		Short: "Show one approval in full: the whole command that runs, and how",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			c, err := requireRemote(cmd)
			if err != nil {
				return err
			}
			a, err := c.Approval(cmd.Context(), args[0])
			if err != nil {
				return err
			}
			_, err = io.WriteString(cmd.OutOrStdout(), showApproval(a))
			return err
		},
	}
	decide := func(approve bool) *cobra.Command {
		verb := "deny"
		if approve {
			verb = "approve"
		}
		var reason, approver string
		c := &cobra.Command{
			Use:   verb + " ID",
			Short: "Decide a pending approval: " + verb,
			Args:  cobra.ExactArgs(1),
			RunE: func(cmd *cobra.Command, args []string) error {
				c, err := requireRemote(cmd)
				if err != nil {
					return err
				}
				a, err := c.Decide(cmd.Context(), args[0], approve, approver, reason)
				if err != nil {
					return err
				}
				fmt.Fprintf(cmd.OutOrStdout(), "%s %s\n", a.ID, a.State)
				return nil
			},
		}
		c.Flags().StringVar(&reason, "reason", "", "why (recorded with the decision)")
		c.Flags().StringVar(&approver, "approver", os.Getenv("USER"), "who decides")
		return c
	}
	cmd.AddCommand(ls, show, decide(true), decide(false))
	return cmd
}

func newEventsCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "events [SESSION]",
		Short: "Follow a session's events (all the tenant's without SESSION), one JSON line each",
		Args:  cobra.MaximumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			c, err := requireRemote(cmd)
			if err != nil {
				return err
			}
			session := ""
			if len(args) == 1 {
				session = args[0]
			}
			enc := json.NewEncoder(cmd.OutOrStdout())
			err = c.Events(cmd.Context(), session, func(e eventstream.Event) error { return enc.Encode(e) })
			if cmd.Context().Err() != nil {
				return nil
			}
			return err
		},
	}
	addRemoteFlags(cmd)
	return cmd
}

// remoteSessionsLs lists the tenant's sessions on a server.
func remoteSessionsLs(cmd *cobra.Command, c *client.Client) error {
	list, err := c.Sessions(cmd.Context())
	if err != nil {
		return err
	}
	w := tabwriter.NewWriter(cmd.OutOrStdout(), 0, 4, 2, ' ', 0)
	fmt.Fprintln(w, "TENANT\tSESSION\tRUNTIME\tSTATE\tCREATED\tIMAGE")
	for _, s := range list {
		created := ""
		if !s.Created.IsZero() {
			created = s.Created.Local().Format(time.DateTime)
		}
		fmt.Fprintf(w, "%s\t%s\t%s\t%s\t%s\t%s\n", s.Tenant, s.ID, s.Runtime, s.State, created, s.Image)
	}
	return w.Flush()
}

func oneLine(s string, n int) string {
	b := []rune(termsafe.Escape(s)) // a command cannot disguise itself on the approver's terminal
	for i, r := range b {
		if r == '\n' || r == '\t' {
			b[i] = ' '
		}
	}
	if len(b) > n {
		return string(b[:n]) + "…"
	}
	return string(b)
}

// showApproval is an approval as `approvals show` prints it: every field
// an approver decides on, the command last and whole, byte for byte,
// with control, bidi and invisible characters shown as escapes (so what
// the terminal shows is what runs, not what the text makes it draw).
func showApproval(a approval.Approval) string {
	var b strings.Builder
	line := func(k, v string) { fmt.Fprintf(&b, "%-14s %s\n", k+":", termsafe.Visible(v)) }
	line("id", a.ID)
	line("state", a.State)
	line("session", a.Tenant+"/"+a.Session)
	line("tool", a.Tool)
	line("rule", a.Rule+": "+a.Reason)
	line("runs", runs(a))
	line("workdir", cmp.Or(a.Workdir, "(the session's)"))
	line("permissions", cmp.Or(strings.Join(a.Permissions, ", "), "(none)"))
	if a.Justification != "" {
		line("justification", a.Justification)
	}
	line("deadline", a.Deadline.Local().Format(time.DateTime))
	if a.State != approval.Pending {
		line("decided", strings.TrimSpace(a.Approver+" "+a.DecisionReason))
	}
	fmt.Fprintf(&b, "command (%d bytes, whole):\n%s\n", len(a.Command), termsafe.Visible(a.Command))
	return b.String()
}

// runs says how an approved call runs: in the background no timeout ends
// it, and a granted permission lasts as long as the task.
func runs(a approval.Approval) string {
	perms := ""
	if len(a.Permissions) > 0 {
		perms = "; the permissions granted last until the call ends"
		if a.Background {
			perms = "; the permissions granted last until the task ends"
		}
	}
	if a.Background {
		return "in the background: no timeout ends it" + perms
	}
	return "in the foreground, timeout " + (time.Duration(a.TimeoutMs) * time.Millisecond).String() + perms
}

// runsShort is runs for a table cell: "background" or the timeout.
func runsShort(a approval.Approval) string {
	if a.Background {
		return "background"
	}
	return (time.Duration(a.TimeoutMs) * time.Millisecond).String()
}
