package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	apievents "github.com/containerd/containerd/api/events"
	ctrd "github.com/containerd/containerd/v2/client"
	"github.com/containerd/containerd/v2/pkg/namespaces"
	"github.com/containerd/typeurl/v2"

	"github.com/shellbox/shellbox/sandbox"
	"github.com/shellbox/shellbox/sandbox/containerd"
	"github.com/shellbox/shellbox/sandbox/containerd/containerdtest"
	"github.com/shellbox/shellbox/sandbox/docker/dockertest"
	"github.com/shellbox/shellbox/sandbox/enginetest"
	"github.com/shellbox/shellbox/sandbox/snapshot/snapshottest"
	"github.com/shellbox/shellbox/server"
	"github.com/shellbox/shellbox/server/client"
)

// crprobe builds the checkpoint tests' static HTTP server
// (sandbox/containerd/testdata/crprobe) into a directory the sandbox's
// user can read: the test image has no python for `python3 -m
// http.server`.
func crprobe(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(filepath.Join(runtime.GOROOT(), "bin", "go"), "build", "-o", filepath.Join(dir, "crprobe"), "../../sandbox/containerd/testdata/crprobe")
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("build crprobe: %v\n%s", err, out)
	}
	return dir
}

// memoryConfig is a server on containerd with checkpoints on, a state
// directory and owner of its own (a host of its own), a store (snap: its
// YAML; "": a dir store of its own) and a policy for tenant: runtime,
// sandbox.suspend as given, crprobe at /opt/crprobe.
func memoryConfig(t *testing.T, tenant, runtime, suspend, snap string) (cfg, storeDir string) {
	t.Helper()
	eng := enginetest.Containerd.Config(t)
	eng = strings.Replace(eng, "containerd:\n", "containerd:\n  checkpoint: true\n", 1)
	return engineMemoryConfig(t, eng, tenant, runtime, suspend, snap)
}

// engineMemoryConfig is memoryConfig on the engine whose configuration
// eng is.
func engineMemoryConfig(t *testing.T, eng, tenant, runtime, suspend, snap string) (cfg, storeDir string) {
	t.Helper()
	pols := t.TempDir()
	if err := os.WriteFile(filepath.Join(pols, tenant+".yaml"), []byte(fmt.Sprintf(`default: allow
sandbox:
  images: [%s]
  runtime: %s
  suspend: %s
  mounts: [{source: %s, target: /opt/crprobe, readOnly: true}]
`, dockertest.Image, runtime, suspend, crprobe(t))), 0o644); err != nil {
		t.Fatal(err)
	}
	if snap == "" {
		storeDir = filepath.Join(t.TempDir(), "snapshots")
		snap = fmt.Sprintf("snapshots:\n  store: dir\n  dir: %s\n", storeDir)
	}
	cfg = filepath.Join(t.TempDir(), "shellbox.yaml")
	body := eng + fmt.Sprintf(`policies:
  dir: %s
sandbox:
  stateDir: %s
  owner: %s
  image: %s
  labels:
    %s: "1"
server:
  shutdownTimeout: 30s
  tenants:
    %s:
      tokens: [%q]
%s`, pols, dockertest.StateDir(t), dockertest.Owner(t), dockertest.Image, dockertest.LabelTest, tenant, server.HashToken(testToken),
		snap)
	if err := os.WriteFile(cfg, []byte(body), 0o644); err != nil {
		t.Fatal(err)
	}
	return cfg, storeDir
}

