// Package kubetest holds what tests against a real Kubernetes cluster
// share: the gate (the cluster's kubeconfig comes from SHELLBOX_KUBECONFIG;
// without it tests skip with the reason, and fail under CI=true, where
// .ci/setup-kube.sh has started one), a namespace per test, labelled and
// deleted when the test ends, a runtime configured for the cluster
// setup-kube.sh makes, and a way to run a command in a session pod through
// its agent.
//
// The cluster's node runs the images setup-kube.sh imports: the test image
// (Image) and the agent image (AgentImage, the static agent at
// kube.DefaultAgentPath); there is no registry, so nothing else runs.
package kubetest

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"flag"
	"fmt"
	"os"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/shellbox/shellbox/agentapi"
	"github.com/shellbox/shellbox/executor"
	"github.com/shellbox/shellbox/kube"
	"github.com/shellbox/shellbox/sandbox"
	"github.com/shellbox/shellbox/sandbox/docker/dockertest"
)

// EnvKubeconfig names the cluster's kubeconfig (.ci/setup-kube.sh prints
// export SHELLBOX_KUBECONFIG=/etc/shellbox-kube/admin.kubeconfig).
const EnvKubeconfig = "SHELLBOX_KUBECONFIG"

// Images on the cluster's node, imported by .ci/setup-kube.sh.
const (
	Image      = dockertest.Image
	AgentImage = "shellbox-agent:ci"
)

// LabelTest marks what tests create ("1"): namespaces, RuntimeClasses.
const LabelTest = dockertest.LabelTest

// Cluster is a reachable cluster: its client configuration and clientset.
type Cluster struct {
	Config *rest.Config
	CS     kubernetes.Interface
}

// Connect returns the cluster SHELLBOX_KUBECONFIG names, after checking
// that its API server answers. Without the variable, or with a cluster
// that does not answer, the test is skipped with the reason (failed under
// CI=true).
func Connect(t testing.TB) *Cluster {
	t.Helper()
	path := os.Getenv(EnvKubeconfig)
	dockertest.Require(t, path != "", EnvKubeconfig+" is not set: no Kubernetes cluster to test against "+
		"(.ci/setup-kube.sh starts one and prints the variable to export)")
	cfg, err := clientcmd.BuildConfigFromFlags("", path)
	if err != nil {
		t.Fatalf("%s=%s: %v", EnvKubeconfig, path, err)
	}
	cfg.QPS, cfg.Burst = 50, 100 // tests poll; the default 5/s would throttle them
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	_, err = cs.Discovery().ServerVersion()
	if err == nil {
		_, err = cs.CoreV1().Namespaces().Get(ctx, "default", metav1.GetOptions{})
	}
	dockertest.Require(t, err == nil, fmt.Sprintf("the cluster of %s=%s does not answer: %v", EnvKubeconfig, path, err))
	return &Cluster{Config: cfg, CS: cs}
}

