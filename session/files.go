package session

import (
	"context"
	"io"
	"path"

	"github.com/shellbox/shellbox/executor"
	"github.com/shellbox/shellbox/executor/files"
	"github.com/shellbox/shellbox/executor/sandboxed"
	"github.com/shellbox/shellbox/policies"
	"github.com/shellbox/shellbox/server"
	"github.com/shellbox/shellbox/session/sandboxconn"
)

var _ server.FileTransfer = (*Service)(nil)

// fileTarget is where a session's transfers go: the agent of its sandbox,
// or the local backend's root in process; and the tenant's policy.
type fileTarget struct {
	agent sandboxed.FileAgent
	root  string // the session root as the session sees it
	pol   *policies.Policy
	lim   files.Limits
}

// fileTarget finds (creating the sandbox, as a call would) where the
// session's files are.
func (l *Service) fileTarget(ctx context.Context, tenant, session string) (fileTarget, error) {
	if err := executor.ValidSession(session); err != nil {
		return fileTarget{}, server.Errorf(server.ErrInvalid, "%v", err)
	}
	tb, err := l.tenant(tenant)
	if err != nil {
		return fileTarget{}, server.Errorf(server.ErrUnavailable, "tenant %s: %v", tenant, err)
	}
	var ft fileTarget
	if l.cfg.Policies != nil {
		pol, err := l.cfg.Policies.Policy(tenant)
		if err != nil {
			return fileTarget{}, server.Errorf(server.ErrUnavailable, "tenant %s: %v", tenant, err)
		}
		ft.pol = pol
		ft.lim = files.Limits{MaxBytes: pol.Files.MaxBytes, MaxEntries: pol.Files.MaxEntries, NoSymlinks: pol.Files.HasRules(), OneLink: pol.Files.HasReadRules()}
	}
	switch e := tb.exec.(type) {
	case *sandboxconn.Executor:
		a, err := e.Files(ctx, session)
		if err != nil {
			return fileTarget{}, server.FileError(err)
		}
		ft.agent, ft.root = a, e.Root()
	default:
		tb.seen.add(session)
		ft.agent, ft.root = treeAgent{files.Tree{Root: tb.root, UID: -1, GID: -1}}, tb.root
	}
	return ft, nil
}

// decide applies the policy's files rules to the path as the session sees
// it, and audits: every write, and every denied read.
func (l *Service) decide(ft fileTarget, tenant, session, p string, write bool) error {
	if ft.pol == nil {
		return nil
	}
	abs := p
	if !path.IsAbs(abs) {
		abs = path.Join(ft.root, abs)
	}
	abs = path.Clean(abs)
	d := ft.pol.Files.FileAccess(write, abs)
	if err := l.cfg.Policies.AuditFile(tenant, session, write, abs, d); err != nil && d.Allowed {
		return server.Errorf(server.ErrUnavailable, "%s refused: %v", abs, err)
	}
	if !d.Allowed {
		return server.Errorf(server.ErrNotAllowed, "%s (tenant %s policy)", d.Reason, tenant)
	}
	return nil
}

// PutFile implements server.FileTransfer.
func (l *Service) PutFile(ctx context.Context, tenant, session, p string, body io.Reader, o server.PutFileOptions) (files.Written, error) {
	ft, err := l.fileTarget(ctx, tenant, session)
	if err != nil {
		return files.Written{}, err
	}
	if err := l.decide(ft, tenant, session, p, true); err != nil {
		return files.Written{}, err
	}
	max := ft.lim.MaxBytes
	if max <= 0 {
		max = files.DefaultMaxBytes
	}
	if o.Size > max {
		return files.Written{}, server.Errorf(server.ErrTooLarge, "upload of %s (%d bytes) exceeds the limit of %d bytes (policy files.maxBytes)", p, o.Size, max)
	}
	w, err := ft.agent.PutFile(ctx, p, body, files.PutOptions{Tar: o.Tar, Mode: o.Mode, Limits: ft.lim})
	if err != nil {
		return files.Written{}, server.FileError(err)
	}
	l.log.Info("file uploaded", "tenant", tenant, "session", session, "path", w.Path, "bytes", w.Bytes, "tar", o.Tar)
	return w, nil
}

// GetFile implements server.FileTransfer.
func (l *Service) GetFile(ctx context.Context, tenant, session, p string, tar bool) (files.Info, io.ReadCloser, error) {
	ft, err := l.fileTarget(ctx, tenant, session)
	if err != nil {
		return files.Info{}, nil, err
	}
	if err := l.decide(ft, tenant, session, p, false); err != nil {
		return files.Info{}, nil, err
	}
	info, body, err := ft.agent.GetFile(ctx, p, files.GetOptions{Tar: tar, Limits: ft.lim})
	if err != nil {
		return files.Info{}, nil, server.FileError(err)
	}
	return info, body, nil
}

// StatFile implements server.FileTransfer. It is a read: the read rules
// decide it.
func (l *Service) StatFile(ctx context.Context, tenant, session, p string) (files.Info, error) {
	ft, err := l.fileTarget(ctx, tenant, session)
	if err != nil {
		return files.Info{}, err
	}
	if err := l.decide(ft, tenant, session, p, false); err != nil {
		return files.Info{}, err
	}
	info, err := ft.agent.StatFile(ctx, p)
	if err != nil {
		return files.Info{}, server.FileError(err)
	}
	return info, nil
}

// treeAgent is the local backend's files ability: the tree in process.
type treeAgent struct{ t files.Tree }

func (a treeAgent) PutFile(ctx context.Context, p string, body io.Reader, o files.PutOptions) (files.Written, error) {
	return a.t.Put(ctx, p, body, o)
}

func (a treeAgent) StatFile(_ context.Context, p string) (files.Info, error) {
	return a.t.Stat(p)
}

func (a treeAgent) GetFile(ctx context.Context, p string, o files.GetOptions) (files.Info, io.ReadCloser, error) {
	return a.t.Open(ctx, p, o)
}