// TestSuspendMemory is issue 28's done-when through `shellbox serve` on
// containerd with gVisor: a session runs an HTTP server and a counter as
// background tasks, is suspended with sandbox.suspend: memory (its
// sandbox gone), and resumed by its next call, which finds the server
// answering 200, the counter counted on from where it was (bash_output
// reads its output across the gap, and its file has no restart) and the
// workspace's other files as they were. The same policy on runc falls back
// to a files snapshot and its event says why.
func TestSuspendMemory(t *testing.T) {
	requireEngine(t)
	bin := buildBinaries(t)
	t.Run("runsc", func(t *testing.T) {
		tenant := dockertest.Tenant("mem")
		cfg, storeDir := memoryConfig(t, tenant, "runsc", "memory", "")
		const s = "kept"
		removeSandboxesAtEnd(t, cfg, tenant, s)
		srv := startServeProcess(t, bin, cfg)
		defer srv.stop(t)
		c := client.New(srv.url, testToken, nil)
		ctx := context.Background()
		call := func(tool, args string) string {
			t.Helper()
			r, err := c.Call(ctx, s, tool, json.RawMessage(args))
			if err != nil || r.IsError {
				t.Fatalf("%s %s: %v %q", tool, args, err, r.Text)
			}
			return r.Text
		}
		bash := func(cmd string) string {
			t.Helper()
			a, _ := json.Marshal(map[string]any{"command": cmd, "description": "memory suspend test"})
			return call("bash", string(a))
		}
		background := func(cmd string) string {
			t.Helper()
			a, _ := json.Marshal(map[string]any{"command": cmd, "description": "memory suspend test", "run_in_background": true})
			m := regexp.MustCompile(`started background task (\S+)`).FindStringSubmatch(call("bash", string(a)))
			if m == nil {
				t.Fatalf("no task id starting %q", cmd)
			}
			return m[1]
		}
		counter := background(`i=0; while :; do i=$((i+1)); echo n$i; echo $i >> /workspace/counter.log; sleep 0.2; done`)
		background(`/opt/crprobe/crprobe serve 127.0.0.1:8080`)
		bash("echo kept > /workspace/kept.txt && mkdir -p d && echo x > d/y")
		const manifest = `cd /workspace && find . -path ./counter.log -prune -o -print | LC_ALL=C sort && sha256sum kept.txt d/y`
		before := bash(manifest)
		const curl = `for i in $(seq 50); do c=$(curl -s -o /dev/null -w '%{http_code}' --max-time 2 http://127.0.0.1:8080/) && [ "$c" = 200 ] && break; sleep 0.2; done; echo $c`
		if got := strings.TrimSpace(bash(curl)); got != "200" {
			t.Fatalf("the server before the suspend: %q", got)
		}
		nums := regexp.MustCompile(`n(\d+)`)
		last := func(out string) int {
			m := nums.FindAllStringSubmatch(out, -1)
			if m == nil {
				return 0
			}
			n, _ := strconv.Atoi(m[len(m)-1][1])
			return n
		}
		first := func(out string) int {
			m := nums.FindStringSubmatch(out)
			if m == nil {
				return 0
			}
			n, _ := strconv.Atoi(m[1])
			return n
		}
		time.Sleep(time.Second)
		out := call("bash_output", fmt.Sprintf(`{"task_id":%q}`, counter))
		seen := last(out)
		if seen == 0 {
			t.Fatalf("bash_output before the suspend: %q", out)
		}

		events := subscribe(t, c, s)
		si, err := c.SuspendSession(ctx, s)
		if err != nil {
			t.Fatalf("suspend: %v", err)
		}
		e := events("suspended")
		t.Logf("suspended: %s", e.Message)
		if !strings.Contains(e.Message, "kept in memory image") {
			t.Fatalf("the suspended event: %q, want a memory image", e.Message)
		}
		if list, err := c.Sessions(ctx); err != nil || len(list) != 1 || list[0].State != "suspended" {
			t.Fatalf("sessions after suspend: %v %+v (%+v)", err, list, si)
		}
		time.Sleep(2 * time.Second) // the gap

		creates := containerCreates(t, tenant, s)
		for len(srv.logs) > 0 { // room for the restore's line
			<-srv.logs
		}
		if got := strings.TrimSpace(bash(curl)); got != "200" {
			t.Errorf("the server after the resume: %q, want 200", got)
		}
		if n := creates(); n != 1 {
			t.Errorf("%d containers made for the session by its memory resume, want 1", n)
		}
		e = events("resumed")
		t.Logf("resumed: %s", e.Message)
		if !strings.Contains(e.Message, "restored from memory image") {
			t.Errorf("the resumed event: %q, want the memory image restored", e.Message)
		}
		// The server's log says where the restore's time went.
		if l := serverLogLine(srv, "sandbox restored from its memory image"); !strings.Contains(l, `"runsc":"`) || !strings.Contains(l, `"session":"`+s+`"`) {
			t.Errorf("the server's restore line: %q, want its phases", l)
		} else {
			t.Logf("%s", l)
		}
		out = call("bash_output", fmt.Sprintf(`{"task_id":%q}`, counter))
		if f := first(out); f != seen+1 {
			t.Errorf("bash_output after the resume begins at n%d, want n%d (it read n%d before the suspend):\n%s", f, seen+1, seen, out)
		}
		file := strings.Fields(bash("cat /workspace/counter.log"))
		for i, v := range file {
			if v != strconv.Itoa(i+1) {
				t.Fatalf("counter.log line %d is %q, want %d: the counter restarted or skipped", i+1, v, i+1)
			}
		}
		if after := bash(manifest); after != before {
			t.Errorf("the workspace after the resume:\n%s\nbefore:\n%s", after, before)
		}

		// A corrupt image: the resume goes on from the files snapshot,
		// saying so, and the tasks are gone.
		if _, err := c.SuspendSession(ctx, s); err != nil {
			t.Fatalf("second suspend: %v", err)
		}
		e = events("suspended")
		m := regexp.MustCompile(`memory image (\S+)`).FindStringSubmatch(e.Message)
		if m == nil {
			t.Fatalf("the second suspended event: %q", e.Message)
		}
		files, _ := filepath.Glob(filepath.Join(storeDir, tenant, s, m[1]+".*.snap"))
		if len(files) != 1 {
			t.Fatalf("the image's file: %v", files)
		}
		f, err := os.OpenFile(files[0], os.O_RDWR, 0)
		if err != nil {
			t.Fatal(err)
		}
		b := make([]byte, 1)
		f.ReadAt(b, 4096)
		b[0] ^= 0xff
		f.WriteAt(b, 4096)
		f.Close()
		creates = containerCreates(t, tenant, s)
		if got := bash("cat /workspace/kept.txt"); strings.TrimSpace(got) != "kept" {
			t.Errorf("the workspace after a resume from a corrupt image: %q", got)
		}
		if n := creates(); n != 1 {
			t.Errorf("%d containers made for the session by its resume from a corrupt image, want 1 (fresh)", n)
		}
		e = events("resumed")
		t.Logf("resumed from a corrupt image: %s", e.Message)
		if !strings.Contains(e.Message, "could not be read") || !strings.Contains(e.Message, "corrupt") || !strings.Contains(e.Message, "resumed from its files snapshot") {
			t.Errorf("the resumed event after a corrupt image: %q, want the image refused and the files named", e.Message)
		}
		if r, err := c.Call(ctx, s, "bash_output", json.RawMessage(fmt.Sprintf(`{"task_id":%q}`, counter))); err == nil && !r.IsError {
			t.Errorf("the counter task after a files resume: %q, want it gone", r.Text)
		}
	})
	t.Run("another-host-s3", func(t *testing.T) {
		// Suspended by one server (a host: its state directory, owner
		// and host workspace), resumed by another sharing only the S3
		// store and the engine: the image alone brings the processes and
		// the workspace.
		o, _ := snapshottest.S3Bucket(t)
		snap := fmt.Sprintf("snapshots:\n  store: s3\n  s3:\n    endpoint: %s\n    bucket: %s\n    insecure: true\n    accessKey: %s\n    secretKey: %s\n",
			o.Endpoint, o.Bucket, o.AccessKey, o.SecretKey)
		tenant := dockertest.Tenant("memhost")
		cfgA, _ := memoryConfig(t, tenant, "runsc", "memory", snap)
		cfgB, _ := memoryConfig(t, tenant, "runsc", "memory", snap)
		const s = "moved"
		removeSandboxesAtEnd(t, cfgB, tenant, s)
		ctx := context.Background()
		a := startServeProcess(t, bin, cfgA)
		c := client.New(a.url, testToken, nil)
		r, err := c.Call(ctx, s, "bash", json.RawMessage(`{"command":"i=0; while :; do i=$((i+1)); echo n$i; echo $i >> /workspace/count; sleep 0.2; done","description":"t","run_in_background":true}`))
		if err != nil || r.IsError {
			t.Fatalf("background: %v %q", err, r.Text)
		}
		id := regexp.MustCompile(`started background task (\S+)`).FindStringSubmatch(r.Text)
		if id == nil {
			t.Fatalf("no task id: %q", r.Text)
		}
		time.Sleep(time.Second)
		r, err = c.Call(ctx, s, "bash_output", json.RawMessage(fmt.Sprintf(`{"task_id":%q}`, id[1])))
		if err != nil || r.IsError {
			t.Fatalf("bash_output on A: %v %q", err, r.Text)
		}
		m := regexp.MustCompile(`n(\d+)`).FindAllStringSubmatch(r.Text, -1)
		if m == nil {
			t.Fatalf("bash_output on A: %q", r.Text)
		}
		seen, _ := strconv.Atoi(m[len(m)-1][1])
		if _, err := c.SuspendSession(ctx, s); err != nil {
			t.Fatalf("suspend on A: %v", err)
		}
		a.stop(t)

		b := startServeProcess(t, bin, cfgB)
		defer b.stop(t)
		c = client.New(b.url, testToken, nil)
		events := subscribe(t, c, s)
		r, err = c.Call(ctx, s, "bash_output", json.RawMessage(fmt.Sprintf(`{"task_id":%q}`, id[1])))
		if err == nil && !r.IsError {
			t.Logf("bash_output before any call on B: %q", r.Text)
		}
		r, err = c.Call(ctx, s, "bash", json.RawMessage(`{"command":"sleep 1; cat /workspace/count","description":"t"}`))
		if err != nil || r.IsError {
			t.Fatalf("first call on B: %v %q", err, r.Text)
		}
		for i, v := range strings.Fields(r.Text) {
			if v != strconv.Itoa(i+1) {
				t.Fatalf("count on B, line %d is %q: the counter restarted or skipped", i+1, v)
			}
		}
		e := events("resumed")
		t.Logf("resumed on B: %s", e.Message)
		if !strings.Contains(e.Message, "restored from memory image") {
			t.Errorf("the resumed event on B: %q, want the memory image restored", e.Message)
		}
		r, err = c.Call(ctx, s, "bash_output", json.RawMessage(fmt.Sprintf(`{"task_id":%q}`, id[1])))
		if err != nil || r.IsError {
			t.Fatalf("bash_output on B: %v %q", err, r.Text)
		}
		if f := regexp.MustCompile(`n(\d+)`).FindStringSubmatch(r.Text); f == nil || f[1] != strconv.Itoa(seen+1) {
			t.Errorf("bash_output on B: %q, want it to begin at n%d", r.Text, seen+1)
		}
	})
	// A server killed during a memory resume: at the restored task's
	// start (before its agent listens again), once the runtime logs the
	// restore (before the claim names the sandbox), or once the session
	// layer logs it (named and probed, perhaps before the session is
	// recorded running). The next server start adopts or removes what it
	// left, and the session's next call finds its counter task still
	// counting, its file with no restart.
	t.Run("restart", func(t *testing.T) {
		for _, at := range []string{"task-start", "restored", "probed"} {
			t.Run(at, func(t *testing.T) { restartDuringMemoryResume(t, bin, at) })
		}
	})
	// A warm pool of the session's template, made after its memory
	// suspend (a policy change, then a server start), is passed over: the
	// session's one sandbox is restored from its image, its counter
	// counting on, and the pool keeps its sandbox.
	t.Run("pool", func(t *testing.T) {
		tenant := dockertest.Tenant("mempool")
		cfg, _ := memoryConfig(t, tenant, "runsc", "memory", "")
		const s = "pooled"
		removeSandboxesAtEnd(t, cfg, tenant, s)
		a := startServeProcess(t, bin, cfg)
		ctx := context.Background()
		c := client.New(a.url, testToken, nil)
		bash := func(c *client.Client, cmd string, background bool) string {
			t.Helper()
			args, _ := json.Marshal(map[string]any{"command": cmd, "description": "pool test", "run_in_background": background})
			r, err := c.Call(ctx, s, "bash", args)
			if err != nil || r.IsError {
				t.Fatalf("%q: %v %q", cmd, err, r.Text)
			}
			return r.Text
		}
		bash(c, `i=0; while :; do i=$((i+1)); echo $i >> /workspace/counter.log; sleep 0.2; done`, true)
		time.Sleep(time.Second)
		if _, err := c.SuspendSession(ctx, s); err != nil {
			t.Fatalf("suspend: %v", err)
		}
		a.stop(t)
		b, err := os.ReadFile(cfg)
		if err != nil {
			t.Fatal(err)
		}
		m := regexp.MustCompile(`policies:\n  dir: (\S+)`).FindSubmatch(b)
		if m == nil {
			t.Fatalf("no policies dir in %s", b)
		}
		pol := filepath.Join(string(m[1]), tenant+".yaml")
		f, err := os.OpenFile(pol, os.O_APPEND|os.O_WRONLY, 0)
		if err == nil {
			_, err = f.WriteString("  pool: {size: 1}\n")
			f.Close()
		}
		if err != nil {
			t.Fatal(err)
		}
		// A server keeps its pooled sandboxes when it stops (the next
		// start adopts them): removed after it, by owner.
		owner := regexp.MustCompile(`\n  owner: (\S+)`).FindSubmatch(b)
		if owner == nil {
			t.Fatalf("no owner in %s", b)
		}
		t.Cleanup(func() {
			rt := containerdtest.New(t, containerdtest.Config(t, containerdtest.Address(t)), "runc")
			list, err := rt.List(context.Background(), string(owner[1]))
			for _, sb := range list {
				if err == nil && sandbox.IsPooled(sb.Session) {
					err = rt.Remove(context.Background(), sb.ID)
				}
			}
			if err != nil {
				t.Errorf("removing the pooled sandboxes: %v", err)
			}
		})
		srv := startServeProcess(t, bin, cfg)
		defer srv.stop(t)
		if serverLogLine(srv, "pooled sandbox created") == "" {
			t.Fatal("no pooled sandbox within 30 s")
		}
		cb := client.New(srv.url, testToken, nil)
		events := subscribe(t, cb, s)
		out := strings.Fields(bash(cb, "sleep 1; cat /workspace/counter.log", false))
		e := events("resumed")
		t.Logf("resumed with a pool ready: %s", e.Message)
		if !strings.Contains(e.Message, "restored from memory image") {
			t.Errorf("the resumed event: %q, want the image restored, not a pooled sandbox", e.Message)
		}
		for i, v := range out {
			if v != strconv.Itoa(i+1) {
				t.Fatalf("counter.log line %d is %q: the counter restarted or skipped", i+1, v)
			}
		}
		if again := strings.Fields(bash(cb, "sleep 1; cat /workspace/counter.log", false)); len(again) <= len(out) {
			t.Errorf("the counter stopped at %d: its process was not restored", len(out))
		}
		passed := false
		for drained := false; !drained; {
			select {
			case l := <-srv.logs:
				passed = passed || strings.Contains(l, "warm pool passed over")
				if strings.Contains(l, "sandbox claimed from pool") {
					t.Errorf("the session claimed a pooled sandbox: %s", l)
				}
			default:
				drained = true
			}
		}
		if !passed {
			t.Errorf("no \"warm pool passed over\" in the server's log")
		}
	})
	t.Run("runc", func(t *testing.T) {
		tenant := dockertest.Tenant("memrunc")
		cfg, _ := memoryConfig(t, tenant, "runc", "memory", "")
		const s = "fallback"
		removeSandboxesAtEnd(t, cfg, tenant, s)
		srv := startServeProcess(t, bin, cfg)
		defer srv.stop(t)
		c := client.New(srv.url, testToken, nil)
		ctx := context.Background()
		if r, err := c.Call(ctx, s, "bash", json.RawMessage(`{"command":"echo kept > /workspace/kept.txt","description":"t"}`)); err != nil || r.IsError {
			t.Fatalf("call: %v %q", err, r.Text)
		}
		events := subscribe(t, c, s)
		if _, err := c.SuspendSession(ctx, s); err != nil {
			t.Fatalf("suspend: %v", err)
		}
		e := events("suspended")
		if !strings.Contains(e.Message, "no memory image") || !strings.Contains(e.Message, "runtime runc") {
			t.Errorf("the suspended event on runc: %q, want the files fallback and why", e.Message)
		}
		r, err := c.Call(ctx, s, "bash", json.RawMessage(`{"command":"cat /workspace/kept.txt","description":"t"}`))
		if err != nil || r.IsError || strings.TrimSpace(r.Text) != "kept" {
			t.Errorf("after the resume: %v %q", err, r.Text)
		}
	})
	// Docker runs runsc but has no checkpoint this server can drive (the
	// daemon's needs experimental mode, docs/checkpoint.md): the same
	// policy falls back to files, its event naming why.
	t.Run("docker-runsc", func(t *testing.T) {
		tenant := dockertest.Tenant("memdocker")
		cfg, _ := engineMemoryConfig(t, enginetest.Docker.Config(t), tenant, "runsc", "memory", "")
		const s = "fallback"
		removeSandboxesAtEnd(t, cfg, tenant, s)
		srv := startServeProcess(t, bin, cfg)
		defer srv.stop(t)
		c := client.New(srv.url, testToken, nil)
		ctx := context.Background()
		if r, err := c.Call(ctx, s, "bash", json.RawMessage(`{"command":"echo kept > /workspace/kept.txt","description":"t"}`)); err != nil || r.IsError {
			t.Fatalf("call: %v %q", err, r.Text)
		}
		if r, err := c.Call(ctx, s, "bash", json.RawMessage(`{"command":"sleep 300","description":"t","run_in_background":true}`)); err != nil || r.IsError {
			t.Fatalf("background task: %v %q", err, r.Text)
		}
		events := subscribe(t, c, s)
		if _, err := c.SuspendSession(ctx, s); err != nil {
			t.Fatalf("suspend: %v", err)
		}
		e := events("suspended")
		t.Logf("suspended on Docker: %s", e.Message)
		if !strings.Contains(e.Message, "no memory image") || !strings.Contains(e.Message, "only containerd with gVisor") {
			t.Errorf("the suspended event on Docker: %q, want the files fallback and why", e.Message)
		}
		r, err := c.Call(ctx, s, "bash", json.RawMessage(`{"command":"cat /workspace/kept.txt","description":"t"}`))
		if err != nil || r.IsError || strings.TrimSpace(r.Text) != "kept" {
			t.Errorf("after the resume: %v %q", err, r.Text)
		}
		if e := events("resumed"); !strings.HasPrefix(e.Message, "from snapshot") {
			t.Errorf("the resumed event on Docker: %q, want the files snapshot", e.Message)
		}
	})
}

