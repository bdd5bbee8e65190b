package policies

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/shellbox/shellbox/approval"
	"github.com/shellbox/shellbox/executor"
	"github.com/shellbox/shellbox/tools"
)

const acmePolicy = `default: allow
askTimeout: 200ms
limits: {defaultTimeout: 10s, maxTimeout: 20s}
rules:
  - name: no-rm
    decision: deny
    reason: deleting files is not allowed
    match: {command: [rm]}
  - name: push
    decision: ask
    reason: pushing needs approval
    match: {prefix: ["git push"]}
escalations:
  default: deny
  rules:
    - {name: net, permissions: [network], decision: allow}
`

func bashCall(tenant, cmd string) tools.Call {
	return tools.Call{Tenant: tenant, Session: "s1", Tool: "bash",
		Request: executor.Request{Session: "s1", Shell: executor.Bash, Command: cmd}}
}

func openEngine(t *testing.T, dir string, opts Options) *Engine {
	t.Helper()
	e, err := Open(dir, opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { e.Close() })
	return e
}

func TestCheckAllowDenyAndLimits(t *testing.T) {
	dir := t.TempDir()
	writePolicy(t, dir, "acme", acmePolicy)
	e := openEngine(t, dir, Options{NoWatch: true})
	req, err := e.Check(context.Background(), bashCall("acme", "ls"))
	if err != nil {
		t.Fatal(err)
	}
	if req.Timeout != 10*time.Second {
		t.Errorf("timeout = %s, want the policy default 10s", req.Timeout)
	}
	c := bashCall("acme", "ls")
	c.Request.Timeout = time.Hour
	if req, _ := e.Check(context.Background(), c); req.Timeout != 20*time.Second {
		t.Errorf("timeout = %s, want the policy cap 20s", req.Timeout)
	}
	_, err = e.Check(context.Background(), bashCall("acme", "cd x && /bin/rm -rf y"))
	if err == nil || err.Error() != "denied by policy acme/no-rm: deleting files is not allowed" || !errors.Is(err, ErrDenied) {
		t.Errorf("err = %v", err)
	}
	c = bashCall("acme", "curl x")
	c.Request.Permissions, c.Justification = []string{"network"}, "fetch deps"
	if req, err := e.Check(context.Background(), c); err != nil || len(req.Permissions) != 1 {
		t.Errorf("granted escalation: req %+v, err %v", req, err)
	}
	c.Request.Permissions = []string{"network", "docker"}
	if _, err := e.Check(context.Background(), c); err == nil || !strings.Contains(err.Error(), "denied by policy acme/escalations:") {
		t.Errorf("err = %v", err)
	}
	if _, err := e.Check(context.Background(), tools.Call{Tenant: "acme", Tool: "pwsh", Request: executor.Request{Command: "ls"}}); err == nil ||
		err.Error() != "denied by policy acme/tools: the pwsh tool is disabled for this tenant (tools.pwsh: false)" {
		t.Errorf("pwsh: err = %v", err)
	}
}

// TestBackgroundTaskQuota: a background call over limits.backgroundTasks is
// denied naming the limit; foreground calls and calls under it are not.
func TestBackgroundTaskQuota(t *testing.T) {
	dir := t.TempDir()
	writePolicy(t, dir, "acme", "default: allow\nlimits: {backgroundTasks: 2}\n")
	e := openEngine(t, dir, Options{NoWatch: true})
	c := bashCall("acme", "sleep 100")
	c.Request.Background = true
	c.RunningTasks = 1
	if _, err := e.Check(context.Background(), c); err != nil {
		t.Errorf("under the quota: %v", err)
	}
	c.RunningTasks = 2
	_, err := e.Check(context.Background(), c)
	if err == nil || err.Error() != "denied by policy acme/limits: background task limit reached: limits.backgroundTasks = 2 (policy acme)" {
		t.Errorf("at the quota: %v", err)
	}
	c.Request.Background = false
	if _, err := e.Check(context.Background(), c); err != nil {
		t.Errorf("foreground at the quota: %v", err)
	}
}

