package session

import (
	"context"
	"errors"
	"sort"
	"strings"

	"github.com/shellbox/shellbox/executor"
	"github.com/shellbox/shellbox/sandbox"
	"github.com/shellbox/shellbox/server"
	"github.com/shellbox/shellbox/session/sandboxconn"
)

// Sessions implements server.Backend: the tenant's sessions as the engine
// has them (those of every process of this owner), or, on the local
// backend, those this process served.
func (l *Service) Sessions(ctx context.Context, tenant string) ([]server.SessionInfo, error) {
	if l.manager == nil {
		tb, err := l.tenant(tenant)
		if err != nil {
			return nil, err
		}
		var out []server.SessionInfo
		for id, created := range tb.seen.list() {
			out = append(out, server.SessionInfo{ID: id, Tenant: tenant, State: "running", Created: created})
		}
		sort.Slice(out, func(i, j int) bool { return out[i].ID < out[j].ID })
		return out, nil
	}
	list, err := l.Sandboxes(ctx)
	if err != nil {
		return nil, server.Errorf(server.ErrUnavailable, "%v", err)
	}
	var out []server.SessionInfo
	have := map[string]bool{}
	for _, sb := range list {
		if sb.Tenant == tenant {
			out = append(out, sessionInfo(sb))
			have[sb.Session] = true
		}
	}
	if l.cfg.Snapshots != nil && l.cfg.Ready == nil {
		sus, err := l.suspendedSessions(ctx, tenant)
		if err != nil {
			return nil, server.Errorf(server.ErrUnavailable, "listing suspended sessions: %v", err)
		}
		for k, r := range sus {
			_, session, _ := strings.Cut(k, "/")
			if !have[session] { // a sandbox being resumed is running
				out = append(out, suspendedInfo(tenant, session, r))
			}
		}
		sort.Slice(out, func(i, j int) bool { return out[i].ID < out[j].ID })
	}
	return out, nil
}

// Sandboxes lists this owner's sandboxes on the engine, all tenants, in
// any state, by tenant and session.
func (l *Service) Sandboxes(ctx context.Context) ([]sandbox.Sandbox, error) {
	if l.manager == nil {
		return nil, nil
	}
	list, err := l.manager.List(ctx)
	if err != nil {
		return nil, err
	}
	sort.Slice(list, func(i, j int) bool {
		if list[i].Tenant != list[j].Tenant {
			return list[i].Tenant < list[j].Tenant
		}
		return list[i].Session < list[j].Session
	})
	return list, nil
}

// CreateSession implements server.Backend.
func (l *Service) CreateSession(ctx context.Context, tenant, session string, opts server.SessionOptions) (server.SessionInfo, error) {
	tb, err := l.tenant(tenant)
	if err != nil {
		return server.SessionInfo{}, err
	}
	if l.manager == nil {
		if opts.Image != "" || opts.Runtime != "" || len(opts.Mounts) > 0 {
			return server.SessionInfo{}, server.Errorf(server.ErrNotAllowed, "the local backend runs no images, runtimes or mounts")
		}
		created := tb.seen.add(session)
		return server.SessionInfo{ID: session, Tenant: tenant, State: "running", Created: created}, nil
	}
	k := tenant + "/" + session
	l.mu.Lock()
	prev, had := l.opts[k]
	l.opts[k] = opts
	l.mu.Unlock()
	spec, err := l.specWith(ctx, tenant, session, opts)
	if err != nil {
		l.mu.Lock()
		if had {
			l.opts[k] = prev
		} else {
			delete(l.opts, k)
		}
		l.mu.Unlock()
		return server.SessionInfo{}, err
	}
	sb, err := l.manager.Ensure(ctx, spec)
	if err != nil {
		return server.SessionInfo{}, server.Errorf(server.ErrUnavailable, "sandbox for session %s: %v", session, err)
	}
	return sessionInfo(sb), nil
}

// DeleteSession implements server.Backend.
func (l *Service) DeleteSession(ctx context.Context, tenant, session string) error {
	tb, err := l.tenant(tenant)
	if err != nil {
		return err
	}
	if l.manager == nil {
		if !tb.seen.remove(session) {
			return server.NoSuchSession(session)
		}
		return nil
	}
	l.mu.Lock()
	delete(l.opts, tenant+"/"+session)
	l.mu.Unlock()
	tb.forget(session)
	err = l.manager.Remove(ctx, tenant, session)
	if l.cfg.Snapshots != nil && (err == nil || errors.Is(err, sandbox.ErrNotFound)) {
		// Its snapshots and record go too; a suspended session has
		// nothing else.
		_, had, rerr := l.readRecord(ctx, tenant, session)
		if rerr == nil {
			rerr = l.cfg.Snapshots.DeleteSession(ctx, tenant, session)
		}
		if rerr != nil {
			return server.Errorf(server.ErrUnavailable, "removing session %s's snapshots: %v", session, rerr)
		}
		if had {
			err = nil
		}
	}
	switch {
	case err == nil:
		return nil
	case errors.Is(err, sandbox.ErrNotFound):
		return server.NoSuchSession(session)
	default:
		return server.Errorf(server.ErrUnavailable, "removing session %s: %v", session, err)
	}
}

// sessionInfo describes a session's sandbox.
func sessionInfo(sb sandbox.Sandbox) server.SessionInfo {
	si := server.SessionInfo{ID: sb.Session, Tenant: sb.Tenant, Image: sb.Image, Runtime: sb.Runtime,
		State: string(sb.State), Created: sb.Created}
	for _, m := range sb.Mounts {
		ro := m.ReadOnly
		si.Mounts = append(si.Mounts, server.Mount{Source: m.Source, Target: m.Target, ReadOnly: &ro})
	}
	return si
}

// AgentLog returns the recent log of the agent in the session's sandbox
// (`shellbox sessions logs`): which command's tree it signalled, and why.
// It creates nothing.
func (l *Service) AgentLog(ctx context.Context, tenant, session string) (string, error) {
	tb, err := l.tenant(tenant)
	if err != nil {
		return "", err
	}
	e, ok := tb.exec.(*sandboxconn.Executor)
	if !ok {
		return "", server.Errorf(server.ErrInvalid, "the local backend has no agent: its commands run in this process")
	}
	s, err := e.AgentLog(ctx, session)
	if errors.Is(err, executor.ErrNotFound) {
		return "", server.NoSuchSession(session)
	}
	return s, err
}
