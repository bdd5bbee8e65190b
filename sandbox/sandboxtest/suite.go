package sandboxtest

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/shellbox/shellbox/sandbox"
)

// Harness is what a runtime's test hands to Run.
type Harness struct {
	// New returns a runtime on the engine under test. Run calls it again
	// to play a restarted server (a new client on the same engine).
	// Required.
	New func(t *testing.T) sandbox.Runtime
	// Spec returns a valid spec for a session of tenant: an image present
	// on the engine, the runtime under test, Owner set to owner. Required.
	Spec func(t *testing.T, tenant, session, owner string) sandbox.Spec
	// Tenant is a tenant id unique to this run (so parallel runs and
	// leftovers of crashed ones never meet). Required.
	Tenant string
	// Foreign puts, under the name the runtime gives tenant/session,
	// something shellbox did not create, and returns a func that reports
	// whether it is still there. Nil: the conflict case is skipped, with
	// the reason.
	Foreign func(t *testing.T, tenant, session string) (stillThere func() bool)
	// Exec runs a bash command in the sandbox as its commands run (the
	// sandbox user, through the agent) and returns its stdout. Nil for a
	// runtime that runs nothing (the Fake): the checks from inside are
	// skipped, with the reason.
	Exec func(t *testing.T, sb sandbox.Sandbox, command string) string
	// Gvisor: the sandbox runs under gVisor, whose /proc has no NoNewPrivs
	// line.
	Gvisor bool
	// PodNetwork: the sandbox has a network interface besides loopback (a
	// Kubernetes pod's), confined by a NetworkPolicy instead of having no
	// network: the loopback-only check is left out (the runtime's own
	// tests check what the pod can reach).
	PodNetwork bool
	// RealAgent: the sandbox's agent is cmd/shellbox-agent, whose seccomp
	// filter every command inherits (not a test's stand-in): the checks
	// of what that filter does are made.
	RealAgent bool
}

