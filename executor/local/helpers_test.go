package local

import (
	"context"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/shellbox/shellbox/executor"
)

const session = "s1"

// newExec returns an Executor rooted in a fresh temporary directory, with
// short timeouts, and its own cgroup parent so the test can check that every
// per-command cgroup was removed.
func newExec(t *testing.T, mode CgroupMode, mut ...func(*Config)) *Executor {
	t.Helper()
	l := executor.DefaultLimits()
	l.DefaultTimeout = 20 * time.Second
	l.Grace = 300 * time.Millisecond
	parent := "shellbox-test/" + newID()
	cfg := Config{
		Root:         t.TempDir(),
		SpillDir:     t.TempDir(),
		Limits:       l,
		Cgroup:       mode,
		CgroupParent: parent,
	}
	for _, m := range mut {
		m(&cfg)
	}
	e, err := New(cfg)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	// Tests may swap the hierarchy; remember the parents New made.
	parents := []*hierarchy{e.hier.Load(), e.fallback}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if err := e.Close(ctx); err != nil {
			t.Errorf("Close: %v", err)
		}
		for _, h := range append(parents, e.hier.Load()) {
			if h == nil {
				continue
			}
			ents, _ := os.ReadDir(h.parent)
			for _, ent := range ents {
				if ent.IsDir() { // not a control file
					t.Errorf("cgroup left behind: %s", filepath.Join(h.parent, ent.Name()))
				}
			}
			os.Remove(h.parent)
		}
	})
	return e
}

// modes are the isolation modes this host supports; the tree tests run
// under each. On a host without cgroup rights only "off" remains, and the
// test says so.
func modes(t *testing.T) []CgroupMode {
	t.Helper()
	out := []CgroupMode{CgroupOff}
	for _, m := range []CgroupMode{CgroupV2, CgroupV1} {
		if _, _, err := detect(m, "shellbox-test"); err != nil {
			t.Logf("cgroup mode %s unavailable here: %v", m, err)
			continue
		}
		out = append(out, m)
	}
	return out
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
	st, err := readProcStat(pid)
	return err != nil || st.state == 'Z' || st.state == 'X'
}

// waitPidFile is shell that waits until a pid file is written.
func waitPidFile(name string) string {
	return "while [ ! -s " + name + " ]; do sleep 0.01; done"
}

func requireRoot(t *testing.T) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("needs root: commands switch to uid 1000")
	}
}

func exists(p string) bool {
	_, err := os.Stat(p)
	return err == nil
}