// restartDuringMemoryResume suspends a session running a counter task
// with a memory image, kills its server during the resume its next call
// starts (at: "task-start", containerd's start of the restored task;
// "restored", the runtime's log of the restore; "probed", the session
// layer's), starts the server again
// and checks that the counter counts on, its file counting 1..N.
func restartDuringMemoryResume(t *testing.T, bin, at string) {
	tenant := dockertest.Tenant("memrst" + at[:1])
	cfg, _ := memoryConfig(t, tenant, "runsc", "memory", "")
	const s = "restart"
	removeSandboxesAtEnd(t, cfg, tenant, s)
	a := startServeProcess(t, bin, cfg)
	ctx := context.Background()
	c := client.New(a.url, testToken, nil)
	bash := func(c *client.Client, cmd string, background bool) string {
		t.Helper()
		args, _ := json.Marshal(map[string]any{"command": cmd, "description": "restart test", "run_in_background": background})
		r, err := c.Call(ctx, s, "bash", args)
		if err != nil || r.IsError {
			t.Fatalf("%q: %v %q", cmd, err, r.Text)
		}
		return r.Text
	}
	bash(c, `i=0; while :; do i=$((i+1)); echo $i >> /workspace/counter.log; sleep 0.2; done`, true)
	time.Sleep(time.Second)
	if _, err := c.SuspendSession(ctx, s); err != nil {
		t.Fatalf("suspend: %v", err)
	}
	killed := make(chan struct{})
	kill := func() {
		_ = a.cmd.Process.Kill()
		close(killed)
	}
	switch at {
	case "task-start":
		ccfg := containerdtest.Config(t, containerdtest.Address(t))
		cc, err := ctrd.New(ccfg.Address)
		if err != nil {
			t.Fatal(err)
		}
		defer cc.Close()
		wctx, cancel := context.WithCancel(namespaces.WithNamespace(ctx, ccfg.Namespace))
		defer cancel()
		ch, errs := cc.Subscribe(wctx, `topic=="/tasks/start"`)
		id := containerd.ContainerID(tenant, s)
		go func() {
			for {
				select {
				case e := <-ch:
					var ev apievents.TaskStart
					if e.Namespace == ccfg.Namespace && typeurl.UnmarshalTo(e.Event, &ev) == nil && ev.ContainerID == id {
						kill()
						return
					}
				case <-errs:
					return
				case <-wctx.Done():
					return
				}
			}
		}()
		time.Sleep(500 * time.Millisecond) // subscribed before the resume
	case "restored", "probed":
		go func() {
			for l := range a.logs {
				if strings.Contains(l, "sandbox restored from its memory image") && strings.Contains(l, `"probe"`) == (at == "probed") {
					kill()
					return
				}
			}
		}()
	}
	go c.Call(ctx, s, "bash", json.RawMessage(`{"command":"true","description":"restart test"}`)) // cut short by the kill
	select {
	case <-killed:
	case <-time.After(2 * time.Minute):
		t.Fatalf("the resume never reached %s", at)
	}
	a.done <- <-a.done // exited; left for its cleanup
	b := startServeProcess(t, bin, cfg)
	defer b.stop(t)
	cb := client.New(b.url, testToken, nil)
	out := bash(cb, "sleep 1; cat /workspace/counter.log", false)
	for drained := false; !drained; {
		select {
		case l := <-b.logs:
			if strings.Contains(l, "session resume") || strings.Contains(l, "adopted") || strings.Contains(l, "memory image") {
				t.Logf("after the restart: %.700s", l)
			}
		default:
			drained = true
		}
	}
	n := strings.Fields(out)
	for i, v := range n {
		if v != strconv.Itoa(i+1) {
			t.Fatalf("counter.log line %d is %q: the counter restarted or skipped", i+1, v)
		}
	}
	again := strings.Fields(bash(cb, "sleep 1; cat /workspace/counter.log", false))
	t.Logf("counter at %d, then %d", len(n), len(again))
	if len(again) <= len(n) {
		t.Errorf("the counter stopped at %d after the restart: its process was not restored", len(n))
	}
}