// Run runs the runtime conformance suite: create, get, list by owner,
// remove, session state that outlives a sandbox, already exists, not found, conflict with a foreign object, bad
// specs, adoption by a restarted server, concurrent ensure, and the
// hardening as seen from inside.
func Run(t *testing.T, h Harness) {
	if h.New == nil || h.Spec == nil || h.Tenant == "" {
		t.Fatal("sandboxtest: Harness.New, Spec and Tenant are required")
	}
	// The owner is the run's own (Tenant is unique to it), so parallel
	// runs, and leftovers of crashed ones, never adopt each other.
	owner := "sbtest-" + h.Tenant
	ctx := context.Background()
	create := func(t *testing.T, rt sandbox.Runtime, session string) sandbox.Sandbox {
		t.Helper()
		sb, err := rt.Create(ctx, h.Spec(t, h.Tenant, session, owner))
		if err != nil {
			t.Fatalf("Create %s: %v", session, err)
		}
		t.Cleanup(func() { _ = rt.Remove(context.Background(), sb.ID) })
		return sb
	}

	t.Run("CreateGetListRemove", func(t *testing.T) {
		rt := h.New(t)
		spec := h.Spec(t, h.Tenant, "crud", owner)
		// The creator's record of the session's settings is kept with
		// the sandbox, exactly, whatever it holds (JSON in practice).
		spec.Settings = `{"image":"x:1","mounts":[{"source":"a b","target":"/mnt/ü"}],"pad":"` + strings.Repeat("s", 2000) + `"}`
		sb, err := rt.Create(ctx, spec)
		if err != nil {
			t.Fatalf("Create crud: %v", err)
		}
		t.Cleanup(func() { _ = rt.Remove(context.Background(), sb.ID) })
		if sb.ID == "" || sb.Tenant != h.Tenant || sb.Session != "crud" || sb.Owner != owner ||
			sb.Runtime != spec.Runtime || sb.State != sandbox.StateRunning {
			t.Fatalf("created: %+v", sb)
		}
		if h.Exec != nil && (sb.Agent.Network == "" || sb.Agent.Address == "") {
			t.Errorf("created sandbox has no agent endpoint: %+v", sb.Agent)
		}
		got, err := rt.Get(ctx, h.Tenant, "crud")
		if err != nil || got.ID != sb.ID || got.Owner != owner || got.Runtime != spec.Runtime ||
			got.State != sandbox.StateRunning || got.Agent != sb.Agent {
			t.Fatalf("Get: %+v, %v; created %+v", got, err, sb)
		}
		if got.Settings != spec.Settings {
			t.Errorf("Get: settings %.80q…, want %.80q…", got.Settings, spec.Settings)
		}
		list, err := rt.List(ctx, owner)
		if err != nil {
			t.Fatalf("List: %v", err)
		}
		for _, l := range list {
			if l.ID == sb.ID && l.Settings != spec.Settings {
				t.Errorf("List: settings %.80q…, want %.80q…", l.Settings, spec.Settings)
			}
		}
		if !contains(t, rt, owner, sb.ID) || !contains(t, rt, "", sb.ID) || contains(t, rt, "sbtest-other", sb.ID) {
			t.Errorf("List by owner: want it under %q and \"\", not under another owner", owner)
		}
		if err := rt.Remove(ctx, sb.ID); err != nil {
			t.Fatalf("Remove: %v", err)
		}
		if _, err := rt.Get(ctx, h.Tenant, "crud"); !errors.Is(err, sandbox.ErrNotFound) {
			t.Errorf("Get after Remove: %v, want ErrNotFound", err)
		}
		if contains(t, rt, owner, sb.ID) {
			t.Errorf("List after Remove still has it")
		}
		if err := rt.Remove(ctx, sb.ID); err != nil {
			t.Errorf("second Remove: %v, want nil (already gone is not an error)", err)
		}
	})

	t.Run("RecordUse", func(t *testing.T) {
		rt := h.New(t)
		rec, ok := sandbox.AsUseRecorder(rt)
		if !ok {
			t.Skip("the runtime keeps no uses (no sandbox.UseRecorder)")
		}
		sb := create(t, rt, "used")
		at := time.Now().Add(-time.Minute).Truncate(time.Millisecond)
		if err := rec.RecordUse(ctx, sb, at); err != nil {
			t.Fatalf("RecordUse: %v", err)
		}
		got, err := rt.Get(ctx, h.Tenant, "used")
		if err != nil || !got.LastUsed.Equal(at) {
			t.Fatalf("Get after RecordUse: last used %v, %v; want %v", got.LastUsed, err, at)
		}
		if err := rt.Remove(ctx, sb.ID); err != nil {
			t.Fatal(err)
		}
		if err := rec.RecordUse(ctx, sb, at); !errors.Is(err, sandbox.ErrNotFound) {
			t.Errorf("RecordUse of a removed sandbox: %v, want ErrNotFound", err)
		}
	})

	t.Run("SessionState", func(t *testing.T) {
		rt := h.New(t)
		ss, ok := rt.(sandbox.SessionState)
		if !ok {
			t.Skip("the runtime keeps no state per session (no sandbox.SessionState)")
		}
		t.Cleanup(func() { _, _ = ss.RemoveSession(context.Background(), h.Tenant, "kept") })
		sb := create(t, rt, "kept")
		if h.Exec != nil {
			if out := h.Exec(t, sb, "echo kept > /workspace/f && echo ok"); out != "ok\n" {
				t.Fatalf("writing the workspace: %q", out)
			}
		}
		if err := rt.Remove(ctx, sb.ID); err != nil {
			t.Fatal(err)
		}
		// The session's next sandbox finds its workspace.
		sb = create(t, rt, "kept")
		if h.Exec != nil {
			if out := h.Exec(t, sb, "cat /workspace/f"); out != "kept\n" {
				t.Errorf("the next sandbox's workspace: %q, want the file", out)
			}
		}
		if err := rt.Remove(ctx, sb.ID); err != nil {
			t.Fatal(err)
		}
		if had, err := ss.RemoveSession(ctx, h.Tenant, "kept"); err != nil || !had {
			t.Fatalf("RemoveSession: %v, had %v; want the workspace removed", err, had)
		}
		if had, err := ss.RemoveSession(ctx, h.Tenant, "kept"); err != nil || had {
			t.Errorf("second RemoveSession: %v, had %v", err, had)
		}
		sb = create(t, rt, "kept")
		if h.Exec != nil {
			if out := h.Exec(t, sb, "ls -A /workspace | wc -l"); out != "0\n" {
				t.Errorf("a new session's workspace has %q entries, want 0", out)
			}
		}
	})

	t.Run("AlreadyExists", func(t *testing.T) {
		rt := h.New(t)
		sb := create(t, rt, "twice")
		_, err := rt.Create(ctx, h.Spec(t, h.Tenant, "twice", owner))
		if !errors.Is(err, sandbox.ErrAlreadyExists) {
			t.Fatalf("second Create: %v, want ErrAlreadyExists", err)
		}
		got, err := rt.Get(ctx, h.Tenant, "twice")
		if err != nil || got.ID != sb.ID || got.State != sandbox.StateRunning {
			t.Errorf("the first sandbox after a refused second Create: %+v, %v", got, err)
		}
	})

	t.Run("NotFound", func(t *testing.T) {
		rt := h.New(t)
		if _, err := rt.Get(ctx, h.Tenant, "never-created"); !errors.Is(err, sandbox.ErrNotFound) {
			t.Errorf("Get: %v, want ErrNotFound", err)
		}
	})

	t.Run("BadSpec", func(t *testing.T) {
		rt := h.New(t)
		spec := h.Spec(t, h.Tenant, "bad", owner)
		spec.MemoryBytes = 1
		if _, err := rt.Create(ctx, spec); !errors.Is(err, sandbox.ErrInvalid) {
			t.Errorf("Create with 1 byte of memory: %v, want ErrInvalid", err)
		}
		if _, err := rt.Get(ctx, h.Tenant, "bad"); !errors.Is(err, sandbox.ErrNotFound) {
			t.Errorf("a refused Create left something: %v", err)
		}
	})

	t.Run("ConflictWithForeign", func(t *testing.T) {
		if h.Foreign == nil {
			t.Skip("sandboxtest: this runtime cannot hold a foreign object under a session's name")
		}
		rt := h.New(t)
		still := h.Foreign(t, h.Tenant, "foreign")
		if _, err := rt.Get(ctx, h.Tenant, "foreign"); !errors.Is(err, sandbox.ErrConflict) {
			t.Errorf("Get: %v, want ErrConflict", err)
		}
		_, err := rt.Create(ctx, h.Spec(t, h.Tenant, "foreign", owner))
		if !errors.Is(err, sandbox.ErrConflict) && !errors.Is(err, sandbox.ErrAlreadyExists) {
			t.Errorf("Create over a foreign object: %v, want ErrConflict or ErrAlreadyExists", err)
		}
		m := newManager(t, rt, owner)
		if _, err := m.Ensure(ctx, h.Spec(t, h.Tenant, "foreign", owner)); !errors.Is(err, sandbox.ErrConflict) {
			t.Errorf("Manager.Ensure over a foreign object: %v, want ErrConflict", err)
		}
		if !still() {
			t.Errorf("the foreign object was removed")
		}
	})

	t.Run("AdoptAfterRestart", func(t *testing.T) {
		first := h.New(t)
		m1 := newManager(t, first, owner)
		sb, err := m1.Ensure(ctx, h.Spec(t, h.Tenant, "adopt", owner))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = first.Remove(context.Background(), sb.ID) })

		// A new server process: a new runtime client, a new Manager.
		second := h.New(t)
		m2 := newManager(t, second, owner)
		rep, err := m2.Adopt(ctx)
		if err != nil {
			t.Fatalf("Adopt: %v", err)
		}
		kept := false
		for _, k := range rep.Kept {
			kept = kept || k.ID == sb.ID
		}
		if !kept {
			t.Fatalf("Adopt kept %+v, not %s", rep.Kept, sb.ID)
		}
		again, err := m2.Ensure(ctx, h.Spec(t, h.Tenant, "adopt", owner))
		if err != nil || again.ID != sb.ID || again.Agent != sb.Agent {
			t.Errorf("Ensure after Adopt: %+v, %v; want the adopted %s", again, err, sb.ID)
		}
		if h.Exec != nil {
			if out := h.Exec(t, again, "echo adopted"); strings.TrimSpace(out) != "adopted" {
				t.Errorf("adopted sandbox's agent: %q", out)
			}
		}
		if err := m2.Remove(ctx, h.Tenant, "adopt"); err != nil {
			t.Fatalf("Remove: %v", err)
		}
		if err := m2.Remove(ctx, h.Tenant, "adopt"); !errors.Is(err, sandbox.ErrNotFound) {
			t.Errorf("second Manager.Remove: %v, want ErrNotFound", err)
		}
	})

	t.Run("ConcurrentEnsure", func(t *testing.T) {
		rt := h.New(t)
		m := newManager(t, rt, owner)
		var wg sync.WaitGroup
		ids := make([]string, 6)
		errs := make([]error, len(ids))
		for i := range ids {
			wg.Go(func() {
				sb, err := m.Ensure(ctx, h.Spec(t, h.Tenant, "race", owner))
				ids[i], errs[i] = sb.ID, err
			})
		}
		wg.Wait()
		t.Cleanup(func() { _ = m.Remove(context.Background(), h.Tenant, "race") })
		for i := range ids {
			if errs[i] != nil || ids[i] != ids[0] {
				t.Fatalf("concurrent Ensure: ids %v, errors %v", ids, errs)
			}
		}
		n := 0
		list, err := rt.List(ctx, owner)
		if err != nil {
			t.Fatal(err)
		}
		for _, sb := range list {
			if sb.Tenant == h.Tenant && sb.Session == "race" {
				n++
			}
		}
		if n != 1 {
			t.Errorf("%d sandboxes for one session after concurrent Ensure", n)
		}
	})

	t.Run("HardeningFromInside", func(t *testing.T) {
		if h.Exec == nil {
			t.Skip("sandboxtest: this runtime runs nothing (no Exec)")
		}
		rt := h.New(t)
		sb := create(t, rt, "inside")
		spec := h.Spec(t, h.Tenant, "inside", owner)
		checks := []struct{ name, cmd, want string }{
			{"uid", "id -u", fmt.Sprint(spec.UID)},
			{"no capabilities", "grep ^CapEff /proc/self/status | tr -d '\\t '", "CapEff:0000000000000000"},
			{"no permitted capabilities", "grep ^CapPrm /proc/self/status | tr -d '\\t '", "CapPrm:0000000000000000"},
			{"read-only root", "touch /rootfs-write 2>/dev/null && echo writable || echo read-only", "read-only"},
			{"writable workspace", "touch /workspace/x && echo ok", "ok"},
			{"seccomp", "grep ^Seccomp: /proc/self/status | tr -d '\\t '", "Seccomp:2"},
		}
		if !h.PodNetwork {
			checks = append(checks, struct{ name, cmd, want string }{"loopback only", "tail -n +3 /proc/net/dev | cut -d: -f1 | tr -d ' ' | sort | tr '\\n' ' '", "lo"})
		}
		if !h.Gvisor {
			checks = append(checks, struct{ name, cmd, want string }{"no new privileges", "grep ^NoNewPrivs /proc/self/status | tr -d '\\t '", "NoNewPrivs:1"})
		}
		for _, c := range checks {
			if got := strings.TrimSpace(h.Exec(t, sb, c.cmd)); got != c.want {
				t.Errorf("%s: %q gave %q, want %q", c.name, c.cmd, got, c.want)
			}
		}
		// Threads start, gVisor's included: glibc's pthread_create tries
		// clone3 and falls back to clone only on ENOSYS, which the
		// agent's filter answers (agent/notrace; gVisor turns the
		// profile's own answer into EPERM). The test image's probe
		// (images/testimage/build.sh) is left out on a host without a C
		// compiler. Only with the real agent: a stand-in has no filter.
		if h.RealAgent {
			switch got := strings.TrimSpace(h.Exec(t, sb, "if command -v threads-probe >/dev/null; then threads-probe 2>&1; else echo absent; fi")); {
			case got == "absent" && os.Getenv("CI") == "":
				t.Logf("threads: the image has no threads-probe (built before it, or without a C compiler): not checked")
			case got != "clone3: ENOSYS\nthread: ok":
				t.Errorf("threads: threads-probe said %q, want clone3 ENOSYS and a thread started", got)
			}
		}
		// The workspace is a filesystem of the policy's size: exactly, a
		// tmpfs; an ext4 image of that size (sandbox.workspaceMedium disk)
		// keeps some of it for its own metadata (12-18% at 32-64 MiB).
		const dfSize = "df -B1 --output=size /workspace | tail -n 1 | tr -d ' '"
		got := strings.TrimSpace(h.Exec(t, sb, dfSize))
		if n, err := strconv.ParseInt(got, 10, 64); err != nil || n > spec.WorkspaceBytes || n < spec.WorkspaceBytes*3/4 {
			t.Errorf("workspace size: %q gave %q, want at most %d and at least 3/4 of it", dfSize, got, spec.WorkspaceBytes)
		}
	})
}

func contains(t *testing.T, rt sandbox.Runtime, owner, id string) bool {
	t.Helper()
	list, err := rt.List(context.Background(), owner)
	if err != nil {
		t.Fatalf("List(%q): %v", owner, err)
	}
	for _, sb := range list {
		if sb.ID == id {
			return true
		}
	}
	return false
}

func newManager(t *testing.T, rt sandbox.Runtime, owner string) *sandbox.Manager {
	t.Helper()
	m, err := sandbox.NewManager(sandbox.Config{Runtime: rt, Owner: owner, CreateTimeout: 2 * time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	return m
}
