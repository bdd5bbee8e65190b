package main

import (
	"archive/tar"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path"
	"path/filepath"
	"strings"

	"github.com/spf13/cobra"

	"github.com/shellbox/shellbox/executor"
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
			src, dst := parseCpArg(args[0]), parseCpArg(args[1])
			switch {
			case src.session != "" && dst.session != "":
				return errors.New("copying between two sessions is not supported: copy out, then in")
			case src.session == "" && dst.session == "":
				return errors.New("one of SRC and DST must be SESSION:PATH")
			case dst.session != "":
				return cpIn(cmd, t, src.path, dst)
			}
			return cpOut(cmd, t, src, dst.path)
		},
	}
	addRemoteFlags(cmd)
	cmd.Flags().String("backend", "local", "where the session is, without --server: local, docker or containerd")
	cmd.Flags().String("tenant", "default", "tenant the session belongs to (without --server)")
	cmd.Flags().String("policies", "", "policies directory: the tenant's files rules decide the copy (default policies.dir)")
	return cmd
}

// cpArg is one side of a copy: a session's path, or a local one.
type cpArg struct {
	session, path string
}

// parseCpArg splits SESSION:PATH; anything else (a path starting with / or
// ., or without a colon, or "-") is local.
func parseCpArg(s string) cpArg {
	if s == "-" || strings.HasPrefix(s, "/") || strings.HasPrefix(s, ".") {
		return cpArg{path: s}
	}
	sess, p, ok := strings.Cut(s, ":")
	if !ok || executor.ValidSession(sess) != nil {
		return cpArg{path: s}
	}
	if p == "" {
		p = "."
	}
	return cpArg{session: sess, path: p}
}

// transfer is what cp needs of a server or a session layer.
type transfer interface {
	PutFile(ctx context.Context, session, path string, body io.Reader, o client.PutOptions) (files.Written, error)
	GetFile(ctx context.Context, session, path string, tar bool) (files.Info, io.ReadCloser, error)
	StatFile(ctx context.Context, session, path string) (files.Info, error)
}