// containerCreates counts the containers containerd makes for tenant's
// session from now on (its /containers/create events): the returned func
// says how many so far, after a moment for the events to arrive.
func containerCreates(t *testing.T, tenant, session string) func() int {
	t.Helper()
	cfg := containerdtest.Config(t, containerdtest.Address(t))
	c, err := ctrd.New(cfg.Address)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(namespaces.WithNamespace(context.Background(), cfg.Namespace))
	t.Cleanup(func() { cancel(); c.Close() })
	ch, errs := c.Subscribe(ctx, `topic=="/containers/create"`)
	id := containerd.ContainerID(tenant, session)
	var n atomic.Int32
	go func() {
		for {
			select {
			case e := <-ch:
				var ev apievents.ContainerCreate
				if e.Namespace == cfg.Namespace && typeurl.UnmarshalTo(e.Event, &ev) == nil && ev.ID == id {
					n.Add(1)
				}
			case <-errs:
				return
			case <-ctx.Done():
				return
			}
		}
	}()
	time.Sleep(500 * time.Millisecond) // the stream set up before what it counts
	return func() int {
		time.Sleep(time.Second)
		return int(n.Load())
	}
}

// serverLogLine returns the first line of p's log containing msg that
// arrives within 30 s (lines are read from its stderr as they come).
func serverLogLine(p *serveProcess, msg string) string {
	deadline := time.After(30 * time.Second)
	for {
		select {
		case l := <-p.logs:
			if strings.Contains(l, msg) {
				return l
			}
		case <-deadline:
			return ""
		}
	}
}