func TestPolicyDefaultTenantFallback(t *testing.T) {
	dir := t.TempDir()
	writePolicy(t, dir, "acme", acmePolicy)
	e := openEngine(t, dir, Options{NoWatch: true})
	if _, err := e.Policy("other"); !errors.Is(err, ErrNoPolicy) || !strings.Contains(err.Error(), "no other.yaml and no default.yaml") {
		t.Errorf("err = %v", err)
	}
	if _, err := e.Policy("../x"); !errors.Is(err, ErrNoPolicy) {
		t.Errorf("bad tenant id: err = %v", err)
	}
	writePolicy(t, dir, "default", "default: deny\n")
	if err := e.Reload(); err != nil {
		t.Fatal(err)
	}
	p, err := e.Policy("other")
	if err != nil || p.Tenant != "default" {
		t.Fatalf("p = %v, err = %v", p, err)
	}
	if _, err := e.Check(context.Background(), bashCall("other", "ls")); err == nil ||
		err.Error() != "denied by policy default/default: no rule matches; the tenant's default is deny" {
		t.Errorf("err = %v", err)
	}
}

func TestTenantsAreThoseWithTheirOwnFile(t *testing.T) {
	dir := t.TempDir()
	writePolicy(t, dir, "acme", acmePolicy)
	writePolicy(t, dir, "default", "default: deny\n")
	writePolicy(t, dir, "broken", "default: maybe\n")
	e := openEngine(t, dir, Options{NoWatch: true})
	if got := strings.Join(e.Tenants(), ","); got != "acme,default" {
		t.Fatalf("Tenants() = %s, want acme,default (broken.yaml never loaded)", got)
	}
}

func TestAskApproveDenyExpire(t *testing.T) {
	dir := t.TempDir()
	writePolicy(t, dir, "acme", acmePolicy)
	writePolicy(t, dir, "beta", acmePolicy)
	e := openEngine(t, dir, Options{NoWatch: true})
	var mu sync.Mutex
	var seen []string
	pendingCh := make(chan Approval, 10)
	cancel := e.Subscribe(func(a Approval) {
		mu.Lock()
		seen = append(seen, a.State)
		mu.Unlock()
		if a.State == Pending {
			pendingCh <- a
		}
	})
	defer cancel()

	run := func(decide func(a Approval)) error {
		done := make(chan error, 1)
		go func() {
			c := bashCall("acme", "git push origin main")
			c.Justification = "ship it"
			_, err := e.Check(context.Background(), c)
			done <- err
		}()
		a := <-pendingCh
		if a.Rule != "push" || a.Reason != "pushing needs approval" || a.Justification != "ship it" || a.Tenant != "acme" {
			t.Errorf("pending approval = %+v", a)
		}
		if got := e.Approvals("acme"); len(got) == 0 || got[0].ID != a.ID || got[0].State != Pending {
			t.Errorf("Approvals = %+v", got)
		}
		decide(a)
		return <-done
	}

	// Approved: the call runs.
	if err := run(func(a Approval) {
		if _, err := e.Decide("beta", a.ID, true, "mallory", ""); !errors.Is(err, ErrNoSuchApproval) || err.Error() != "no such approval: "+a.ID {
			t.Errorf("another tenant's id: err = %v", err)
		}
		if _, err := e.Decide("acme", a.ID, true, "alice", "looks fine"); err != nil {
			t.Error(err)
		}
		if _, err := e.Decide("acme", a.ID, false, "bob", ""); !errors.Is(err, ErrAlreadyDecided) {
			t.Errorf("second decision: err = %v", err)
		}
	}); err != nil {
		t.Errorf("approved call: %v", err)
	}
	// Denied by the approver.
	err := run(func(a Approval) { e.Decide("acme", a.ID, false, "bob", "not today") })
	if err == nil || err.Error() != "denied by policy acme/push: denied by approver bob: not today" {
		t.Errorf("denied: err = %v", err)
	}
	// Nobody answers: denied after askTimeout (200ms).
	err = run(func(Approval) {})
	if err == nil || err.Error() != "denied by policy acme/push: approval required: no approver answered within 200ms (askTimeout)" {
		t.Errorf("expired: err = %v", err)
	}
	if _, err := e.Decide("acme", "ap_nope", true, "x", ""); !errors.Is(err, ErrNoSuchApproval) {
		t.Errorf("unknown id: err = %v", err)
	}
	list := e.Approvals("acme")
	if len(list) != 3 || list[0].State != Expired || list[1].State != Denied || list[2].State != Approved || list[2].Approver != "alice" {
		t.Errorf("history = %+v", list)
	}
	mu.Lock()
	defer mu.Unlock()
	if strings.Join(seen, ",") != "pending,approved,pending,denied,pending,expired" {
		t.Errorf("notifications = %v", seen)
	}
}