// Namespace creates a namespace for one test, named after the test run
// (sbtest-<pid>-<random>), labelled LabelTest and for the baseline Pod
// Security level the session pods meet (enforced), and deletes it, with
// everything in it, when t ends.
func (c *Cluster) Namespace(t testing.TB) string {
	t.Helper()
	var b [3]byte
	_, _ = rand.Read(b[:])
	name := fmt.Sprintf("sbtest-%d-%s", os.Getpid(), hex.EncodeToString(b[:]))
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{
		LabelTest:                            "1",
		"pod-security.kubernetes.io/enforce": kube.PodSecurityBaseline,
		"pod-security.kubernetes.io/warn":    kube.PodSecurityRestricted,
	}}}
	if _, err := c.CS.CoreV1().Namespaces().Create(context.Background(), ns, metav1.CreateOptions{}); err != nil {
		t.Fatalf("create namespace %s: %v", name, err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		zero := int64(0)
		// Pods at once (grace 0), so the namespace goes in seconds.
		_ = c.CS.CoreV1().Pods(name).DeleteCollection(ctx, metav1.DeleteOptions{GracePeriodSeconds: &zero}, metav1.ListOptions{})
		if err := c.CS.CoreV1().Namespaces().Delete(ctx, name, metav1.DeleteOptions{}); err != nil {
			t.Errorf("delete namespace %s: %v", name, err)
		}
	})
	// The namespace's default ServiceAccount comes from the controller
	// manager a moment later; pods are refused until it exists.
	deadline := time.Now().Add(30 * time.Second)
	for {
		_, err := c.CS.CoreV1().ServiceAccounts(name).Get(context.Background(), "default", metav1.GetOptions{})
		if err == nil {
			return name
		}
		if time.Now().After(deadline) {
			t.Fatalf("namespace %s has no default ServiceAccount after 30s: %v", name, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// Config returns a runtime configuration for namespace ns of the cluster
// setup-kube.sh makes: the agent image it imports, a release of the test's
// own (so parallel tests' NetworkPolicies never select each other's pods).
func Config(ns string) kube.Config {
	return kube.Config{
		Namespace:  ns,
		Release:    "sbtest-" + ns[len(ns)-6:],
		AgentImage: AgentImage,
		// ImagePullPolicy IfNotPresent (the default): the images are on
		// the node; there is no registry.
		ReadyTimeout: 2 * time.Minute,
		Poll:         50 * time.Millisecond,
	}
}

// New returns a runtime on the cluster with cfg. For runsc it requires the
// RuntimeClass (setup-kube.sh applies gvisor).
func (c *Cluster) New(t testing.TB, cfg kube.Config, runtime string) *kube.Runtime {
	t.Helper()
	rt, err := kube.New(c.CS, cfg)
	if err != nil {
		t.Fatal(err)
	}
	if runtime != "" {
		have, err := rt.Runtimes(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		found := false
		for _, h := range have {
			found = found || h == runtime
		}
		dockertest.Require(t, found, fmt.Sprintf("the cluster has no RuntimeClass for %s (have %v; setup-kube.sh applies gvisor)", runtime, have))
	}
	return rt
}

// Spec returns a spec for a session pod of the test image on runtime,
// labelled LabelTest, sized to fit the node.
func Spec(t testing.TB, tenant, session, owner, runtime string, opts ...sandbox.Opt) sandbox.Spec {
	t.Helper()
	s, err := sandbox.NewSpec(tenant, session, append([]sandbox.Opt{
		sandbox.WithImage(Image),
		sandbox.WithRuntime(runtime),
		sandbox.WithAgentArgs("--uid", "1000", "--gid", "1000"),
		sandbox.WithLabels(map[string]string{LabelTest: "1"}),
		sandbox.WithMemory(512 * sandbox.MiB),
		sandbox.WithWorkspaceSize(64 * sandbox.MiB),
		sandbox.WithTmpSize(32 * sandbox.MiB),
		sandbox.WithSpillSize(32 * sandbox.MiB),
		sandbox.WithPidsLimit(1024),
	}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	s.Owner = owner
	return s
}

// Exec runs a bash command in the sandbox as its commands run (the
// sandbox user, through the agent over TCP with the session's token) and
// returns its stdout; it fails t if the agent cannot be reached.
func Exec(t testing.TB, sb sandbox.Sandbox, command string) string {
	t.Helper()
	res, err := Run(context.Background(), sb, command, 30*time.Second)
	if err != nil {
		t.Fatalf("run %q in %s: %v", command, sb.ID, err)
	}
	return res.Stdout
}

// Run is Exec with its result and error, bounded by timeout.
func Run(ctx context.Context, sb sandbox.Sandbox, command string, timeout time.Duration) (executor.Result, error) {
	ctx, cancel := context.WithTimeout(ctx, timeout+10*time.Second)
	defer cancel()
	cl, err := agentapi.DialEndpoint(ctx, sb.Agent)
	if err != nil {
		return executor.Result{}, fmt.Errorf("dial the agent at %s: %w", sb.Agent.Address, err)
	}
	defer cl.Close()
	lim := executor.DefaultLimits()
	spec, err := lim.Resolve(ctx, executor.Request{Session: sb.Session, Command: command, Timeout: timeout},
		cl.Hello().Root, []string{"PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"})
	if err != nil {
		return executor.Result{}, err
	}
	return cl.Run(ctx, spec)
}

// Parallel sets -test.parallel to n unless the command line set it, for
// the TestMain of a suite whose cases each wait seconds for a pod: the wait
// is the cluster's, not this process's, and go test's default (GOMAXPROCS,
// 2 on the CI machine) makes the run a queue of pod starts. It parses the
// command line first.
func Parallel(n int) {
	flag.Parse()
	set := false
	flag.Visit(func(f *flag.Flag) { set = set || f.Name == "test.parallel" })
	if !set {
		flag.Set("test.parallel", fmt.Sprint(n))
	}
}
