package sandboxed

import (
	"context"
	"errors"
	"io"

	"github.com/shellbox/shellbox/executor"
	"github.com/shellbox/shellbox/executor/files"
)

// FileAgent is the files ability of a connection to an agent
// (agentapi.Client has it): uploads and downloads in the sandbox's root,
// done by the agent where the files are.
type FileAgent interface {
	PutFile(ctx context.Context, path string, body io.Reader, o files.PutOptions) (files.Written, error)
	GetFile(ctx context.Context, path string, o files.GetOptions) (files.Info, io.ReadCloser, error)
	StatFile(ctx context.Context, path string) (files.Info, error)
}

// Files returns the files ability of the session's agent, creating the
// sandbox as a call would. A transfer whose connection breaks drops it, as
// a call's does; the agent's answers (invalid, not found, too large, no
// space) keep it.
func (e *Executor) Files(ctx context.Context, session string) (FileAgent, error) {
	c, err := e.cfg.Connections.Conn(ctx, session)
	if err != nil {
		if ctx.Err() != nil {
			return nil, executor.Aborted()
		}
		return nil, err
	}
	fa, ok := c.Agent().(FileAgent)
	if !ok {
		return nil, executor.Errorf(executor.ErrUnavailable, "the agent of session %s cannot transfer files", session)
	}
	return fileConn{fa: fa, e: e, session: session, c: c}, nil
}

// Root is the session root inside the sandbox.
func (e *Executor) Root() string { return e.cfg.Root }

type fileConn struct {
	fa      FileAgent
	e       *Executor
	session string
	c       Conn
}

// check drops the connection after a transport failure.
func (f fileConn) check(ctx context.Context, err error) error {
	if err == nil || classified(err) || errors.Is(err, files.ErrTooLarge) || errors.Is(err, files.ErrNoSpace) {
		return err
	}
	return f.e.check(ctx, f.session, f.c, err)
}

func (f fileConn) PutFile(ctx context.Context, path string, body io.Reader, o files.PutOptions) (files.Written, error) {
	w, err := f.fa.PutFile(ctx, path, body, o)
	return w, f.check(ctx, err)
}

func (f fileConn) GetFile(ctx context.Context, path string, o files.GetOptions) (files.Info, io.ReadCloser, error) {
	info, body, err := f.fa.GetFile(ctx, path, o)
	return info, body, f.check(ctx, err)
}

func (f fileConn) StatFile(ctx context.Context, path string) (files.Info, error) {
	info, err := f.fa.StatFile(ctx, path)
	return info, f.check(ctx, err)
}

// logAgent is an agent that serves its log (agentapi.Client).
type logAgent interface {
	Log(ctx context.Context) (string, error)
}

// AgentLog returns the recent log of the session's agent: what it did to
// which command's tree, and why. It never creates a sandbox: a session
// without one is executor.ErrNotFound.
func (e *Executor) AgentLog(ctx context.Context, session string) (string, error) {
	if err := executor.ValidSession(session); err != nil {
		return "", err
	}
	if !e.cfg.Connections.Exists(ctx, session) {
		return "", executor.Errorf(executor.ErrNotFound, "session %s has no sandbox", session)
	}
	c, err := e.cfg.Connections.Conn(ctx, session)
	if err != nil {
		return "", err
	}
	la, ok := c.Agent().(logAgent)
	if !ok {
		return "", executor.Errorf(executor.ErrUnavailable, "the agent of session %s cannot serve its log", session)
	}
	s, err := la.Log(ctx)
	return s, e.check(ctx, session, c, err)
}
