package main

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/shellbox/shellbox/config"
	"github.com/shellbox/shellbox/eventstream"
	"github.com/shellbox/shellbox/kube"
	"github.com/shellbox/shellbox/kube/approvals"
	"github.com/shellbox/shellbox/kube/events"
	"github.com/shellbox/shellbox/policies"
	"github.com/shellbox/shellbox/session"
)

// kubeRuntime is the kube runtime as a sandboxRuntime: a clientset holds
// nothing that needs closing.
type kubeRuntime struct{ *kube.Runtime }

var _ session.Leader = (*kube.Elector)(nil)

func (kubeRuntime) Close() error { return nil }

// RemoveSession: a session pod keeps nothing beyond the pod (its workspace
// is an emptyDir, which goes with it), so there is no session state to end.
func (kubeRuntime) RemoveSession(context.Context, string, string) (bool, error) { return false, nil }

// restConfig is the client configuration of kube.kubeconfig, or of the
// pod's service account when it is empty.
func restConfig(c config.Kube) (*rest.Config, error) {
	var rc *rest.Config
	if c.Kubeconfig == "" {
		var err error
		if rc, err = rest.InClusterConfig(); err != nil {
			return nil, fmt.Errorf("kube.kubeconfig is empty and this is not a pod with a service account: %w", err)
		}
	} else {
		var err error
		if rc, err = clientcmd.BuildConfigFromFlags("", c.Kubeconfig); err != nil {
			return nil, fmt.Errorf("kube.kubeconfig %s: %w", c.Kubeconfig, err)
		}
	}
	rc.QPS, rc.Burst = c.QPS, c.Burst
	return rc, nil
}

// newClientset is the clientset of restConfig (tests replace it with a
// fake).
var newClientset = func(c config.Kube) (kubernetes.Interface, error) {
	rc, err := restConfig(c)
	if err != nil {
		return nil, err
	}
	// Built-in objects in protobuf, as Kubernetes' own controllers ask
	// for them: a list of session pods decodes several times faster
	// than in JSON, and a new session's first call reads several. (The
	// dynamic client's Approvals are custom objects, JSON only.)
	rc.ContentType = runtime.ContentTypeProtobuf
	rc.AcceptContentTypes = runtime.ContentTypeProtobuf + "," + runtime.ContentTypeJSON
	return kubernetes.NewForConfig(rc)
}

// newDynamicClient is the dynamic client of restConfig, for the Approval
// objects (tests replace it with a fake).
var newDynamicClient = func(c config.Kube) (dynamic.Interface, error) {
	rc, err := restConfig(c)
	if err != nil {
		return nil, err
	}
	return dynamic.NewForConfig(rc)
}

// approvalStore is where serve holds asks for approval: on the kube
// backend with policies and kube.approvals "cluster", the release's
// Approval objects (kube/approvals), started (its cache filled);
// otherwise nil, the policy engine's memory. close stops its watch.
func approvalStore(ctx context.Context, cfg config.Config, log *slog.Logger) (_ policies.ApprovalStore, close func(), _ error) {
	if cfg.Backend != "kube" || cfg.Policies.Dir == "" || cfg.Kube.Approvals != config.ApprovalsCluster {
		return nil, func() {}, nil
	}
	dc, err := newDynamicClient(cfg.Kube)
	if err != nil {
		return nil, nil, fmt.Errorf("kube.approvals %s: %w", cfg.Kube.Approvals, err)
	}
	st, err := approvals.New(dc, approvals.Config{Namespace: cfg.Kube.Namespace, Release: cfg.Kube.Release, Logger: log})
	if err != nil {
		return nil, nil, fmt.Errorf("kube.approvals %s: %w", cfg.Kube.Approvals, err)
	}
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	if err := st.Start(ctx); err != nil {
		st.Close()
		return nil, nil, fmt.Errorf("kube.approvals %s: %w", cfg.Kube.Approvals, err)
	}
	return st, st.Close, nil
}

// eventRelay is how serve's replicas hear each other's completion notices:
// on the kube backend, Event objects in the sessions namespace
// (kube/events), started; otherwise nil (one process). close stops it.
func eventRelay(ctx context.Context, cfg config.Config, log *slog.Logger) (_ eventstream.EventRelay, close func(), _ error) {
	if cfg.Backend != "kube" {
		return nil, func() {}, nil
	}
	cs, err := newClientset(cfg.Kube)
	if err != nil {
		return nil, nil, fmt.Errorf("kube backend: event relay: %w", err)
	}
	r, err := events.New(cs, events.Config{Namespace: cfg.Kube.Namespace, Release: cfg.Kube.Release, Logger: log})
	if err != nil {
		return nil, nil, fmt.Errorf("kube backend: event relay: %w", err)
	}
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	if err := r.Start(ctx); err != nil {
		return nil, nil, fmt.Errorf("kube backend: event relay (the server's Role needs events list and watch in %s): %w", cfg.Kube.Namespace, err)
	}
	return r, r.Close, nil
}

// openKube opens the kube runtime (package kube). It does not contact the
// API server.
func openKube(cfg config.Config) (kubeRuntime, error) {
	cs, err := newClientset(cfg.Kube)
	if err != nil {
		return kubeRuntime{}, fmt.Errorf("kube backend: %w", err)
	}
	kc := cfg.Kube.Runtime()
	// With a store, the workspace of a pod deleted behind shellbox's back
	// is saved in its grace (session: DeletionWatcher).
	kc.SaveOnDelete = cfg.Snapshots.StoreKind(cfg.Backend) != config.StoreNone
	rt, err := kube.New(cs, kc)
	if err != nil {
		return kubeRuntime{}, fmt.Errorf("kube backend: %w", err)
	}
	return kubeRuntime{rt}, nil
}

// prepareKube is the kube backend's part of a server's start: the API
// server answers with the RBAC for the session pods, and the release's
// session NetworkPolicy is as configured (kube.serverSelector). Each error
// names the resource whose RBAC is missing.
func prepareKube(ctx context.Context, rt kubeRuntime) error {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	if err := rt.Ping(ctx); err != nil {
		return fmt.Errorf("kube backend: %w", err)
	}
	if err := rt.EnsureNetworkPolicy(ctx); err != nil {
		return fmt.Errorf("kube backend: the session pods' NetworkPolicy (kube.serverSelector; RBAC: networkpolicies get, create, update): %w", err)
	}
	return nil
}
