// Package kubeconformance holds executors' checks that need session pods
// of a real cluster: the exec guard in pods of each Pod Security level and
// runtime (TestExecGuardKube). The executor conformance suite itself runs
// on session pods through the chart (deploy/helm/e2e
// TestChartConformance, gVisor pods, through the server over REST); its
// run here, on runc pods without the server, was dropped on 2026-12-07:
// a second whole-suite run with a pod per case (110 pods, 8 at a time,
// most of this package's 411 s in CI) beside the chart's, while the
// suite holds runc itself on Docker and containerd
// (executor/sandboxed/conformance/runc) and kube's TestCluster* hold the
// runtime on runc and gVisor pods.
package kubeconformance_test

import (
	"context"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/shellbox/shellbox/executor"
	"github.com/shellbox/shellbox/internal/cmdmatch"
	"github.com/shellbox/shellbox/kube"
	"github.com/shellbox/shellbox/kube/kubetest"
	"github.com/shellbox/shellbox/sandbox"
	"github.com/shellbox/shellbox/sandbox/docker/dockertest"
	"github.com/shellbox/shellbox/session/sandboxconn"
)

var tenant = dockertest.Tenant("t1")

// TestMain runs TestExecGuardKube's four pods at once unless
// -test.parallel says otherwise (kubetest.Parallel): each waits seconds
// for its pod.
func TestMain(m *testing.M) {
	kubetest.Parallel(4)
	os.Exit(m.Run())
}

// newExecutor is a sandboxed executor of the test tenant whose sessions are
// pods of runtime in cfg's namespace; every pod it made is removed when t
// ends.
func newExecutor(t *testing.T, c *kubetest.Cluster, cfg kube.Config, runtime string, lim executor.Limits) (*sandboxconn.Executor, *sandbox.Manager) {
	rt := c.New(t, cfg, runtime)
	m, err := sandbox.NewManager(sandbox.Config{
		Runtime:       rt,
		Owner:         dockertest.Owner(t),
		Ready:         sandboxconn.WaitAgent,
		CreateTimeout: 2 * time.Minute,
	})
	if err != nil {
		t.Fatal(err)
	}
	e, err := sandboxconn.New(sandboxconn.Config{
		Manager: m,
		Tenant:  tenant,
		Spec: func(session string) (sandbox.Spec, error) {
			// Room for the suite's 100 MB spill, all three
			// volumes being memory charged to the pod.
			s := kubetest.Spec(t, tenant, session, "", runtime,
				sandbox.WithMemory(sandbox.GiB+512*sandbox.MiB),
				sandbox.WithWorkspaceSize(256*sandbox.MiB),
				sandbox.WithSpillSize(256*sandbox.MiB))
			s.Owner = ""
			return s, nil
		},
		Limits: lim,
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		e.Close()
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		for _, sb := range m.Sandboxes() {
			if err := m.Remove(ctx, sb.Tenant, sb.Session); err != nil {
				t.Errorf("remove sandbox %s/%s: %v", sb.Tenant, sb.Session, err)
			}
		}
	})
	return e, m
}

// TestExecGuardKube: in a session pod, under the baseline Pod Security
// level (a root agent that setuids) and the restricted one (the agent
// non-root, --no-setuid), on runc and gVisor, an exec the call's rules
// deny fails whatever ran it, the output names the rule, the file
// survives and the call goes on (agent/execguard).
func TestExecGuardKube(t *testing.T) {
	c := kubetest.Connect(t)
	ns := c.Namespace(t)
	rules := &cmdmatch.Set{Policy: "acme", Rules: []cmdmatch.Spec{{Rule: "no-rm", Decision: cmdmatch.Deny, Command: []string{"rm"}}}}
	for _, level := range []string{kube.PodSecurityBaseline, kube.PodSecurityRestricted} {
		for _, runtime := range []string{sandbox.RuntimeRunc, sandbox.RuntimeRunsc} {
			t.Run(level+"/"+runtime, func(t *testing.T) {
				t.Parallel()
				cfg := kubetest.Config(ns)
				cfg.PodSecurity = level
				e, _ := newExecutor(t, c, cfg, runtime, executor.DefaultLimits())
				ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
				defer cancel()
				session := "eg-" + level[:4] + "-" + runtime
				spec, err := e.Resolve(ctx, executor.Request{Session: session, Shell: executor.Bash, Timeout: time.Minute, ExecRules: rules,
					Command: "touch victim; r=rm; $r victim; cp /bin/rm ./del; ./del victim; printf 'rm victim\\n' > s.sh; sh s.sh; echo after; test -e victim && echo survived"})
				if err != nil {
					t.Fatal(err)
				}
				res, err := e.Run(ctx, spec)
				if err != nil {
					t.Fatal(err)
				}
				if !strings.Contains(res.Stdout, "after\nsurvived") || strings.Count(res.Stderr, "refused by policy acme/no-rm") < 3 {
					log, _ := e.AgentLog(ctx, session)
					t.Errorf("stdout %q\nstderr %q\nthe agent's log:\n%s", res.Stdout, res.Stderr, log)
				}
			})
		}
	}
}
