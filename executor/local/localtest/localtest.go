// Package localtest is the rig the tests of executor/local and agent/pid1
// (the runner and the runner as a sandbox's PID 1) share: short limits, a
// fresh cgroup parent per executor, the calls that resolve and run or start
// a request in session s1, pid files, and the check that Close left no
// cgroup behind. Only tests import it (docs/testing.md).
//
// It does not import executor/local, so that package's own (internal) tests
// can use it: Run and Start take an executor.BashExecutor, New takes the
// package's New and config, and the cgroup check asks the executor for its
// parents (local.Executor.CgroupParents).
package localtest

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"flag"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/shellbox/shellbox/executor"
)

// Session is the session Run, RunErr and Start use when the request names
// none.
const Session = "s1"

// Main runs m, with more tests in parallel than there are CPUs unless
// -parallel says otherwise: most of these tests wait on sleeping processes,
// timeouts and grace periods, not on the CPU. A package's TestMain calls it.
func Main(m *testing.M) {
	flag.Parse()
	set := false
	flag.Visit(func(f *flag.Flag) { set = set || f.Name == "test.parallel" })
	if !set {
		flag.Set("test.parallel", "16")
	}
	os.Exit(m.Run())
}

// Limits are the default limits with short timeouts.
func Limits() executor.Limits {
	l := executor.DefaultLimits()
	l.DefaultTimeout = 20 * time.Second
	l.Grace = 300 * time.Millisecond
	return l
}

// CgroupParent returns a cgroup parent of its own, below shellbox-test, so a
// test can check that every per-command cgroup was removed.
func CgroupParent() string {
	return "shellbox-test/" + NewID()
}

// NewID returns 12 random hex characters.
func NewID() string {
	b := make([]byte, 6)
	rand.Read(b)
	return hex.EncodeToString(b)
}

// Executor is what New needs of an executor: local.Executor and
// pid1.Executor are one.
type Executor interface {
	Close(context.Context) error
	// CgroupParents are the cgroup directories the executor makes its
	// commands' cgroups below.
	CgroupParents() []string
}

// New returns newExec(cfg) after mut, failing the test if that fails. When
// the test ends it closes the executor (failing the test if that fails
// within 30 seconds), then fails the test for every cgroup left below the
// executor's cgroup parents, and removes the parents.
func New[C any, E Executor](t *testing.T, newExec func(C) (E, error), cfg C, mut ...func(*C)) E {
	t.Helper()
	for _, m := range mut {
		m(&cfg)
	}
	e, err := newExec(cfg)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	cleanup(t, e)
	return e
}

// cleanup is New's end of the test.
func cleanup(t *testing.T, e Executor) {
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if err := e.Close(ctx); err != nil {
			t.Errorf("Close: %v", err)
		}
		for _, parent := range e.CgroupParents() {
			ents, _ := os.ReadDir(parent)
			for _, ent := range ents {
				if ent.IsDir() { // not a control file
					t.Errorf("cgroup left behind: %s", filepath.Join(parent, ent.Name()))
				}
			}
			os.Remove(parent)
		}
	})
}

// Run resolves req (session s1, bash) and runs it.
func Run(t *testing.T, e executor.BashExecutor, req executor.Request) executor.Result {
	t.Helper()
	res, err := RunErr(t, e, req)
	if err != nil {
		t.Fatalf("Run(%q): %v", req.Command, err)
	}
	return res
}

// RunErr is Run, returning the error of Resolve or Run.
func RunErr(t *testing.T, e executor.BashExecutor, req executor.Request) (executor.Result, error) {
	t.Helper()
	if req.Session == "" {
		req.Session = Session
	}
	spec, err := e.Resolve(context.Background(), req)
	if err != nil {
		return executor.Result{}, err
	}
	return e.Run(context.Background(), spec)
}

// Start resolves req as a background request, applies mut to the spec and
// starts it.
func Start(t *testing.T, e executor.BashExecutor, req executor.Request, mut ...func(*executor.Spec)) executor.Task {
	t.Helper()
	if req.Session == "" {
		req.Session = Session
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

// ReadPid waits for a pid file written by a command and returns the pid.
func ReadPid(t *testing.T, path string) int {
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

// WaitPidFile is shell that waits until a pid file is written.
func WaitPidFile(name string) string {
	return "while [ ! -s " + name + " ]; do sleep 0.01; done"
}
