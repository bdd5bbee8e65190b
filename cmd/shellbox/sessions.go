package main

import (
	"context"
	"fmt"
	"os"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/shellbox/shellbox/images"
	"github.com/shellbox/shellbox/server"
	"github.com/shellbox/shellbox/session"
)

// sessionDriver suspends and resumes sessions: a server's client (its
// token's tenant), or this host's engine as one tenant.
type sessionDriver interface {
	SuspendSession(ctx context.Context, session string) (server.SessionInfo, error)
	ResumeSession(ctx context.Context, session, snapshot string) (server.SessionInfo, error)
}

// localDriver is the session layer on this host's engine, as one tenant.
type localDriver struct {
	l      *session.Service
	tenant string
}

func (d localDriver) SuspendSession(ctx context.Context, s string) (server.SessionInfo, error) {
	return d.l.SuspendSession(ctx, d.tenant, s)
}

func (d localDriver) ResumeSession(ctx context.Context, s, snapshot string) (server.SessionInfo, error) {
	return d.l.ResumeSession(ctx, d.tenant, s, snapshot)
}

// eachSession does op to each session, through --server or this host's
// engine, and prints what it did ("<verb> <session> (<state>)").
func eachSession(cmd *cobra.Command, args []string, verb string, op func(context.Context, sessionDriver, string) (server.SessionInfo, error)) error {
	var d sessionDriver
	c, err := remote(cmd)
	if err != nil {
		return err
	}
	if c != nil {
		d = c
	} else {
		b, err := layerFromFlags(cmd)
		if err != nil {
			return err
		}
		defer b.close()
		d = localDriver{l: b.Service, tenant: b.tenant}
	}
	failed := false
	for _, s := range args {
		si, err := op(cmd.Context(), d, s)
		if err != nil {
			fmt.Fprintf(cmd.ErrOrStderr(), "shellbox: session %s: %v\n", s, err)
			failed = true
			continue
		}
		extra := ""
		if si.Snapshot != "" {
			extra = ", snapshot " + si.Snapshot
		}
		fmt.Fprintf(cmd.OutOrStdout(), "%s %s (%s%s)\n", verb, s, si.State, extra)
	}
	if failed {
		return exitError{1}
	}
	return nil
}

func newSessionsCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "sessions",
		Short: "List and delete sessions: the docker or containerd backend's sandboxes, or a server's (--server)",
	}
	cmd.PersistentFlags().String("tenant", "default", "tenant whose sessions to act on (local engine; with --server the token's tenant)")
	addRemoteFlags(cmd)
	ls := &cobra.Command{
		Use:   "ls",
		Short: "List this owner's sandboxes and suspended sessions (all tenants)",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if c, err := remote(cmd); err != nil || c != nil {
				if err != nil {
					return err
				}
				return remoteSessionsLs(cmd, c)
			}
			b, err := layerFromFlags(cmd)
			if err != nil {
				return err
			}
			defer b.close()
			list, err := b.Sandboxes(cmd.Context())
			if err != nil {
				return err
			}
			w := tabwriter.NewWriter(cmd.OutOrStdout(), 0, 4, 2, ' ', 0)
			fmt.Fprintln(w, "TENANT\tSESSION\tRUNTIME\tSTATE\tCREATED\tCONTAINER")
			for _, sb := range list {
				id := sb.ID
				if len(id) > 12 {
					id = id[:12]
				}
				fmt.Fprintf(w, "%s\t%s\t%s\t%s\t%s\t%s\n", sb.Tenant, sb.Session, sb.Runtime, sb.State,
					sb.Created.Local().Format(time.DateTime), id)
			}
			// Suspended sessions have no sandbox: the snapshot store
			// lists them.
			sus, err := b.Suspended(cmd.Context())
			if err != nil {
				return err
			}
			for _, si := range sus {
				fmt.Fprintf(w, "%s\t%s\t%s\t%s\t%s\t%s\n", si.Tenant, si.ID, "-", si.State,
					si.Created.Local().Format(time.DateTime), "-")
			}
			return w.Flush()
		},
	}
	rm := &cobra.Command{
		Use:   "rm SESSION...",
		Short: "Delete sessions' sandboxes, their background tasks and host directories",
		Args:  cobra.MinimumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			c, err := remote(cmd)
			if err != nil {
				return err
			}
			if c != nil {
				failed := false
				for _, s := range args {
					if err := c.DeleteSession(cmd.Context(), s); err != nil {
						fmt.Fprintf(cmd.ErrOrStderr(), "shellbox: session %s: %v\n", s, err)
						failed = true
						continue
					}
					fmt.Fprintf(cmd.OutOrStdout(), "removed %s\n", s)
				}
				if failed {
					return exitError{1}
				}
				return nil
			}
			b, err := layerFromFlags(cmd)
			if err != nil {
				return err
			}
			defer b.close()
			failed := false
			for _, s := range args {
				if err := b.DeleteSession(cmd.Context(), b.tenant, s); err != nil {
					fmt.Fprintf(cmd.ErrOrStderr(), "shellbox: session %s/%s: %v\n", b.tenant, s, err)
					failed = true
					continue
				}
				fmt.Fprintf(cmd.OutOrStdout(), "removed %s/%s\n", b.tenant, s)
			}
			if failed {
				return exitError{1}
			}
			return nil
		},
	}
	logs := &cobra.Command{
		Use:   "logs SESSION",
		Short: "Print the recent log of the session's agent: which command's tree it signalled, and why",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if c, err := remote(cmd); err != nil || c != nil {
				if err != nil {
					return err
				}
				return fmt.Errorf("sessions logs reads the agent through the engine on this host; it does not go through --server")
			}
			b, err := layerFromFlags(cmd)
			if err != nil {
				return err
			}
			defer b.close()
			s, err := b.AgentLog(cmd.Context(), b.tenant, args[0])
			if err != nil {
				return fmt.Errorf("session %s/%s: %w", b.tenant, args[0], err)
			}
			_, err = fmt.Fprint(cmd.OutOrStdout(), s)
			return err
		},
	}
	suspend := &cobra.Command{
		Use:   "suspend SESSION...",
		Short: "Suspend sessions: their workspaces to the snapshot store, their sandboxes removed (running background tasks are killed)",
		Args:  cobra.MinimumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return eachSession(cmd, args, "suspended", func(ctx context.Context, c sessionDriver, s string) (server.SessionInfo, error) {
				return c.SuspendSession(ctx, s)
			})
		},
	}
	var from string
	resume := &cobra.Command{
		Use:   "resume SESSION...",
		Short: "Resume suspended sessions now: a sandbox each, the workspace restored (else their next call does it)",
		Args:  cobra.MinimumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if from != "" && len(args) != 1 {
				return fmt.Errorf("--snapshot names one session's snapshot: give one session")
			}
			return eachSession(cmd, args, "resumed", func(ctx context.Context, c sessionDriver, s string) (server.SessionInfo, error) {
				return c.ResumeSession(ctx, s, from)
			})
		},
	}
	resume.Flags().StringVar(&from, "snapshot", "", "resume from this snapshot of the session (say the one before a corrupt newest)")
	cmd.AddCommand(ls, rm, logs, suspend, resume)
	return cmd
}

// sessionsLayer is the session layer of the configured sandboxed backend
// (docker when the configuration says local; auto's choice when it says
// nothing), for the tenant of the flags.
type sessionsLayer struct {
	*session.Service
	tenant string
	close  func()
}