func TestAskCallerGoesAway(t *testing.T) {
	dir := t.TempDir()
	writePolicy(t, dir, "acme", acmePolicy)
	e := openEngine(t, dir, Options{NoWatch: true})
	ctx, cancel := context.WithCancel(context.Background())
	e.Subscribe(func(a Approval) {
		if a.State == Pending {
			cancel()
		}
	})
	_, err := e.Check(ctx, bashCall("acme", "git push"))
	if !errors.Is(err, executor.ErrAborted) {
		t.Errorf("err = %v", err)
	}
	if l := e.Approvals("acme"); len(l) != 1 || l[0].State != Expired || l[0].DecisionReason != "the call was aborted" {
		t.Errorf("approvals = %+v", l)
	}
}

func TestAskNoApprover(t *testing.T) {
	dir := t.TempDir()
	writePolicy(t, dir, "acme", acmePolicy)
	e := openEngine(t, dir, Options{NoWatch: true, NoApprover: true})
	_, err := e.Check(context.Background(), bashCall("acme", "git push"))
	if err == nil || err.Error() != "denied by policy acme/push: approval required (no approver in a one-shot call): pushing needs approval" {
		t.Errorf("err = %v", err)
	}
}

func TestAskPendingBound(t *testing.T) {
	dir := t.TempDir()
	writePolicy(t, dir, "acme", acmePolicy)
	e := openEngine(t, dir, Options{NoWatch: true, MaxPending: 1})
	held := make(chan Approval, 1)
	e.Subscribe(func(a Approval) {
		if a.State == Pending {
			held <- a
		}
	})
	go e.Check(context.Background(), bashCall("acme", "git push"))
	a := <-held
	_, err := e.Check(context.Background(), bashCall("acme", "git push"))
	if err == nil || !strings.Contains(err.Error(), "too many pending approvals for tenant acme (limit 1)") {
		t.Errorf("err = %v", err)
	}
	e.Decide("acme", a.ID, false, "x", "")
}

// TestAskHeldWhole: the approver sees exactly what runs. A call whose
// command (or workdir, justification, permissions) fits the approval's
// bounds is held whole, to the last byte; one that does not is refused at
// once, saying why, and never held clipped (issue 29: 17,117 characters
// ran after 16,385 were approved).
func TestAskHeldWhole(t *testing.T) {
	dir := t.TempDir()
	writePolicy(t, dir, "acme", acmePolicy)
	e := openEngine(t, dir, Options{NoWatch: true})
	held := make(chan Approval, 1)
	e.Subscribe(func(a Approval) {
		if a.State == Pending {
			held <- a
		}
	})
	// check runs c and, if it is held, approves it and returns what the
	// approver saw.
	check := func(c tools.Call) (Approval, executor.Request, error) {
		type result struct {
			req executor.Request
			err error
		}
		done := make(chan result, 1)
		go func() {
			req, err := e.Check(context.Background(), c)
			done <- result{req, err}
		}()
		select {
		case r := <-done:
			return Approval{}, r.req, r.err
		case a := <-held:
			if _, err := e.Decide("acme", a.ID, true, "alice", ""); err != nil {
				t.Fatal(err)
			}
			r := <-done
			return a, r.req, r.err
		}
	}
	prefix := "git push origin main #"
	// At the bound, with a multi-byte last character: held whole.
	fits := prefix + strings.Repeat("<", approval.MaxCommand-len(prefix)-len("é")) + "é"
	a, req, err := check(bashCall("acme", fits))
	if err != nil || a.Command != fits || req.Command != fits {
		t.Fatalf("a command of %d bytes: err %v, approver saw %d bytes, %d ran", len(fits), err, len(a.Command), len(req.Command))
	}
	// The case: refused at once, nothing held.
	long := prefix + strings.Repeat("<", 17117-len(prefix))
	a, _, err = check(bashCall("acme", long))
	want := "denied by policy acme/push: approval required, but the command is 17117 bytes, over the 16384 an approval shows in full"
	if a.ID != "" || err == nil || err.Error() != want {
		t.Fatalf("a command of 17117 bytes: approver saw %d bytes; err = %v", len(a.Command), err)
	}
	// The other texts an approver reads are held whole or refused alike.
	for name, c := range map[string]tools.Call{
		"workdir": func() tools.Call {
			c := bashCall("acme", "git push")
			c.Request.Workdir = strings.Repeat("d/", 2100)
			return c
		}(),
		"justification": func() tools.Call {
			c := bashCall("acme", "git push")
			c.Justification = strings.Repeat("j", 2049)
			return c
		}(),
	} {
		a, _, err := check(c)
		if a.ID != "" || err == nil || !strings.Contains(err.Error(), "approval required, but the "+name+" is ") {
			t.Errorf("an over-long %s: held %q; err = %v", name, a.ID, err)
		}
	}
	if l := e.Approvals("acme"); len(l) != 1 {
		t.Errorf("approvals held: %d, want the one that fits", len(l))
	}
}

