package sandboxed_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/shellbox/shellbox/executor"
	"github.com/shellbox/shellbox/executor/sandboxed/sandboxedtest"
	"github.com/shellbox/shellbox/sandbox"
	"github.com/shellbox/shellbox/sandbox/enginetest"
	"github.com/shellbox/shellbox/session/sandboxconn"
	"github.com/shellbox/shellbox/tools"
)

// TestWorkspaceSurvivesTheSandbox: a session's /workspace outlives the
// sandbox — over its memory limit (under gVisor the whole sandbox dies),
// its agent killed from the host, its container removed through the
// engine behind shellbox's back — and the session's next call, in a new
// sandbox, finds the files. Ending the session removes the workspace.
func TestWorkspaceSurvivesTheSandbox(t *testing.T) {
	enginetest.Each(t, func(t *testing.T, e enginetest.Engine) {
		for _, runtime := range []string{sandbox.RuntimeRunc, sandbox.RuntimeRunsc} {
			t.Run(runtime, func(t *testing.T) { workspaceSurvives(t, e, runtime) })
		}
	})
}

func workspaceSurvives(t *testing.T, e enginetest.Engine, runtime string) {
	lim := executor.DefaultLimits()
	lim.Grace = 500 * time.Millisecond
	r := sandboxedtest.New(t, e, runtime, lim,
		sandbox.WithMemory(128*sandbox.MiB),
		sandbox.WithWorkspaceSize(16*sandbox.MiB),
		sandbox.WithTmpSize(8*sandbox.MiB))
	ts, err := tools.New(r.Exec, tools.Config{Home: "/workspace"})
	if err != nil {
		t.Fatal(err)
	}
	defer ts.Close()
	const s = "survivor"
	// sandboxOf is the session's sandbox; its creation time tells one
	// from the next (containerd's ids are the session's).
	sandboxOf := func(t *testing.T) sandbox.Sandbox {
		t.Helper()
		for _, sb := range r.Manager.Sandboxes() {
			if sb.Session == s {
				return sb
			}
		}
		t.Fatal("the session has no sandbox")
		return sandbox.Sandbox{}
	}
	same := func(a, b sandbox.Sandbox) bool { return a.ID == b.ID && a.Created.Equal(b.Created) }
	// write leaves a file of its own and a 1 MB one in the workspace.
	write := func(t *testing.T, name string) {
		t.Helper()
		res := call(t, ts, s, "bash", bash("echo "+name+" > /workspace/"+name+" && head -c 1000000 /dev/urandom > /workspace/"+name+".bin && echo ok"))
		if res.Text != "ok" {
			t.Fatalf("writing %s: %q", name, res.Text)
		}
	}
	// survived checks, from the session's next sandbox, every file
	// written so far. The first call after a death may be the one that
	// finds the connection broken (an error, or the death reported as
	// an OOM kill: Docker says so of a runc container whose cgroup once
	// killed a command); the one after it must run in a new sandbox.
	survived := func(t *testing.T, before sandbox.Sandbox, names ...string) {
		t.Helper()
		cmd := "cd /workspace && for f in " + strings.Join(names, " ") + "; do cat $f; stat -c %s $f.bin; done"
		var res tools.Result
		for range 2 {
			res = call(t, ts, s, "bash", bash(cmd))
			if f, ok := res.Value.(*tools.Foreground); !res.IsError && (!ok || !f.OOMKilled) {
				break
			}
			t.Logf("first call after the death: %q", res.Text)
		}
		var want strings.Builder
		for _, n := range names {
			want.WriteString(n + "\n1000000\n")
		}
		if res.Text != strings.TrimSuffix(want.String(), "\n") {
			t.Errorf("workspace after the sandbox died: %q, want %q", res.Text, want.String())
		}
		if after := sandboxOf(t); same(after, before) {
			t.Errorf("still sandbox %s of %s: it was meant to die", before.ID, before.Created)
		}
	}

	write(t, "first")
	var names = []string{"first"}

	t.Run("memory limit", func(t *testing.T) {
		before := sandboxOf(t)
		res := call(t, ts, s, "bash", bash(`x=$(head -c 400000000 /dev/zero | tr '\0' a); echo ${#x}`, "timeoutMs", 60000))
		f, ok := res.Value.(*tools.Foreground)
		if !ok || f.Signal != "SIGKILL" || !f.OOMKilled {
			t.Fatalf("want the call OOM-killed: %q", lastLines(res.Text, 3))
		}
		if runtime == sandbox.RuntimeRunc {
			// runc: the kernel kills the command, the sandbox lives on.
			if after := sandboxOf(t); !same(after, before) {
				t.Errorf("runc: the sandbox was replaced (%s → %s)", before.ID, after.ID)
			}
			return
		}
		survived(t, before, names...)
	})
	t.Run("agent killed", func(t *testing.T) {
		write(t, "second")
		names = append(names, "second")
		before := sandboxOf(t)
		if err := syscall.Kill(e.Pid(t, before.ID), syscall.SIGKILL); err != nil {
			t.Fatal(err)
		}
		survived(t, before, names...)
	})
	t.Run("removed behind our back", func(t *testing.T) {
		write(t, "third")
		names = append(names, "third")
		before := sandboxOf(t)
		e.RemoveBehind(t, before.ID)
		survived(t, before, names...)
	})
	t.Run("bounded", func(t *testing.T) {
		res := call(t, ts, s, "bash", bash("head -c 20000000 /dev/zero > /workspace/fill; echo rc=$?; rm -f /workspace/fill"))
		if !strings.Contains(res.Text, "No space left on device") || !strings.Contains(res.Text, "rc=1") {
			t.Errorf("want ENOSPC past 16 MiB, got %q", res.Text)
		}
	})
	t.Run("ends with the session", func(t *testing.T) {
		ws := filepath.Join(r.StateDir, "workspaces", tenant, s)
		if _, err := os.Stat(filepath.Join(ws, "first")); err != nil {
			t.Fatalf("the host workspace: %v", err)
		}
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		r.Exec.Forget(s)
		if err := r.Manager.Remove(ctx, tenant, s); err != nil {
			t.Fatal(err)
		}
		if _, err := os.Lstat(ws); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("workspace kept after the session ended: %v", err)
		}
		res := call(t, ts, s, "bash", bash("ls -A /workspace | wc -l"))
		if res.Text != "0" {
			t.Errorf("a new session with the same id: /workspace has %q entries, want 0", res.Text)
		}
	})
}

