package kube

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"sync"
	"syscall"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/shellbox/shellbox/agentapi"
	"github.com/shellbox/shellbox/executor"
)

// TestAgentOverTCP plays the kubelet with the real agent: once the pod and
// its Secret exist, it starts the agent binary with the sandbox
// container's own command, arguments and environment (the token resolved
// from the Secret through its secretKeyRef, as the kubelet does), on the
// host, and marks the pod ready at 127.0.0.1. The sandbox's Endpoint then
// reaches that agent with the token, and a command runs.
func TestAgentOverTCP(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("kube: this test starts the agent, which runs commands as uid 1000: it needs root")
	}
	for _, level := range []string{PodSecurityBaseline, PodSecurityRestricted} {
		t.Run(level, func(t *testing.T) { testAgentOverTCP(t, level) })
	}
}

func testAgentOverTCP(t *testing.T, level string) {
	bin := buildAgent(t)
	port := freePort(t)
	c := newCluster(t)
	c.setKubelet(func(p *corev1.Pod) []corev1.Event { return nil }) // pending until started below
	r := c.runtime(t, func(cfg *Config) {
		cfg.AgentPort = int32(port)
		cfg.Poll = 10 * time.Millisecond
		cfg.ReadyTimeout = 30 * time.Second
		cfg.PodSecurity = level
	})
	ctx := context.Background()

	done := make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() {
		if err := kubelet(t, c, bin, port, done); err != nil {
			t.Errorf("kubelet: %v", err)
		}
	})
	defer func() { close(done); wg.Wait() }()

	sb, err := r.Create(ctx, testSpec(t))
	if err != nil {
		t.Fatal(err)
	}
	if sb.Agent.Address != fmt.Sprintf("127.0.0.1:%d", port) {
		t.Fatalf("endpoint %+v", sb.Agent)
	}
	bad := sb.Agent
	bad.Token = ""
	if _, err := agentapi.DialEndpoint(ctx, bad); err == nil {
		t.Errorf("the agent answered without the token")
	}
	cl, err := agentapi.DialEndpoint(ctx, sb.Agent)
	if err != nil {
		t.Fatalf("dial the sandbox's endpoint: %v", err)
	}
	defer cl.Close()
	lim := executor.DefaultLimits()
	spec, err := lim.Resolve(ctx, executor.Request{Session: "s", Command: "id -u; echo $SHELLBOX_SPILL_BYTES; env | grep -c SHELLBOX_AGENT_TOKEN"},
		cl.Hello().Root, []string{"PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"})
	if err != nil {
		t.Fatal(err)
	}
	res, err := cl.Run(ctx, spec)
	if err != nil || res.Stdout != "1000\n\n0\n" {
		t.Errorf("command through the endpoint: %+v, %v; want uid 1000, no SHELLBOX_* variable", res, err)
	}
	if err := r.Remove(ctx, sb.ID); err != nil {
		t.Fatal(err)
	}
}