// TestAskShowsHowItRuns: an approval says whether the call runs in the
// background (no timeout ends it, and a granted permission lasts until
// the task ends), the timeout a foreground call gets, and the
// permissions it is granted (issue 29, item 8).
func TestAskShowsHowItRuns(t *testing.T) {
	dir := t.TempDir()
	writePolicy(t, dir, "acme", acmePolicy+`    - {name: net-ask, permissions: [net*], decision: ask}
`)
	e := openEngine(t, dir, Options{NoWatch: true})
	held := make(chan Approval, 1)
	e.Subscribe(func(a Approval) {
		if a.State == Pending {
			held <- a
		}
	})
	hold := func(c tools.Call) Approval {
		done := make(chan error, 1)
		go func() { _, err := e.Check(context.Background(), c); done <- err }()
		a := <-held
		e.Decide("acme", a.ID, false, "bob", "")
		<-done
		return a
	}
	bg := bashCall("acme", "git push")
	bg.Request.Background, bg.Request.Timeout = true, time.Second
	bg.Request.Permissions, bg.Justification = []string{"netlink"}, "fetch"
	if a := hold(bg); !a.Background || a.TimeoutMs != 0 || !slices.Equal(a.Permissions, []string{"netlink"}) {
		t.Errorf("background call held as background %v, timeout %dms, permissions %v", a.Background, a.TimeoutMs, a.Permissions)
	}
	fg := bashCall("acme", "git push")
	fg.Request.Timeout = time.Minute // over the cap of 20s
	if a := hold(fg); a.Background || a.TimeoutMs != 20000 {
		t.Errorf("foreground call held as background %v, timeout %dms", a.Background, a.TimeoutMs)
	}
	if a := hold(bashCall("acme", "git push")); a.TimeoutMs != 10000 {
		t.Errorf("no timeout asked: held with %dms, want the default 10000", a.TimeoutMs)
	}
}

