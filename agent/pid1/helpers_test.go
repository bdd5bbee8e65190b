package pid1

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"flag"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/shellbox/shellbox/executor"
	"github.com/shellbox/shellbox/executor/local"
)

// The rig of executor/local's tests (helpers_test.go, main_test.go), over
// this package's Executor.

// TestMain runs more tests in parallel than there are CPUs unless -parallel
// says otherwise: most of these tests wait on sleeping processes, timeouts
// and grace periods, not on the CPU.
func TestMain(m *testing.M) {
	flag.Parse()
	set := false
	flag.Visit(func(f *flag.Flag) { set = set || f.Name == "test.parallel" })
	if !set {
		flag.Set("test.parallel", "16")
	}
	os.Exit(m.Run())
}

const session = "s1"

// Cgroup modes, as the tests name them.
const (
	CgroupAuto = local.CgroupAuto
	CgroupOff  = local.CgroupOff
)

// newID returns 12 random hex characters.
func newID() string {
	b := make([]byte, 6)
	rand.Read(b)
	return hex.EncodeToString(b)
}

// newExec returns an Executor rooted in a fresh temporary directory, with
// short timeouts, and its own cgroup parent; it is closed when the test
// ends.
func newExec(t *testing.T, mode local.CgroupMode, mut ...func(*Config)) *Executor {
	t.Helper()
	l := executor.DefaultLimits()
	l.DefaultTimeout = 20 * time.Second
	l.Grace = 300 * time.Millisecond
	cfg := Config{Config: local.Config{
		Root:         t.TempDir(),
		SpillDir:     t.TempDir(),
		Limits:       l,
		Cgroup:       mode,
		CgroupParent: "shellbox-test/" + newID(),
	}}
	for _, m := range mut {
		m(&cfg)
	}
	e, err := New(cfg)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if err := e.Close(ctx); err != nil {
			t.Errorf("Close: %v", err)
		}
	})
	return e
}

// run resolves req (session s1, bash) and runs it.
func run(t *testing.T, e *Executor, req executor.Request) executor.Result {
	t.Helper()
	res, err := runErr(t, e, req)
	if err != nil {
		t.Fatalf("Run(%q): %v", req.Command, err)
	}
	return res
}

func runErr(t *testing.T, e *Executor, req executor.Request) (executor.Result, error) {
	t.Helper()
	if req.Session == "" {
		req.Session = session
	}
	spec, err := e.Resolve(context.Background(), req)
	if err != nil {
		return executor.Result{}, err
	}
	return e.Run(context.Background(), spec)
}

// start resolves req as a background request and starts it.
func start(t *testing.T, e *Executor, req executor.Request, mut ...func(*executor.Spec)) executor.Task {
	t.Helper()
	if req.Session == "" {
		req.Session = session
	}
	req.Background = true
	spec, err := e.Resolve(context.Background(), req)
	if err != nil {
		t.Fatalf("Resolve: %v", err)
	}
	for _, m := range mut {
		m(&spec)
	}
	task, err := e.Start(context.Background(), spec)
	if err != nil {
		t.Fatalf("Start(%q): %v", req.Command, err)
	}
	return task
}

// readPid waits for a pid file written by a command and returns the pid.
func readPid(t *testing.T, path string) int {
	t.Helper()
	for range 1000 {
		b, _ := os.ReadFile(path)
		if s := strings.TrimSpace(string(b)); s != "" {
			pid, err := strconv.Atoi(s)
			if err != nil {
				t.Fatalf("pid file %s: %q", path, b)
			}
			return pid
		}
		time.Sleep(10 * time.Millisecond)
	}
	t.Fatalf("pid file %s never written", path)
	return 0
}

// dead reports whether pid is gone. A killed orphan stays a zombie until the
// host's init reaps it, and a zombie runs nothing.
func dead(pid int) bool {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return true
	}
	state, _, err := statStateParent(b)
	return err != nil || state == 'Z' || state == 'X'
}

// waitPidFile is shell that waits until a pid file is written.
func waitPidFile(name string) string {
	return "while [ ! -s " + name + " ]; do sleep 0.01; done"
}