// TestWorkspaceAfterRestart: a server that starts (Adopt) while a
// session's sandbox lies dead keeps the session's workspace, and the
// session's next call finds its files in a new sandbox; the workspace of
// a session with no sandbox at all is swept then. On every engine (runc).
func TestWorkspaceAfterRestart(t *testing.T) {
	enginetest.Each(t, func(t *testing.T, e enginetest.Engine) {
		r := sandboxedtest.New(t, e, sandbox.RuntimeRunc, executor.DefaultLimits())
		ts, err := tools.New(r.Exec, tools.Config{Home: "/workspace"})
		if err != nil {
			t.Fatal(err)
		}
		defer ts.Close()
		for _, s := range []string{"dead", "gone"} {
			if res := call(t, ts, s, "bash", bash("echo "+s+" > /workspace/f && echo ok")); res.Text != "ok" {
				t.Fatalf("%s: %q", s, res.Text)
			}
		}
		byName := map[string]sandbox.Sandbox{}
		for _, sb := range r.Manager.Sandboxes() {
			byName[sb.Session] = sb
		}
		// The server goes; meanwhile one sandbox dies (its agent killed: it
		// stays, exited) and another is removed through the engine.
		r.Exec.Close()
		if err := syscall.Kill(e.Pid(t, byName["dead"].ID), syscall.SIGKILL); err != nil {
			t.Fatal(err)
		}
		e.RemoveBehind(t, byName["gone"].ID)
		deadline := time.Now().Add(30 * time.Second)
		for {
			sb, err := r.Runtime.Get(context.Background(), tenant, "dead")
			if err == nil && sb.State != sandbox.StateRunning {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("the killed sandbox is still %v (%v)", sb.State, err)
			}
			time.Sleep(100 * time.Millisecond)
		}

		// The next server: same runtime, state directory and owner.
		m, err := sandbox.NewManager(sandbox.Config{Runtime: r.Runtime, Owner: r.Owner, Ready: sandboxconn.WaitAgent})
		if err != nil {
			t.Fatal(err)
		}
		rep, err := m.Adopt(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		wsDir := func(s string) string { return filepath.Join(r.StateDir, "workspaces", tenant, s) }
		if len(rep.Removed) != 1 || rep.Removed[0].Session != "dead" {
			t.Errorf("removed at adopt: %+v, want the dead sandbox", rep.Removed)
		}
		if !slices.Contains(rep.Swept, wsDir("gone")) || slices.Contains(rep.Swept, wsDir("dead")) {
			t.Errorf("swept %v: want the workspace of gone, not dead's", rep.Swept)
		}
		ex, err := sandboxconn.New(sandboxconn.Config{
			Manager: m, Tenant: tenant, Limits: executor.DefaultLimits(),
			Spec: func(session string) (sandbox.Spec, error) { return sandbox.NewSpec(tenant, session, r.Opts...) },
		})
		if err != nil {
			t.Fatal(err)
		}
		ts2, err := tools.New(ex, tools.Config{Home: "/workspace"})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() {
			ts2.Close()
			ex.Close()
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			for _, s := range []string{"dead", "gone"} {
				m.Remove(ctx, tenant, s)
			}
		})
		if res := call(t, ts2, "dead", "bash", bash("cat /workspace/f")); res.Text != "dead" {
			t.Errorf("the dead sandbox's session after the restart: %q, want its file", res.Text)
		}
		if res := call(t, ts2, "gone", "bash", bash("ls -A /workspace | wc -l")); res.Text != "0" {
			t.Errorf("the removed sandbox's session after the restart: %q entries, want a new, empty workspace", res.Text)
		}
	})
}
