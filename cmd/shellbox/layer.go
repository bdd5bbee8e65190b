package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/shellbox/shellbox/config"
	"github.com/shellbox/shellbox/policies"
	"github.com/shellbox/shellbox/sandbox"
	"github.com/shellbox/shellbox/sandbox/snapshot"
	"github.com/shellbox/shellbox/server"
	"github.com/shellbox/shellbox/session"
	"github.com/shellbox/shellbox/usage"
)

// newLayer constructs the session layer of cfg: the runtime of cfg.Backend
// (none for local), the agent binary, the sandbox defaults and the tenants'
// choices. pol (may be nil) decides calls; n and m (may be nil) hear
// notices and count metrics. The caller closes the layer, then closeRuntime.
func newLayer(cfg config.Config, pol *policies.Engine, n server.Notifier, m server.Metrics, log *slog.Logger) (l *session.Service, closeRuntime func() error, err error) {
	return buildLayer(cfg, pol, n, m, log, false, nil, nil)
}

// newMeasuredLayer is newLayer for a server that measures what sessions
// use into meter (nil: nothing is measured).
func newMeasuredLayer(cfg config.Config, pol *policies.Engine, n server.Notifier, m server.Metrics, meter *usage.Meter, log *slog.Logger) (*session.Service, func() error, error) {
	return buildLayer(cfg, pol, n, m, log, false, nil, meter)
}

// newLayerShared is newLayer for a one-shot call: the local backend runs in
// local.root itself (not a directory per tenant).
func newLayerShared(cfg config.Config, pol *policies.Engine, log *slog.Logger) (*session.Service, func() error, error) {
	return buildLayer(cfg, pol, nil, nil, log, true, nil, nil)
}

// watch (may be nil) hears the runtime create sandboxes; meter (may be
// nil) measures what sessions use.
func buildLayer(cfg config.Config, pol *policies.Engine, n server.Notifier, m server.Metrics, log *slog.Logger, shared bool, watch *creationWatch, meter *usage.Meter) (l *session.Service, closeRuntime func() error, err error) {
	sc := session.Config{
		Owner:                  cfg.Owner(),
		Defaults:               cfg.Sandbox.Defaults(),
		Choices:                map[string]session.Choices{},
		Local:                  session.LocalConfig{Root: cfg.Local.Root, Home: cfg.Local.Home, SpillDir: cfg.Local.SpillDir, Cgroup: cfg.Local.Cgroup, Shared: shared},
		Policies:               pol,
		Limits:                 cfg.Limits,
		Facts:                  cfg.Facts,
		DisableRunInBackground: !cfg.EnableRunInBackground,
		Egress:                 egressConfig(cfg.Egress),
		IdleTTL:                cfg.Server.IdleTTL,
		Notifier:               n,
		Metrics:                m,
		Usage:                  meter,
		UsageInterval:          cfg.Usage.Interval,
		Logger:                 log,
	}
	for name, t := range cfg.Server.Tenants {
		sc.Choices[name] = session.Choices{Images: t.Images, Runtimes: t.Runtimes}
	}
	closeRuntime = func() error { return nil }
	if isSandboxed(cfg.Backend) {
		var agent string
		var agentErr error
		if cfg.Backend != "kube" { // kube's pods copy it from kube.agentImage
			agent, agentErr = agentBinary(cfg.Sandbox.Agent)
		}
		rt, err := openRuntime(cfg, agent, log)
		if err != nil {
			return nil, nil, err
		}
		sc.Runtime, sc.Unavailable, closeRuntime = rt, agentErr, rt.Close
		if err := withSecrets(&sc.Egress, cfg); err != nil {
			rt.Close()
			return nil, nil, err
		}
		if kr, ok := rt.(kubeRuntime); ok {
			// The replicas of a release share its sessions: only the
			// holder of its Lease reaps them and keeps the warm pools.
			el, err := kr.Elector(log)
			if err != nil {
				rt.Close()
				return nil, nil, fmt.Errorf("kube backend: %w", err)
			}
			sc.Leader = el
		}
		sc.Admission = cfg.Sandbox.Admission()
		sc.Claims, err = claimsOf(cfg, rt)
		if err != nil {
			rt.Close()
			return nil, nil, err
		}
		if watch != nil {
			sc.Runtime = watch.wrap(rt)
		}
		store, closeStore, err := openSnapshots(cfg)
		if err != nil {
			rt.Close()
			return nil, nil, err
		}
		sc.Snapshots, sc.SuspendedTTL = store, cfg.Snapshots.SuspendedTTL
		closeRuntime = func() error { return errors.Join(rt.Close(), closeStore()) }
	} else if cfg.Backend != "local" {
		return nil, nil, unknownBackend(cfg.Backend)
	}
	l, err = session.New(sc)
	if err != nil {
		closeRuntime()
		return nil, nil, err
	}
	return l, closeRuntime, nil
}

// openSnapshots opens the snapshot store cfg chooses (nil: none), and
// returns its close.
func openSnapshots(cfg config.Config) (snapshot.Store, func() error, error) {
	sn := cfg.Snapshots
	switch sn.StoreKind(cfg.Backend) {
	case config.StoreDir:
		dir := sn.Dir
		if dir == "" {
			dir = filepath.Join(cfg.Sandbox.StateDir, "snapshots")
		}
		d, err := snapshot.NewDir(snapshot.DirOptions{Path: dir})
		if err != nil {
			return nil, nil, fmt.Errorf("snapshots.dir: %w", err)
		}
		return d, d.Close, nil
	case config.StoreS3:
		secret := sn.S3.SecretKey
		if sn.S3.SecretKeyFile != "" {
			b, err := os.ReadFile(sn.S3.SecretKeyFile)
			if err != nil {
				return nil, nil, fmt.Errorf("snapshots.s3.secretKeyFile: %w", err)
			}
			secret = strings.TrimSpace(string(b))
		}
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		s, err := snapshot.NewS3(ctx, snapshot.S3Options{Endpoint: sn.S3.Endpoint, Bucket: sn.S3.Bucket, Prefix: sn.S3.Prefix,
			Region: sn.S3.Region, Insecure: sn.S3.Insecure, AccessKey: sn.S3.AccessKey, SecretKey: secret})
		if err != nil {
			return nil, nil, fmt.Errorf("snapshots.s3: %w", err)
		}
		return s, func() error { return nil }, nil
	}
	return nil, func() error { return nil }, nil
}

// claimsOf is where rt's warm-pool claims are kept. On Kubernetes, on the
// pooled pods themselves: every replica of the release, and a server that
// replaced another, sees them (a server pod's own directories are
// emptyDirs). Elsewhere with the sessions' host directories: one host, one
// state directory.
func claimsOf(cfg config.Config, rt sandboxRuntime) (sandbox.Claims, error) {
	if kr, ok := rt.(kubeRuntime); ok {
		return kr.Claims(), nil
	}
	claims, err := sandbox.NewDirClaims(filepath.Join(cfg.Sandbox.StateDir, "claims"))
	if err != nil {
		return nil, fmt.Errorf("sandbox.stateDir: %w", err)
	}
	return claims, nil
}

// egressConfig is the layer's egress configuration: an empty list in the
// file means nothing refused (the layer takes nil for its defaults).
func egressConfig(e config.Egress) session.EgressConfig {
	nonNil := func(s []string) []string {
		if s == nil {
			return []string{}
		}
		return s
	}
	return session.EgressConfig{Blocked: nonNil(e.Blocked), GrantBlocked: nonNil(e.GrantBlocked)}
}
