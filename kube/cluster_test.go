package kube_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	nodev1 "k8s.io/api/node/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/shellbox/shellbox/kube"
	"github.com/shellbox/shellbox/kube/kubetest"
	"github.com/shellbox/shellbox/sandbox"
	"github.com/shellbox/shellbox/sandbox/sandboxtest"
)

var runtimes = []string{sandbox.RuntimeRunc, sandbox.RuntimeRunsc}

// TestClusterConformance runs the runtime conformance suite on the real
// cluster of SHELLBOX_KUBECONFIG, under runc and under gVisor (RuntimeClass
// gvisor), with the checks from inside through each pod's agent over TCP.
func TestClusterConformance(t *testing.T) {
	c := kubetest.Connect(t)
	for _, rt := range runtimes {
		t.Run(rt, func(t *testing.T) {
			ns := c.Namespace(t)
			cfg := kubetest.Config(ns)
			c.New(t, cfg, rt)
			sandboxtest.Run(t, sandboxtest.Harness{
				Tenant:     "conf-" + rt,
				Gvisor:     rt == sandbox.RuntimeRunsc,
				PodNetwork: true,
				New: func(t *testing.T) sandbox.Runtime {
					// A new Runtime on the same cluster: a restarted server.
					return c.New(t, cfg, "")
				},
				Spec: func(t *testing.T, tenant, session, owner string) sandbox.Spec {
					return kubetest.Spec(t, tenant, session, owner, rt)
				},
				Foreign: func(t *testing.T, tenant, session string) func() bool {
					name := kube.PodName(tenant, session)
					pods := c.CS.CoreV1().Pods(ns)
					p := &corev1.Pod{
						ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{kubetest.LabelTest: "1"}},
						Spec: corev1.PodSpec{Containers: []corev1.Container{{
							Name: "foreign", Image: kubetest.Image, ImagePullPolicy: corev1.PullIfNotPresent,
							Command: []string{"sleep", "600"},
						}}},
					}
					if _, err := pods.Create(context.Background(), p, metav1.CreateOptions{}); err != nil {
						t.Fatal(err)
					}
					return func() bool {
						cur, err := pods.Get(context.Background(), name, metav1.GetOptions{})
						return err == nil && cur.DeletionTimestamp == nil
					}
				},
				Exec: func(t *testing.T, sb sandbox.Sandbox, command string) string {
					return kubetest.Exec(t, sb, command)
				},
				RealAgent: true,
			})
		})
	}
}

// TestClusterIsolation checks from inside session pods, with the
// release's NetworkPolicy (EnsureNetworkPolicy) applied, that a command
// reaches neither the API server (the kubernetes Service's IP, the node's
// apiserver port), nor another session pod's agent, nor DNS (the node's
// resolver: the cluster has no CoreDNS), over TCP or UDP; and that no
// service-account token is mounted. The same probes from two pods of a
// release without a NetworkPolicy do reach all of them: the policy, not
// the probe, is what stops them.
func TestClusterIsolation(t *testing.T) {
	c := kubetest.Connect(t)
	for _, rt := range runtimes {
		t.Run(rt, func(t *testing.T) { isolation(t, c, rt) })
	}
}