// A file's edit takes effect without a restart; a broken edit keeps the last
// good policy in force and says why; a fixed file loads again.
func TestHotReloadAndLastGood(t *testing.T) {
	dir := t.TempDir()
	f := writePolicy(t, dir, "acme", acmePolicy)
	e := openEngine(t, dir, Options{Debounce: 20 * time.Millisecond})
	decision := func(cmd string) Decision {
		x, err := e.Explain("acme", "bash", cmd, "", false)
		if err != nil {
			t.Fatal(err)
		}
		return x.Decision
	}
	waitFor := func(what string, cond func() bool) {
		t.Helper()
		deadline := time.Now().Add(5 * time.Second)
		for !cond() {
			if time.Now().After(deadline) {
				t.Fatalf("timed out waiting for %s", what)
			}
			time.Sleep(10 * time.Millisecond)
		}
	}
	if decision("ls") != Allow {
		t.Fatal("ls not allowed at start")
	}

	// An edit, written in place.
	if err := os.WriteFile(f, []byte(strings.Replace(acmePolicy, "default: allow", "default: deny", 1)), 0o644); err != nil {
		t.Fatal(err)
	}
	waitFor("the edit", func() bool { return decision("ls") == Deny })

	// A broken edit, by rename as editors do: the last good policy stays.
	tmp := filepath.Join(dir, ".acme.yaml.swp")
	os.WriteFile(tmp, []byte("default: allow\nrules: [{name: x, decision: deny, match: {argsRegex: ['(']}}]\n"), 0o644)
	if err := os.Rename(tmp, f); err != nil {
		t.Fatal(err)
	}
	waitFor("the rejection", func() bool { return e.Ready() != nil })
	if err := e.Ready(); !strings.Contains(err.Error(), "acme.yaml:2: rules[0].match.argsRegex[0]: bad regular expression") {
		t.Errorf("Ready = %v", err)
	}
	if decision("ls") != Deny {
		t.Error("the broken edit replaced the last good policy")
	}
	if p := e.Problems(); len(p) != 1 || p[0].Tenant != "acme" || !strings.HasPrefix(p[0].Text, "tenant acme: edit rejected, the last good policy stays in force: ") ||
		!strings.Contains(p[0].Text, "acme.yaml:2: rules[0].match.argsRegex[0]: bad regular expression") {
		t.Errorf("Problems = %+v", p)
	}

	// Fixed: loads again.
	os.WriteFile(f, []byte(acmePolicy), 0o644)
	waitFor("the fix", func() bool { return e.Ready() == nil && decision("ls") == Allow })
	if p := e.Problems(); p != nil {
		t.Errorf("Problems after the fix = %+v", p)
	}

	// A new tenant appears; a removed one goes.
	writePolicy(t, dir, "beta", "default: deny\n")
	waitFor("the new tenant", func() bool { _, err := e.Policy("beta"); return err == nil })
	os.Remove(f)
	waitFor("the removal", func() bool { _, err := e.Policy("acme"); return err != nil })
}

func TestOpenWithBrokenFile(t *testing.T) {
	dir := t.TempDir()
	writePolicy(t, dir, "acme", acmePolicy)
	writePolicy(t, dir, "bad", "defualt: allow\n")
	e := openEngine(t, dir, Options{NoWatch: true})
	if err := e.Ready(); err == nil || !strings.Contains(err.Error(), "bad.yaml:1: defualt: unknown key") {
		t.Errorf("Ready = %v", err)
	}
	if _, err := e.Policy("bad"); !errors.Is(err, ErrNoPolicy) {
		t.Errorf("a broken file's tenant has a policy: %v", err)
	}
	if p := e.Problems(); len(p) != 1 || p[0].Tenant != "bad" || !strings.HasPrefix(p[0].Text, "tenant bad: no policy in force, its calls are refused: ") ||
		!strings.Contains(p[0].Text, "bad.yaml:1: defualt: unknown key") {
		t.Errorf("Problems = %+v", p)
	}
	if _, err := e.Policy("acme"); err != nil {
		t.Error(err)
	}
	if _, err := Open(filepath.Join(dir, "missing"), Options{}); err == nil {
		t.Error("Open of a missing directory succeeded")
	}
}

func TestExplain(t *testing.T) {
	e := openEngine(t, "examples", Options{NoWatch: true})
	x, err := e.Explain("ci-agent", "bash", "ls && sudo rm -rf /", "", false)
	if err != nil {
		t.Fatal(err)
	}
	if x.Decision != Deny || x.Rule != "no-privilege" || x.SimpleCommand != "sudo rm -rf /" {
		t.Errorf("explanation = %+v", x)
	}
}

