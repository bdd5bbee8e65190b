package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"

	"github.com/spf13/cobra"

	"github.com/shellbox/shellbox/config"
	"github.com/shellbox/shellbox/executor/files"
	"github.com/shellbox/shellbox/policies"
	"github.com/shellbox/shellbox/server"
	"github.com/shellbox/shellbox/server/client"
	"github.com/shellbox/shellbox/session"
)

func newCpCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "cp SRC DST",
		Short: "Copy files and directories between this machine and a session's sandbox",
		Long: `Copy a file or a directory between this machine and a session, as docker cp does:

  shellbox cp ./data.csv s1:/workspace/          into the directory (s1:/workspace/data.csv)
  shellbox cp ./data.csv s1:in/renamed.csv       to that name (relative to /workspace)
  shellbox cp ./src s1:/workspace/src            a directory: created, or copied into it if it exists
  shellbox cp s1:/workspace/out ./out            out of the sandbox
  shellbox cp s1:/workspace/out - > out.tar      a tar on stdout ("-" as SRC reads one from stdin)

SESSION:PATH names a path in the session's sandbox (created on first use), absolute
inside its root or relative to it; a local path with a colon is written ./a:b. Paths
are resolved inside the sandbox, with no ".." or symlink leading out; uploads are atomic
(a file appears whole or not at all) and owned by the sandbox user; the tenant's policy
(files:) may deny paths and caps the bytes of one copy. Against a server (--server) or
the configured backend (--backend) like "shellbox call".`,
		Args: cobra.ExactArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			t, closeT, err := transferFromFlags(cmd)
			if err != nil {
				return err
			}
			defer closeT()
			src, dst := client.ParsePath(args[0]), client.ParsePath(args[1])
			switch {
			case src.Session != "" && dst.Session != "":
				return errors.New("copying between two sessions is not supported: copy out, then in")
			case src.Session == "" && dst.Session == "":
				return errors.New("one of SRC and DST must be SESSION:PATH")
			case dst.Session != "":
				w, to, err := client.CopyIn(cmd.Context(), t, src.Path, dst, cmd.InOrStdin())
				if err != nil {
					return err
				}
				fmt.Fprintf(cmd.ErrOrStderr(), "copied %s to %s\n", client.Describe(w), to)
				return nil
			}
			w, err := client.CopyOut(cmd.Context(), t, src, dst.Path, cmd.OutOrStdout())
			if err != nil || dst.Path == "-" {
				return err
			}
			fmt.Fprintf(cmd.ErrOrStderr(), "copied %s to %s\n", client.Describe(w), dst.Path)
			return nil
		},
	}
	addRemoteFlags(cmd)
	cmd.Flags().String("backend", config.BackendAuto, "where the session is, without --server: docker, containerd, local, or auto (docker if its engine answers, else containerd)")
	cmd.Flags().String("tenant", "default", "tenant the session belongs to (without --server)")
	cmd.Flags().String("policies", "", "policies directory: the tenant's files rules decide the copy (default policies.dir)")
	return cmd
}

// layerTransfer is the configured backend's session layer as a transfer.
type layerTransfer struct {
	l      *session.Service
	tenant string
}

func (t layerTransfer) PutFile(ctx context.Context, s, p string, body io.Reader, o client.PutOptions) (files.Written, error) {
	size := o.Size
	if size <= 0 {
		size = -1
	}
	return t.l.PutFile(ctx, t.tenant, s, p, body, server.PutFileOptions{Tar: o.Tar, Mode: o.Mode, Size: size})
}

func (t layerTransfer) GetFile(ctx context.Context, s, p string, tar bool) (files.Info, io.ReadCloser, error) {
	return t.l.GetFile(ctx, t.tenant, s, p, tar)
}

func (t layerTransfer) StatFile(ctx context.Context, s, p string) (files.Info, error) {
	return t.l.StatFile(ctx, t.tenant, s, p)
}

// transferFromFlags is the server of --server, or the configured backend.
func transferFromFlags(cmd *cobra.Command) (client.Transfer, func(), error) {
	c, err := remote(cmd)
	if err != nil {
		return nil, nil, err
	}
	if c != nil {
		return c, func() {}, nil
	}
	cfg, err := loadConfig(cmd)
	if err != nil {
		return nil, nil, err
	}
	if _, err := chooseBackend(cmd.Context(), &cfg); err != nil {
		return nil, nil, err
	}
	closePolicies := func() {}
	var pol *policies.Engine
	if cfg.Policies.Dir != "" {
		e, _, cl, err := policyFor(cfg)
		if err != nil {
			return nil, nil, err
		}
		pol, closePolicies = e, cl
	}
	log := slog.New(slog.NewTextHandler(cmd.ErrOrStderr(), &slog.HandlerOptions{Level: slog.LevelWarn}))
	l, closeRuntime, err := newLayerShared(cfg, pol, log)
	if err != nil {
		closePolicies()
		return nil, nil, err
	}
	return layerTransfer{l, cfg.Tenant}, func() {
		l.Close(context.Background())
		closeRuntime()
		closePolicies()
	}, nil
}