func layerFromFlags(cmd *cobra.Command) (sessionsLayer, error) {
	cfg, err := loadConfig(cmd)
	if err != nil {
		return sessionsLayer{}, err
	}
	if cfg.Backend == "local" {
		// The local backend keeps no sessions: the engine's are meant.
		cfg.Backend = "docker"
	}
	if _, err := chooseBackend(cmd.Context(), &cfg); err != nil {
		return sessionsLayer{}, err
	}
	l, closeRuntime, err := newLayer(cfg, nil, nil, nil, nil)
	if err != nil {
		return sessionsLayer{}, err
	}
	return sessionsLayer{l, cfg.Tenant, func() { l.Close(context.Background()); closeRuntime() }}, nil
}

func newImageCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "image",
		Short: "Build sandbox images without a registry",
	}
	var test, server, toContainerd bool
	var opts images.Options
	var serverBins images.ServerOptions
	build := &cobra.Command{
		Use:   "build",
		Short: "Build the default sandbox image offline (debootstrap), the test image or the server image, into Docker, containerd or a file",
		Long: `Build the default sandbox image offline (debootstrap, as root) or, with --test,
the small test image from this host's binaries, and import it into Docker; with
--containerd into the containerd of the containerd.* settings (address,
namespace, snapshotter; SHELLBOX_CONTAINERD_ADDRESS reaches containerd.address),
unpacked; with --output FILE as an OCI image archive (ctr images import FILE).
With --server, the server image of the Helm chart (and kube.agentImage): this
shellbox and the agent (static builds), a non-root user, nothing else; into a
file (--output) or containerd (--containerd; a node's is namespace k8s.io).`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			progress := cmd.ErrOrStderr()
			if toContainerd {
				cfg, err := loadConfig(cmd)
				if err != nil {
					return err
				}
				opts.Containerd = &images.Containerd{Address: cfg.Containerd.Address,
					Namespace: cfg.Containerd.Namespace, Snapshotter: cfg.Containerd.Snapshotter}
			}
			if server {
				if serverBins.Shellbox == "" {
					self, err := os.Executable()
					if err != nil {
						return err
					}
					serverBins.Shellbox = self
				}
				if serverBins.Agent == "" {
					a, err := agentBinary("")
					if err != nil {
						return err
					}
					serverBins.Agent = a
				}
				serverBins.Tag, serverBins.Containerd, serverBins.Output = opts.Tag, opts.Containerd, opts.Output
				return images.BuildServerImage(cmd.Context(), serverBins, progress)
			}
			if test {
				to := images.TestOptions{Tag: opts.Tag, Containerd: opts.Containerd, Output: opts.Output}
				return images.BuildTestImage(cmd.Context(), to, progress)
			}
			if os.Geteuid() != 0 {
				return fmt.Errorf("the offline build runs debootstrap, which needs root")
			}
			return images.BuildOffline(cmd.Context(), opts, progress)
		},
	}
	build.Flags().BoolVar(&test, "test", false, "build the small test image ("+images.TestImage+") from this host's binaries instead")
	build.Flags().BoolVar(&server, "server", false, "build the server image ("+images.ServerImage+") from static shellbox and shellbox-agent binaries instead")
	build.Flags().StringVar(&serverBins.Shellbox, "shellbox", "", "with --server: the static shellbox binary (default: this one)")
	build.Flags().StringVar(&serverBins.Agent, "agent", "", "with --server: the static shellbox-agent binary (default: next to shellbox, else PATH)")
	build.Flags().BoolVar(&toContainerd, "containerd", false, "import into containerd (containerd.address, containerd.namespace) instead of Docker")
	build.Flags().StringVar(&opts.Output, "output", "", "write an OCI image archive to this file instead of Docker")
	build.Flags().StringVar(&opts.Tag, "tag", "", "image tag (default "+images.SandboxImage+", with --test "+images.TestImage+", with --server "+images.ServerImage+")")
	build.Flags().StringVar(&opts.Mirror, "mirror", "", "Debian mirror URL (default: this host's apt source, or $"+images.MirrorEnv+")")
	cmd.AddCommand(build)
	return cmd
}