// Every decision is audited: allowed, denied, asked and decided.
func TestCheckAudits(t *testing.T) {
	dir := t.TempDir()
	writePolicy(t, dir, "acme", acmePolicy)
	path := filepath.Join(t.TempDir(), "audit.log")
	a, err := OpenAudit(path, AuditOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	e := openEngine(t, dir, Options{NoWatch: true, Audit: a})
	e.Subscribe(func(ap Approval) {
		if ap.State == Pending {
			go e.Decide("acme", ap.ID, true, "alice", "ok")
		}
	})
	e.Check(context.Background(), bashCall("acme", "ls"))
	e.Check(context.Background(), bashCall("acme", "rm x"))
	c := bashCall("acme", "git push")
	c.Request.Permissions, c.Justification = []string{"network"}, "push over the network"
	if _, err := e.Check(context.Background(), c); err != nil {
		t.Fatal(err)
	}
	recs, _, err := ReadAudit(path, 10, "acme")
	if err != nil {
		t.Fatal(err)
	}
	if len(recs) != 4 {
		t.Fatalf("%d records", len(recs))
	}
	if r := recs[2]; r.Decision != Ask || r.Rule != "push" || r.Approver != "" || !strings.HasPrefix(r.Approval, "ap_") {
		t.Errorf("ask record = %+v", r)
	}
	if recs[0].Decision != Allow || recs[0].Rule != "default" || recs[0].Session != "s1" || recs[0].Tool != "bash" {
		t.Errorf("allow record = %+v", recs[0])
	}
	if recs[1].Decision != Deny || recs[1].Rule != "no-rm" || recs[1].SimpleCommand != "rm x" {
		t.Errorf("deny record = %+v", recs[1])
	}
	r := recs[3]
	if r.Decision != Allow || r.Rule != "push" || r.Approver != "alice" || r.Approval != recs[2].Approval ||
		r.Justification != "push over the network" || len(r.Escalation) != 1 || r.Time.IsZero() {
		t.Errorf("approved record = %+v", r)
	}
}

// Decisions, reloads, approvals and subscribers at once (for the race
// detector).
func TestEngineConcurrent(t *testing.T) {
	dir := t.TempDir()
	f := writePolicy(t, dir, "acme", acmePolicy)
	e := openEngine(t, dir, Options{Debounce: time.Millisecond})
	e.Subscribe(func(a Approval) {
		if a.State == Pending {
			go e.Decide("acme", a.ID, true, "bot", "")
		}
	})
	var wg sync.WaitGroup
	for i := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for j := range 30 {
				cmd := []string{"ls", "rm x", "git push", "$(x)"}[(i+j)%4]
				e.Check(context.Background(), bashCall("acme", cmd))
				e.Approvals("acme")
				e.Ready()
			}
		}()
	}
	for i := range 10 {
		src := acmePolicy
		if i%3 == 0 {
			src = "default: [broken\n"
		}
		os.WriteFile(f, []byte(src), 0o644)
		e.Reload()
		time.Sleep(2 * time.Millisecond)
	}
	wg.Wait()
}

// A Kubernetes ConfigMap volume is updated by the kubelet's atomic writer:
// the files are symlinks through ..data, and an update writes a new
// timestamped directory, points ..data_tmp at it, renames ..data_tmp over
// ..data and removes the old directory. The watched directory sees that
// rename, and the policies through the symlinks are reloaded.
func TestHotReloadConfigMapSwap(t *testing.T) {
	dir := t.TempDir()
	version := func(name, acme string) {
		t.Helper()
		d := filepath.Join(dir, name)
		if err := os.Mkdir(d, 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(d, "acme.yaml"), []byte(acme), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	version("..2026_12_01_10_00_00.1", acmePolicy)
	if err := os.Symlink("..2026_12_01_10_00_00.1", filepath.Join(dir, "..data")); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("..data/acme.yaml", filepath.Join(dir, "acme.yaml")); err != nil {
		t.Fatal(err)
	}
	e := openEngine(t, dir, Options{Debounce: 20 * time.Millisecond})
	decision := func() Decision {
		x, err := e.Explain("acme", "bash", "ls", "", false)
		if err != nil {
			t.Fatal(err)
		}
		return x.Decision
	}
	if decision() != Allow {
		t.Fatal("ls not allowed at start")
	}
	if _, err := e.Policy("..data"); err == nil {
		t.Error("the ..data link was taken for a tenant")
	}

	// The atomic writer's update.
	version("..2026_12_01_10_01_00.2", strings.Replace(acmePolicy, "default: allow", "default: deny", 1))
	if err := os.Symlink("..2026_12_01_10_01_00.2", filepath.Join(dir, "..data_tmp")); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(filepath.Join(dir, "..data_tmp"), filepath.Join(dir, "..data")); err != nil {
		t.Fatal(err)
	}
	if err := os.RemoveAll(filepath.Join(dir, "..2026_12_01_10_00_00.1")); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for decision() != Deny {
		if time.Now().After(deadline) {
			t.Fatal("the ConfigMap update was not reloaded")
		}
		time.Sleep(10 * time.Millisecond)
	}
	if err := e.Ready(); err != nil {
		t.Errorf("Ready after the swap: %v", err)
	}
}