func isolation(t *testing.T, c *kubetest.Cluster, rt string) {
	ctx := context.Background()
	ns := c.Namespace(t)
	cfg := kubetest.Config(ns)
	cfg.ServerSelector = map[string]string{"app": "shellbox-test-server"}
	confined := c.New(t, cfg, rt)
	if err := confined.EnsureNetworkPolicy(ctx); err != nil {
		t.Fatalf("EnsureNetworkPolicy: %v", err)
	}
	open := kubetest.Config(ns)
	open.Release = "sbtest-open"
	free := c.New(t, open, rt)

	owner := "isolation"
	create := func(r *kube.Runtime, session string) sandbox.Sandbox {
		t.Helper()
		sb, err := r.Create(ctx, kubetest.Spec(t, "iso", session, owner, rt))
		if err != nil {
			t.Fatalf("Create %s: %v", session, err)
		}
		t.Cleanup(func() { _ = r.Remove(context.Background(), sb.ID) })
		return sb
	}
	a, b := create(confined, "a"), create(confined, "b")
	freeA, freeB := create(free, "free-a"), create(free, "free-b")

	svc, err := c.CS.CoreV1().Services("default").Get(ctx, "kubernetes", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	pod, err := c.CS.CoreV1().Pods(ns).Get(ctx, a.ID, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	dns := strings.TrimSpace(kubetest.Exec(t, a, `sed -n 's/^nameserver[[:space:]]*//p' /etc/resolv.conf | head -n 1`))
	if dns == "" {
		t.Fatal("the pod's /etc/resolv.conf names no nameserver")
	}
	tcp := func(host string, port int) string {
		return fmt.Sprintf(`timeout 3 bash -c 'exec 3<>/dev/tcp/%s/%d' 2>/dev/null && echo open || echo closed`, host, port)
	}
	// A DNS query (NS of the root) over UDP: "answered" if 12 bytes (a
	// header) come back.
	udpDNS := fmt.Sprintf(`n=$(timeout 3 bash -c 'exec 3<>/dev/udp/%s/53; printf "\x12\x34\x01\x00\x00\x01\x00\x00\x00\x00\x00\x00\x00\x00\x02\x00\x01" >&3; head -c 12 <&3' 2>/dev/null | wc -c); [ "$n" = 12 ] && echo open || echo closed`, dns)
	agentPort := int(confined.Config().AgentPort)
	probes := func(peer sandbox.Sandbox) []struct{ name, cmd string } {
		peerIP := strings.Split(peer.Agent.Address, ":")[0]
		return []struct{ name, cmd string }{
			{"API server's Service " + svc.Spec.ClusterIP + ":443", tcp(svc.Spec.ClusterIP, 443)},
			{"API server on the node " + pod.Status.HostIP + ":6443", tcp(pod.Status.HostIP, 6443)},
			{"another session pod's agent " + peer.Agent.Address, tcp(peerIP, agentPort)},
			{"DNS over TCP " + dns + ":53", tcp(dns, 53)},
			{"DNS over UDP " + dns + ":53", udpDNS},
		}
	}

	// Without a policy: everything answers (else the probes prove nothing).
	for _, p := range probes(freeB) {
		if got := strings.TrimSpace(kubetest.Exec(t, freeA, p.cmd)); got != "open" {
			t.Errorf("without a NetworkPolicy, %s: %s; want open (the control must reach it)", p.name, got)
		}
	}
	// With the policy: nothing. kube-router applies it when it sees the
	// pod, which may be a moment after the pod runs: a probe that finds
	// it open is tried again for up to 30 s, and each such window logged.
	for _, p := range probes(b) {
		deadline := time.Now().Add(30 * time.Second)
		for first := true; ; first = false {
			got := strings.TrimSpace(kubetest.Exec(t, a, p.cmd))
			if got == "closed" {
				break
			}
			if first {
				t.Logf("%s: %s right after the pod was ready (the policy was not applied yet)", p.name, got)
			}
			if time.Now().After(deadline) {
				t.Errorf("with the NetworkPolicy, %s: %s after 30 s; want closed", p.name, got)
				break
			}
			time.Sleep(500 * time.Millisecond)
		}
	}

	inside := []struct{ name, cmd, want string }{
		{"no service-account token", "ls /var/run/secrets/kubernetes.io 2>/dev/null | wc -l", "0"},
		{"no capabilities", "grep ^CapEff /proc/self/status | tr -d '\\t '", "CapEff:0000000000000000"},
		{"not root", "id -u", "1000"},
		// The session's token: in neither the agent's initial environment
		// (gVisor shows /proc/1/environ to the commands' uid) nor a file.
		{"no token", "tr '\\0' '\\n' </proc/1/environ 2>/dev/null | grep -c SHELLBOX_AGENT_TOKEN; find /run/shellbox/token -type f 2>/dev/null | wc -l", "0\n0"},
	}
	for _, c := range inside {
		if got := strings.TrimSpace(kubetest.Exec(t, a, c.cmd)); got != c.want {
			t.Errorf("%s: %q gave %q, want %q", c.name, c.cmd, got, c.want)
		}
	}
	if p := pod.Spec; p.AutomountServiceAccountToken == nil || *p.AutomountServiceAccountToken {
		t.Errorf("pod spec: automountServiceAccountToken %v, want false", p.AutomountServiceAccountToken)
	}
}

// TestClusterFaults: what the cluster says when it cannot run a session
// reaches Create's error, named, with the pod's events; and the failed
// pod is deleted.
func TestClusterFaults(t *testing.T) {
	c := kubetest.Connect(t)
	ns := c.Namespace(t)
	ctx := context.Background()
	run := func(t *testing.T, cfg kube.Config, spec sandbox.Spec, want ...string) {
		t.Helper()
		r, err := kube.New(c.CS, cfg)
		if err != nil {
			t.Fatal(err)
		}
		sb, err := r.Create(ctx, spec)
		if err == nil {
			_ = r.Remove(ctx, sb.ID)
			t.Fatalf("Create succeeded: %+v", sb)
		}
		t.Logf("Create: %v", err)
		if !errors.Is(err, sandbox.ErrUnavailable) {
			t.Errorf("error class: %v, want ErrUnavailable", err)
		}
		for _, w := range want {
			if !strings.Contains(err.Error(), w) {
				t.Errorf("the error does not say %q", w)
			}
		}
		// Nothing is left behind.
		if _, err := c.CS.CoreV1().Pods(ns).Get(ctx, kube.PodName(spec.Tenant, spec.Session), metav1.GetOptions{}); err == nil {
			deadline := time.Now().Add(30 * time.Second)
			for err == nil && time.Now().Before(deadline) {
				time.Sleep(200 * time.Millisecond)
				_, err = c.CS.CoreV1().Pods(ns).Get(ctx, kube.PodName(spec.Tenant, spec.Session), metav1.GetOptions{})
			}
			if err == nil {
				t.Errorf("the failed pod is still there 30 s later")
			}
		}
	}

	t.Run("RuntimeClassMissing", func(t *testing.T) {
		cfg := kubetest.Config(ns)
		cfg.RuntimeClasses = map[string]string{sandbox.RuntimeRunsc: "sbtest-no-such-class"}
		run(t, cfg, kubetest.Spec(t, "faults", "no-class", "faults", sandbox.RuntimeRunsc),
			"RuntimeClass missing", "sbtest-no-such-class")
	})

	t.Run("HandlerMissingOnNode", func(t *testing.T) {
		name := fmt.Sprintf("sbtest-nohandler-%d", os.Getpid())
		rc := &nodev1.RuntimeClass{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{kubetest.LabelTest: "1"}}, Handler: "sbtestnohandler"}
		if _, err := c.CS.NodeV1().RuntimeClasses().Create(ctx, rc, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = c.CS.NodeV1().RuntimeClasses().Delete(context.Background(), name, metav1.DeleteOptions{}) })
		cfg := kubetest.Config(ns)
		cfg.RuntimeClasses = map[string]string{sandbox.RuntimeRunsc: name}
		run(t, cfg, kubetest.Spec(t, "faults", "no-handler", "faults", sandbox.RuntimeRunsc),
			"cannot run RuntimeClass", name, "FailedCreatePodSandBox")
	})

	t.Run("ImageNotOnNode", func(t *testing.T) {
		// IfNotPresent with no registry: the kubelet tries to pull, fails.
		cfg := kubetest.Config(ns)
		spec := kubetest.Spec(t, "faults", "no-image", "faults", sandbox.RuntimeRunc,
			sandbox.WithImage("shellbox-test-absent:never"))
		run(t, cfg, spec, "shellbox-test-absent:never", "ErrImagePull", "events:")
	})

	t.Run("NeverReady", func(t *testing.T) {
		// More memory than the node has: the scheduler never places it.
		cfg := kubetest.Config(ns)
		cfg.ReadyTimeout = 8 * time.Second
		spec := kubetest.Spec(t, "faults", "unschedulable", "faults", sandbox.RuntimeRunc,
			sandbox.WithMemory(512*sandbox.GiB))
		run(t, cfg, spec, "not ready within 8s", "FailedScheduling", "Insufficient memory")
	})

	t.Run("NoRBAC", func(t *testing.T) {
		// A ServiceAccount with no Role: its token authenticates, RBAC
		// refuses everything.
		sa := &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "sbtest-norights"}}
		if _, err := c.CS.CoreV1().ServiceAccounts(ns).Create(ctx, sa, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		tok, err := c.CS.CoreV1().ServiceAccounts(ns).CreateToken(ctx, sa.Name, &authenticationv1.TokenRequest{
			Spec: authenticationv1.TokenRequestSpec{ExpirationSeconds: ptr(int64(600))},
		}, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		rc := rest.AnonymousClientConfig(c.Config)
		rc.BearerToken = tok.Status.Token
		cs, err := kubernetes.NewForConfig(rc)
		if err != nil {
			t.Fatal(err)
		}
		r, err := kube.New(cs, kubetest.Config(ns))
		if err != nil {
			t.Fatal(err)
		}
		want := "no RBAC for pods in namespace " + ns
		if err := r.Ping(ctx); !errors.Is(err, sandbox.ErrUnavailable) || !strings.Contains(err.Error(), want) {
			t.Errorf("Ping: %v; want ErrUnavailable saying %q", err, want)
		}
		_, err = r.Create(ctx, kubetest.Spec(t, "faults", "no-rbac", "faults", sandbox.RuntimeRunc))
		if !errors.Is(err, sandbox.ErrUnavailable) || !strings.Contains(err.Error(), want) {
			t.Errorf("Create: %v; want ErrUnavailable saying %q", err, want)
		}
		t.Logf("Create: %v", err)
	})
}

func ptr[T any](v T) *T { return &v }