// kubelet starts the agent of the first pod that has its Secret, as the
// kubelet would (the init container writing the token file first),
// kubelet would start the sandbox container (its command, arguments,
// environment, and runAsUser/runAsGroup), and marks the pod running and
// ready at 127.0.0.1; it stops the agent when done closes.
func kubelet(t *testing.T, c *cluster, bin string, port int, done <-chan struct{}) error {
	ctx := context.Background()
	var pod *corev1.Pod
	for pod == nil {
		select {
		case <-done:
			return nil
		case <-time.After(5 * time.Millisecond):
		}
		pl, err := c.cs.CoreV1().Pods("sessions").List(ctx, metav1.ListOptions{})
		if err != nil {
			return err
		}
		for i := range pl.Items {
			if _, err := c.cs.CoreV1().Secrets("sessions").Get(ctx, pl.Items[i].Name, metav1.GetOptions{}); err == nil {
				pod = &pl.Items[i]
			}
		}
	}
	ctr := pod.Spec.Containers[0]
	envOf := func(ctr corev1.Container) ([]string, error) {
		env := []string{"PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"}
		for _, e := range ctr.Env {
			v := e.Value
			if ref := e.ValueFrom; ref != nil && ref.SecretKeyRef != nil {
				s, err := c.cs.CoreV1().Secrets("sessions").Get(ctx, ref.SecretKeyRef.Name, metav1.GetOptions{})
				if err != nil {
					return nil, err
				}
				v = string(s.Data[ref.SecretKeyRef.Key])
			}
			env = append(env, e.Name+"="+v)
		}
		return env, nil
	}
	env, err := envOf(ctr)
	if err != nil {
		return err
	}
	credOf := func(sc *corev1.SecurityContext) *syscall.SysProcAttr {
		if sc != nil && sc.RunAsUser != nil && sc.RunAsGroup != nil {
			return &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: uint32(*sc.RunAsUser), Gid: uint32(*sc.RunAsGroup)}}
		}
		return nil
	}
	// The container's arguments, then what differs on a host: the
	// directories the pod's volumes would be, loopback only, no cgroups.
	base, err := os.MkdirTemp("", "sbkube-pod") // t.TempDir's parent is root's, 0700
	if err != nil {
		return err
	}
	defer os.RemoveAll(base)
	os.Chmod(base, 0o755)
	ws, spill, tokDir, agentDir := filepath.Join(base, "ws"), filepath.Join(base, "spill"), filepath.Join(base, "token"), filepath.Join(base, "agent")
	for _, d := range []string{ws, spill, tokDir, agentDir} {
		if err := os.Mkdir(d, 0o755); err != nil {
			return err
		}
	}
	// An emptyDir is 0777; /workspace is given to the user by the init
	// container's --own (baseline).
	for _, d := range []string{spill, tokDir, agentDir} {
		if err := os.Chmod(d, 0o777); err != nil {
			return err
		}
	}
	// The init container's part that the agent needs: the token file
	// (--token-out), written with its environment and as its user.
	ic := pod.Spec.InitContainers[0]
	ienv, err := envOf(ic)
	if err != nil {
		return err
	}
	tokFile := filepath.Join(tokDir, "token")
	init := exec.Command(bin, "--install", filepath.Join(agentDir, "shellbox-agent"), "--token-out", tokFile)
	init.Env, init.SysProcAttr = ienv, credOf(ic.SecurityContext)
	if out, err := init.CombinedOutput(); err != nil {
		return fmt.Errorf("the init container (args %q): %v: %s", ic.Args, err, out)
	}
	if err := os.Chown(ws, 1000, 1000); err != nil {
		return err
	}
	args := append(append([]string{}, ctr.Args...), "--listen", fmt.Sprintf("127.0.0.1:%d", port),
		"--spill-dir", spill, "--root", ws, "--home", ws, "--cgroup", "off", "--socket", filepath.Join(base, "unused.sock"),
		"--token-file", tokFile)
	cmd := exec.Command(bin, args...)
	cmd.Env = env
	cmd.SysProcAttr = credOf(ctr.SecurityContext)
	stderr, err := cmd.StderrPipe()
	if err != nil {
		return err
	}
	if err := cmd.Start(); err != nil {
		return err
	}
	serving := make(chan bool, 1)
	read := make(chan struct{})
	// Killed, its stderr read to the end (so no line is logged after the
	// test), then waited for.
	defer func() { cmd.Process.Signal(syscall.SIGKILL); <-read; cmd.Wait() }()
	go func() {
		defer close(read)
		re := regexp.MustCompile(`serving tcp `)
		sc := bufio.NewScanner(stderr)
		ok := false
		for sc.Scan() {
			t.Logf("agent: %s", sc.Text())
			if !ok && re.MatchString(sc.Text()) {
				ok = true
				serving <- true
			}
		}
		if !ok {
			serving <- false
		}
	}()
	select {
	case ok := <-serving:
		if !ok {
			return fmt.Errorf("the agent ended before serving (args %q)", args)
		}
	case <-time.After(20 * time.Second):
		return fmt.Errorf("the agent never served")
	}
	// Read and removed before serving: no command finds it.
	if _, err := os.Stat(tokFile); !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("the token file after the agent's start: %v, want it removed", err)
	}
	pod.Status = corev1.PodStatus{Phase: corev1.PodRunning, PodIP: "127.0.0.1", ContainerStatuses: []corev1.ContainerStatus{{
		Name: ContainerSandbox, Ready: true, State: corev1.ContainerState{Running: &corev1.ContainerStateRunning{}}}}}
	if _, err := c.cs.CoreV1().Pods("sessions").UpdateStatus(ctx, pod, metav1.UpdateOptions{}); err != nil {
		return err
	}
	<-done
	return nil
}

func freePort(t *testing.T) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

var (
	agentOnce sync.Once
	agentBin  string
	agentErr  error
)

// buildAgent builds cmd/shellbox-agent, statically, once per test binary
// (TestMain removes it).
func buildAgent(t *testing.T) string {
	t.Helper()
	agentOnce.Do(func() {
		dir, err := os.MkdirTemp("", "sbkube-agent")
		if err != nil {
			agentErr = err
			return
		}
		os.Chmod(dir, 0o755)
		agentBin = filepath.Join(dir, "shellbox-agent")
		cmd := exec.Command("go", "build", "-trimpath", "-o", agentBin, "github.com/shellbox/shellbox/cmd/shellbox-agent")
		cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
		if out, err := cmd.CombinedOutput(); err != nil {
			agentErr = fmt.Errorf("go build: %v\n%s", err, out)
		}
	})
	if agentErr != nil {
		t.Fatal(agentErr)
	}
	return agentBin
}

func TestMain(m *testing.M) {
	code := m.Run()
	if agentBin != "" {
		os.RemoveAll(filepath.Dir(agentBin))
	}
	os.Exit(code)
}