// layerTransfer is the configured backend's session layer as a transfer.
type layerTransfer struct {
	l      *session.Layer
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
func transferFromFlags(cmd *cobra.Command) (transfer, func(), error) {
	c, err := remote(cmd)
	if err != nil {
		return nil, nil, err
	}
	if c != nil {
		return c, func() {}, nil
	}
	file, _ := cmd.Flags().GetString("config")
	cfg, err := loadConfig(cmd.Flags(), file)
	if err != nil {
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

// notFound reports a refusal that says the path does not exist.
func notFound(err error) bool {
	var ce *client.Error
	return errors.Is(err, server.ErrNotFound) || (errors.As(err, &ce) && ce.Status == 404 && ce.Code == "not_found")
}

// statRemote describes a session's path; ok false when it does not exist.
func statRemote(ctx context.Context, t transfer, dst cpArg) (files.Info, bool, error) {
	info, err := t.StatFile(ctx, dst.session, dst.path)
	if notFound(err) {
		return files.Info{}, false, nil
	}
	return info, err == nil, err
}

// cpIn copies the local src into the session.
func cpIn(cmd *cobra.Command, t transfer, src string, dst cpArg) error {
	ctx := cmd.Context()
	if src == "-" {
		w, err := t.PutFile(ctx, dst.session, dst.path, cmd.InOrStdin(), client.PutOptions{Tar: true})
		return reportCp(cmd, w, err, dst.session+":"+dst.path)
	}
	fi, err := os.Stat(src)
	if err != nil {
		return err
	}
	info, exists, err := statRemote(ctx, t, dst)
	if err != nil {
		return err
	}
	into := exists && info.Type == files.TypeDirectory
	target := dst.path
	if fi.Mode().IsRegular() {
		if into || strings.HasSuffix(dst.path, "/") {
			target = path.Join(dst.path, filepath.Base(src))
		}
		f, err := os.Open(src)
		if err != nil {
			return err
		}
		defer f.Close()
		w, err := t.PutFile(ctx, dst.session, target, f, client.PutOptions{Mode: fi.Mode().Perm(), Size: fi.Size()})
		return reportCp(cmd, w, err, dst.session+":"+target)
	}
	if !fi.IsDir() {
		return fmt.Errorf("%s is neither a regular file nor a directory", src)
	}
	if exists && !into {
		return fmt.Errorf("cannot copy the directory %s onto %s:%s: it is a %s", src, dst.session, dst.path, info.Type)
	}
	abs, err := filepath.Abs(src)
	if err != nil {
		return err
	}
	// A tar of the directory, its entries under its own name: into an
	// existing directory as is, as a new directory with the name dropped.
	parent := files.Tree{Root: filepath.Dir(abs), UID: -1, GID: -1}
	_, body, err := parent.Open(ctx, filepath.Base(abs), files.GetOptions{Tar: true, Limits: files.Limits{MaxBytes: 1 << 62, MaxEntries: 1 << 30}})
	if err != nil {
		return err
	}
	defer body.Close()
	var r io.Reader = body
	if !into {
		r = stripTar(body, filepath.Base(abs))
	}
	w, err := t.PutFile(ctx, dst.session, dst.path, r, client.PutOptions{Tar: true})
	return reportCp(cmd, w, err, dst.session+":"+dst.path)
}

// cpOut copies the session's src to the local dst.
func cpOut(cmd *cobra.Command, t transfer, src cpArg, dst string) error {
	ctx := cmd.Context()
	if dst == "-" {
		_, body, err := t.GetFile(ctx, src.session, src.path, true)
		if err != nil {
			return err
		}
		defer body.Close()
		_, err = io.Copy(cmd.OutOrStdout(), body)
		return err
	}
	info, err := t.StatFile(ctx, src.session, src.path)
	if err != nil {
		return err
	}
	abs, err := filepath.Abs(dst)
	if err != nil {
		return err
	}
	lfi, lerr := os.Stat(abs)
	into := lerr == nil && lfi.IsDir()
	name := filepath.Base(abs)
	local := files.Tree{Root: filepath.Dir(abs), UID: -1, GID: -1}
	if into {
		local, name = files.Tree{Root: abs, UID: -1, GID: -1}, path.Base(info.Path)
	}
	noCap := files.Limits{MaxBytes: 1 << 62, MaxEntries: 1 << 30}
	var w files.Written
	switch info.Type {
	case files.TypeFile:
		_, body, err := t.GetFile(ctx, src.session, src.path, false)
		if err != nil {
			return err
		}
		defer body.Close()
		w, err = local.Put(ctx, name, body, files.PutOptions{Mode: info.Mode.Perm(), Limits: noCap})
		if err != nil {
			return err
		}
	case files.TypeDirectory:
		if lerr == nil && !into {
			return fmt.Errorf("cannot copy the directory %s:%s onto the file %s", src.session, src.path, dst)
		}
		_, body, err := t.GetFile(ctx, src.session, src.path, true)
		if err != nil {
			return err
		}
		defer body.Close()
		var r io.Reader = body
		target := "."
		if !into {
			r, target = stripTar(body, path.Base(info.Path)), name
		}
		// The same checks as an upload into a sandbox: a tar from a
		// sandbox cannot lead out of dst either.
		w, err = local.Put(ctx, target, r, files.PutOptions{Tar: true, Limits: noCap})
		if err != nil {
			return err
		}
	default:
		return fmt.Errorf("%s:%s is a %s: only files and directories can be copied", src.session, src.path, info.Type)
	}
	fmt.Fprintf(cmd.ErrOrStderr(), "copied %s to %s\n", sizeOf(w), dst)
	return nil
}

func reportCp(cmd *cobra.Command, w files.Written, err error, to string) error {
	if err != nil {
		return err
	}
	fmt.Fprintf(cmd.ErrOrStderr(), "copied %s to %s\n", sizeOf(w), to)
	return nil
}

func sizeOf(w files.Written) string {
	s := fmt.Sprintf("%d bytes", w.Bytes)
	if w.Dirs > 0 || w.Files > 1 || w.Links > 0 {
		s += fmt.Sprintf(" (%d files, %d directories, %d links)", w.Files, w.Dirs, w.Links)
	}
	return s
}

// stripTar rewrites a tar whose entries are under prefix/ to entries
// relative to it (prefix/ itself becomes "./"), streaming.
func stripTar(r io.Reader, prefix string) io.Reader {
	pr, pw := io.Pipe()
	go func() {
		tr, tw := tar.NewReader(r), tar.NewWriter(pw)
		err := func() error {
			for {
				h, err := tr.Next()
				if err == io.EOF {
					return tw.Close()
				}
				if err != nil {
					return err
				}
				name := strings.TrimSuffix(h.Name, "/")
				switch {
				case name == prefix:
					h.Name = "./"
				case strings.HasPrefix(name, prefix+"/"):
					h.Name = strings.TrimPrefix(h.Name, prefix+"/")
				default:
					return fmt.Errorf("tar entry %q is not under %s/", h.Name, prefix)
				}
				if h.Typeflag == tar.TypeLink {
					h.Linkname = strings.TrimPrefix(h.Linkname, prefix+"/")
				}
				if err := tw.WriteHeader(h); err != nil {
					return err
				}
				if _, err := io.Copy(tw, tr); err != nil {
					return err
				}
			}
		}()
		pw.CloseWithError(err)
	}()
	return pr
}
