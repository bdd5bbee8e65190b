// Command shellbox runs LLM agents' shell tools (bash, bash_output,
// bash_kill, pwsh) with the exact model-facing contract, on a chosen backend.
// This package only wires: configuration, flags and output.
package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"

	"github.com/spf13/cobra"

	"github.com/shellbox/shellbox/config"
)

// exitError carries a process exit code through cobra.
type exitError struct{ code int }

func (e exitError) Error() string { return fmt.Sprintf("exit %d", e.code) }

func main() {
	// The first signal cancels the context: a foreground command is killed
	// (its whole tree) and reported as aborted. A second one kills us.
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	os.Exit(run(ctx, os.Args[1:], os.Stdin, os.Stdout, os.Stderr))
}

func run(ctx context.Context, args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	root := newRoot()
	root.SetArgs(args)
	root.SetIn(stdin)
	root.SetOut(stdout)
	root.SetErr(stderr)
	err := root.ExecuteContext(ctx)
	var ee exitError
	switch {
	case err == nil:
		return 0
	case errors.As(err, &ee):
		return ee.code
	default:
		fmt.Fprintf(stderr, "shellbox: %v\n", err)
		return 2
	}
}

func newRoot() *cobra.Command {
	root := &cobra.Command{
		Use:           "shellbox",
		Short:         "Run agents' shell tools in per-session sandboxes",
		SilenceUsage:  true,
		SilenceErrors: true,
	}
	root.PersistentFlags().String("config", "", "config file (default: ./shellbox.yaml, then $XDG_CONFIG_HOME/shellbox/shellbox.yaml)")
	root.AddCommand(newCallCmd(), newToolsCmd(), newSessionsCmd(), newImageCmd(), newVersionCmd(),
		newServeCmd(), newMCPCmd(), newTokenCmd(), newApprovalsCmd(), newEventsCmd(),
		newPolicyCmd(), newAuditCmd(), newCpCmd(), newQuickstartCmd(), newUsageCmd())
	return root
}

// loadConfig loads the config of a command: the file its --config flag
// names (or the default places), overridden by its flags.
func loadConfig(cmd *cobra.Command) (config.Config, error) {
	file, _ := cmd.Flags().GetString("config")
	return config.Load(cmd.Flags(), file)
}
