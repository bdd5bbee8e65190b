package main

import (
	"archive/tar"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/shellbox/shellbox/eventstream"
	"github.com/shellbox/shellbox/sandbox"
	"github.com/shellbox/shellbox/sandbox/docker/dockertest"
	"github.com/shellbox/shellbox/sandbox/enginetest"
	"github.com/shellbox/shellbox/sandbox/snapshot/snapshottest"
	"github.com/shellbox/shellbox/server"
	"github.com/shellbox/shellbox/server/client"
	"github.com/shellbox/shellbox/tools"
)

// suspendSetup adds to a workspace holding a git checkout and a venv
// (made on the host, uploaded: the test image has neither git nor Python)
// what work leaves: files with odd modes, an old mtime, symlinks
// (relative, absolute, dangling), a hard link, a FIFO, a sparse file and
// read-only directories (as a Go module cache has).
const suspendSetup = `set -e
cd /workspace
ln -s /usr/bin/python3 venv/bin/python3 && ln -sf python3 venv/bin/python
mkdir -p odd/private odd/shared
echo secret > odd/private/key && chmod 0400 odd/private/key && chmod 0700 odd/private
chmod 2775 odd/shared && chmod 1777 odd
echo run > odd/tool && chmod 0751 odd/tool
touch -d '2001-02-03 04:05:06 UTC' odd/old
ln -s ../repo/main.py odd/rel && ln -s /etc/hostname odd/abs && ln -s nowhere odd/dangling
echo linked > odd/a && ln odd/a odd/b
mkfifo odd/pipe
dd if=/dev/zero of=odd/sparse bs=1 count=0 seek=50M 2>/dev/null && echo end >> odd/sparse
mkdir -p odd/ro/sub && echo frozen > odd/ro/sub/f && chmod 0555 odd/ro/sub odd/ro
echo ok`

// suspendManifest prints the workspace as a list a restore must match:
// every entry's type, mode and owner, files' sizes, link counts and
// sha256, symlinks' targets, which names share an inode, one mtime, and
// that the sparse file holds almost no blocks.
const suspendManifest = `cd /workspace
find . -mindepth 1 \( -type f -printf '%p f %m %U:%G %s %n\n' \) -o \( -type l -printf '%p l %U:%G -> %l\n' \) \
  -o \( -type d -printf '%p d %m %U:%G\n' \) -o -printf '%p %y %m %U:%G\n' | LC_ALL=C sort
find . -type f ! -name sparse -print0 | LC_ALL=C sort -z | xargs -0 sha256sum
echo links $(find . -samefile odd/a | LC_ALL=C sort)
stat -c 'mtime %n %Y' odd/old
echo sparse $(tail -c 4 odd/sparse) $(( $(stat -c '%b*%B' odd/sparse) < 1048576 ))`

// hostWork makes, on the host with its own git and python3, a git
// checkout with history and an uncommitted change and a venv, and returns
// them as a tar stream of their directory.
func hostWork(t *testing.T) []byte {
	t.Helper()
	dir := t.TempDir()
	sh := func(script string) {
		t.Helper()
		cmd := exec.Command("bash", "-ec", script)
		cmd.Dir = dir
		cmd.Env = append(os.Environ(), "GIT_CONFIG_GLOBAL=/dev/null", "GIT_AUTHOR_NAME=t", "GIT_AUTHOR_EMAIL=t@example.com",
			"GIT_COMMITTER_NAME=t", "GIT_COMMITTER_EMAIL=t@example.com")
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("%s: %v\n%s", script, err, out)
		}
	}
	sh(`git init -q repo && cd repo
printf 'print("hi")\n' > main.py && mkdir -p pkg && echo 'x = 1' > pkg/mod.py
git add -A && git commit -qm one && echo '# two' >> main.py && git commit -qam two && git gc -q
echo dirty >> pkg/mod.py`)
	// The venv's interpreter links are absolute, which an upload refuses:
	// the setup makes them in the sandbox.
	sh(`python3 -m venv --without-pip venv && find venv -type l -lname '/*' -delete`)
	out, err := exec.Command("tar", "-C", dir, "-cf", "-", "repo", "venv").Output()
	if err != nil {
		t.Fatalf("tar: %v", err)
	}
	return out
}

// checkRepo downloads the session's repo and has the host's git check it:
// every object whole, two commits, the uncommitted change kept.
func checkRepo(t *testing.T, c *client.Client, session string) {
	t.Helper()
	_, body, err := c.GetFile(context.Background(), session, "/workspace/repo", true)
	if err != nil {
		t.Fatalf("downloading the repo: %v", err)
	}
	defer body.Close()
	dir := t.TempDir()
	x := exec.Command("tar", "--no-same-owner", "-C", dir, "-xf", "-")
	x.Stdin = body
	if out, err := x.CombinedOutput(); err != nil {
		t.Fatalf("untar the repo: %v\n%s", err, out)
	}
	root := dir
	if _, err := os.Stat(filepath.Join(dir, "repo", ".git")); err == nil {
		root = filepath.Join(dir, "repo")
	}
	cmd := exec.Command("bash", "-ec", "git fsck --strict --no-dangling --no-progress >/dev/null && git rev-list --count HEAD && git status --porcelain")
	cmd.Dir = root
	cmd.Env = append(os.Environ(), "GIT_CONFIG_GLOBAL=/dev/null", "GIT_CONFIG_NOSYSTEM=1")
	out, err := cmd.CombinedOutput()
	if err != nil || string(out) != "2\n M pkg/mod.py\n" {
		t.Errorf("git on the resumed repo: %v %q, want 2 commits and pkg/mod.py modified", err, out)
	}
}

// TestSuspendResume: a session's work outlives its sandbox. Through a
// real `shellbox serve` and its REST API: a session writes a git checkout,
// a venv and odd files, starts a background task, and is suspended (the
// task killed, the sandbox and host workspace gone, the session listed
// suspended); the server restarts; the session's next call resumes it in
// a new sandbox where the manifest of its workspace (paths, modes, owners,
// sizes, hashes, links) is what it was. On Docker and containerd, runc
// with the dir store and runsc with the S3 store.
func TestSuspendResume(t *testing.T) {
	enginetest.Each(t, func(t *testing.T, eng enginetest.Engine) {
		for _, v := range []struct{ runtime, store string }{{"runc", "dir"}, {"runsc", "s3"}} {
			t.Run(v.runtime+"-"+v.store, func(t *testing.T) { suspendResume(t, eng, v.runtime, v.store) })
		}
	})
}

// suspendConfig is a server's configuration with the snapshot store
// (dir: under the test's temporary directory; s3: a bucket of its own on
// the environment's S3 server) and extra lines.
func suspendConfig(t testing.TB, eng enginetest.Engine, runtime, store, extra string) (cfg, stateDir, storeDir string) {
	t.Helper()
	stateDir = dockertest.StateDir(t)
	snap := ""
	switch store {
	case "dir":
		storeDir = filepath.Join(t.TempDir(), "snapshots")
		snap = fmt.Sprintf("snapshots:\n  store: dir\n  dir: %s\n", storeDir)
	case "s3":
		o, _ := snapshottest.S3Bucket(t)
		snap = fmt.Sprintf("snapshots:\n  store: s3\n  s3:\n    endpoint: %s\n    bucket: %s\n    insecure: true\n    accessKey: %s\n    secretKey: %s\n",
			o.Endpoint, o.Bucket, o.AccessKey, o.SecretKey)
	}
	cfg = filepath.Join(t.TempDir(), "shellbox.yaml")
	body := eng.Config(t) + fmt.Sprintf(`sandbox:
  stateDir: %s
  owner: %s
  image: %s
  runtime: %s
  labels:
    %s: "1"
server:
  shutdownTimeout: 30s
%s  tenants:
    %s:
      tokens: [%q]
`, stateDir, dockertest.Owner(t), dockertest.Image, runtime, dockertest.LabelTest, extra, dockerTenant, server.HashToken(testToken)) + snap
	if err := os.WriteFile(cfg, []byte(body), 0o644); err != nil {
		t.Fatal(err)
	}
	return cfg, stateDir, storeDir
}

func suspendResume(t *testing.T, eng enginetest.Engine, runtime, store string) {
	requireEngine(t)
	bin := buildBinaries(t)
	cfg, stateDir, storeDir := suspendConfig(t, eng, runtime, store, "")
	const s = "durable"
	removeSandboxesAtEnd(t, cfg, dockerTenant, s)
	first := startServeProcess(t, bin, cfg)
	ctx := context.Background()
	c := client.New(first.url, testToken, nil)
	run := func(c *client.Client, cmd string) string {
		t.Helper()
		args, _ := json.Marshal(map[string]any{"command": cmd, "description": "suspend test", "timeoutMs": 120000})
		r, err := c.Call(ctx, s, "bash", args)
		if err != nil || r.IsError {
			t.Fatalf("call %.40q: %v %q", cmd, err, r.Text)
		}
		return r.Text
	}
	if _, err := c.PutFile(ctx, s, "/workspace", bytes.NewReader(hostWork(t)), client.PutOptions{Tar: true}); err != nil {
		t.Fatalf("uploading the checkout and venv: %v", err)
	}
	if out := run(c, suspendSetup); !strings.HasSuffix(out, "ok") {
		t.Fatalf("setup: %q", out)
	}
	before := run(c, suspendManifest)
	t.Logf("manifest (%d lines):\n%s", strings.Count(before, "\n")+1, before)
	r, err := c.Call(ctx, s, "bash", json.RawMessage(`{"command":"sleep 300","description":"outlived","run_in_background":true}`))
	if err != nil || r.IsError {
		t.Fatalf("background task: %v %q", err, r.Text)
	}

	events := subscribe(t, c, s)
	start := time.Now()
	si, err := c.SuspendSession(ctx, s)
	if err != nil {
		t.Fatalf("suspend: %v", err)
	}
	t.Logf("suspended in %s: %+v", time.Since(start).Round(time.Millisecond), si)
	if si.State != "suspended" || si.Snapshot == "" {
		t.Fatalf("suspend answered %+v, want state suspended and its snapshot", si)
	}
	if e := events("suspended"); !strings.Contains(e.Message, si.Snapshot) || !strings.Contains(e.Message, "killed by the suspend") {
		t.Errorf("the suspended event: %q, want the snapshot and the killed task named", e.Message)
	}
	list, err := c.Sessions(ctx)
	if err != nil || len(list) != 1 || list[0].ID != s || list[0].State != "suspended" {
		t.Fatalf("sessions after suspend: %v %+v", err, list)
	}
	ws := filepath.Join(stateDir, "workspaces", dockerTenant, s)
	if _, err := os.Lstat(ws); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("the suspended session's host workspace %s: %v, want it gone", ws, err)
	}
	if out := cliOut(t, "sessions", "ls", "--config", cfg); !strings.Contains(out, s) || !strings.Contains(out, "suspended") {
		t.Errorf("sessions ls on this host after suspend:\n%s", out)
	}
	if again, err := c.SuspendSession(ctx, s); err != nil || again.Snapshot != si.Snapshot {
		t.Errorf("suspending a suspended session: %+v, %v; want it as it is", again, err)
	}

	// A server restart with nothing of the session in this process.
	first.stop(t)
	second := startServeProcess(t, bin, cfg)
	c = client.New(second.url, testToken, nil)
	events = subscribe(t, c, s)
	start = time.Now()
	after := run(c, suspendManifest)
	if e := events("resumed"); !strings.Contains(e.Message, si.Snapshot) {
		t.Errorf("the resumed event: %q, want the snapshot named", e.Message)
	}
	t.Logf("first call after the restart, resuming: %s", time.Since(start).Round(time.Millisecond))
	if after != before {
		t.Errorf("the workspace after resume differs:\n--- before\n%s\n--- after\n%s", before, after)
	}
	checkRepo(t, c, s)
	if out := run(c, "ps -eo args | grep -c '^sleep 300' || true"); out != "0" {
		t.Errorf("the background task the suspend killed runs again: %q", out)
	}
	list, err = c.Sessions(ctx)
	if err != nil || len(list) != 1 || list[0].State != "running" {
		t.Fatalf("sessions after resume: %v %+v", err, list)
	}
	if storeDir != "" {
		corruptNewest(t, c, s, storeDir, si.Snapshot, before, run)
	}
	if err := c.DeleteSession(ctx, s); err != nil {
		t.Fatal(err)
	}
	if list, err := c.Sessions(ctx); err != nil || len(list) != 0 {
		t.Errorf("sessions after delete: %v %+v", err, list)
	}
	if storeDir != "" {
		if _, err := os.Lstat(filepath.Join(storeDir, dockerTenant, s)); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("the deleted session's snapshots: %v, want them gone", err)
		}
	}
	second.stop(t)
}

// subscribe follows the session's event stream and returns a wait for
// its next session event of state want (the others are skipped), which
// fails the test after 30 s.
func subscribe(t *testing.T, c *client.Client, session string) func(want string) eventstream.Event {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	es, err := c.Subscribe(ctx, session)
	if err != nil {
		t.Fatalf("subscribe: %v", err)
	}
	ch := make(chan eventstream.Event, 64)
	go func() {
		defer close(ch)
		for {
			e, err := es.Next()
			if err != nil {
				return
			}
			select {
			case ch <- e:
			default:
			}
		}
	}()
	return func(want string) eventstream.Event {
		t.Helper()
		timeout := time.After(30 * time.Second)
		for {
			select {
			case e, ok := <-ch:
				if !ok {
					t.Fatalf("the event stream ended before a %s event", want)
				}
				if e.Type == eventstream.EventSession && e.State == want {
					return e
				}
			case <-timeout:
				t.Fatalf("no %s event within 30 s", want)
			}
		}
	}
}

// cliOut runs the shellbox CLI in this process and returns its stdout.
func cliOut(t testing.TB, args ...string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	var out, errOut strings.Builder
	if code := run(ctx, args, strings.NewReader(""), &out, &errOut); code != 0 {
		t.Errorf("shellbox %v: exit %d: %s", args, code, errOut.String())
	}
	return out.String()
}

// corruptNewest suspends the session again and flips a byte of that new
// snapshot in the dir store: the next call is refused by the checksum,
// names the snapshot before (prev), and the session stays suspended;
// resuming from prev restores the workspace (want: its manifest).
func corruptNewest(t *testing.T, c *client.Client, s, storeDir, prev, want string, run func(*client.Client, string) string) {
	t.Helper()
	ctx := context.Background()
	si, err := c.SuspendSession(ctx, s)
	if err != nil || si.Snapshot == prev {
		t.Fatalf("second suspend: %+v, %v", si, err)
	}
	files, _ := filepath.Glob(filepath.Join(storeDir, dockerTenant, s, si.Snapshot+".*.snap"))
	if len(files) != 1 {
		t.Fatalf("the new snapshot's file: %v", files)
	}
	f, err := os.OpenFile(files[0], os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	b := make([]byte, 1)
	f.ReadAt(b, 100)
	b[0] ^= 0xff
	f.WriteAt(b, 100)
	f.Close()
	r, err := c.Call(ctx, s, "bash", json.RawMessage(`{"command":"ls /workspace","description":"after corruption"}`))
	if err != nil || !r.IsError || !strings.Contains(r.Text, "snapshot corrupt") || !strings.Contains(r.Text, prev) {
		t.Fatalf("a call resuming from a corrupt snapshot: %v %q; want it refused, naming %s", err, r.Text, prev)
	}
	t.Logf("refused: %s", r.Text)
	if list, err := c.Sessions(ctx); err != nil || len(list) != 1 || list[0].State != "suspended" {
		t.Fatalf("sessions after the refused resume: %v %+v", err, list)
	}
	if _, err := c.ResumeSession(ctx, s, prev); err != nil {
		t.Fatalf("resume from %s: %v", prev, err)
	}
	if got := run(c, suspendManifest); got != want {
		t.Errorf("the workspace resumed from %s differs:\n%s", prev, got)
	}
}

// TestSuspendStoreFull: a suspend whose store fills up fails with a clear
// error and loses nothing: the sandbox stays, the session runs on with its
// files. Docker, runc, a dir store on a 1 MiB tmpfs.
func TestSuspendStoreFull(t *testing.T) {
	requireEngine(t)
	if os.Geteuid() != 0 {
		if os.Getenv("CI") == "true" {
			t.Fatal("CI=true, so not skipping: mounting a small tmpfs for a full store needs root")
		}
		t.Skip("mounting a small tmpfs for a full store needs root")
	}
	bin := buildBinaries(t)
	cfg, _, storeDir := suspendConfig(t, enginetest.Docker, "runc", "dir", "")
	if err := os.MkdirAll(storeDir, 0o700); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command("mount", "-t", "tmpfs", "-o", "size=1m", "shellbox-test-store", storeDir).CombinedOutput(); err != nil {
		t.Fatalf("mount: %v %s", err, out)
	}
	t.Cleanup(func() { exec.Command("umount", "-l", storeDir).Run() })
	const s = "full"
	removeSandboxesAtEnd(t, cfg, dockerTenant, s)
	p := startServeProcess(t, bin, cfg)
	ctx := context.Background()
	c := client.New(p.url, testToken, nil)
	r, err := c.Call(ctx, s, "bash", json.RawMessage(`{"command":"head -c 4000000 /dev/urandom > /workspace/big && sha256sum /workspace/big","description":"fill"}`))
	if err != nil || r.IsError {
		t.Fatalf("write: %v %q", err, r.Text)
	}
	sum := r.Text
	_, err = c.SuspendSession(ctx, s)
	var ce *client.Error
	if !errors.As(err, &ce) || ce.Status != 503 || !strings.Contains(err.Error(), "no space") || !strings.Contains(err.Error(), "runs on") {
		t.Fatalf("suspend into a full store: %v; want 503 saying the store is full and the session runs on", err)
	}
	t.Logf("refused: %v", err)
	if list, err := c.Sessions(ctx); err != nil || len(list) != 1 || list[0].State != "running" {
		t.Fatalf("sessions after the failed suspend: %v %+v", err, list)
	}
	r, err = c.Call(ctx, s, "bash", json.RawMessage(`{"command":"sha256sum /workspace/big","description":"still"}`))
	if err != nil || r.IsError || r.Text != sum {
		t.Fatalf("the session after the failed suspend: %v %q, want %q", err, r.Text, sum)
	}
	if ents, _ := os.ReadDir(filepath.Join(storeDir, dockerTenant, s)); len(ents) != 0 {
		t.Errorf("the failed suspend left %d entries in the store", len(ents))
	}
	if err := c.DeleteSession(ctx, s); err != nil {
		t.Fatal(err)
	}
}

// TestIdleSuspend: at its idle TTL a session is suspended, not ended, and
// not a moment before while a background task runs; its next call
// resumes it with its files. Docker, runc, the dir store.
func TestIdleSuspend(t *testing.T) {
	requireEngine(t)
	bin := buildBinaries(t)
	cfg, _, _ := suspendConfig(t, enginetest.Docker, "runc", "dir", "  idleTTL: 3s\n")
	const s = "idler"
	removeSandboxesAtEnd(t, cfg, dockerTenant, s)
	p := startServeProcess(t, bin, cfg)
	ctx := context.Background()
	c := client.New(p.url, testToken, nil)
	r, err := c.Call(ctx, s, "bash", json.RawMessage(`{"command":"echo kept > /workspace/f; sleep 8; echo done > /workspace/g","description":"busy","run_in_background":true}`))
	if err != nil || r.IsError {
		t.Fatalf("background task: %v %q", err, r.Text)
	}
	id := r.Value.(*tools.Background).TaskID
	state := func() string {
		t.Helper()
		list, err := c.Sessions(ctx)
		if err != nil || len(list) != 1 {
			t.Fatalf("sessions: %v %+v", err, list)
		}
		return list[0].State
	}
	// Past the TTL (and past a reap interval) with the task running.
	time.Sleep(6 * time.Second)
	if st := state(); st != "running" {
		t.Fatalf("while its background task runs, past the TTL: %s, want running", st)
	}
	var suspendedAt time.Duration
	start := time.Now()
	for st := state(); st != "suspended"; st = state() {
		if time.Since(start) > 90*time.Second {
			t.Fatalf("not suspended 90 s after the task's end: %s", st)
		}
		time.Sleep(250 * time.Millisecond)
	}
	suspendedAt = time.Since(start)
	t.Logf("suspended %s after the check at 6 s (the task ends at about 8 s; TTL 3 s)", suspendedAt.Round(time.Millisecond))
	r, err = c.Call(ctx, s, "bash", json.RawMessage(`{"command":"cat /workspace/f /workspace/g","description":"resume"}`))
	if err != nil || r.IsError || r.Text != "kept\ndone" {
		t.Fatalf("first call after the idle suspend: %v %q", err, r.Text)
	}
	r, err = c.Call(ctx, s, "bash_output", json.RawMessage(fmt.Sprintf(`{"task_id":%q}`, id)))
	t.Logf("bash_output of the task that ended before the suspend: %v %q", err, r.Text)
	if err := c.DeleteSession(ctx, s); err != nil {
		t.Fatal(err)
	}
}

// repoTar streams a tar of copies of this repository's own tracked files
// (real source: text, compressible as a checkout is) under
// <prefix>copy0/, <prefix>copy1/, ... until size bytes of files.
func repoTar(b testing.TB, size int64, prefix string) io.Reader {
	out, err := exec.Command("git", "-C", "../..", "ls-files", "-z").Output()
	if err != nil {
		b.Fatalf("git ls-files: %v", err)
	}
	var paths []string
	for p := range strings.SplitSeq(strings.TrimRight(string(out), "\x00"), "\x00") {
		if fi, err := os.Lstat(filepath.Join("../..", p)); err == nil && fi.Mode().IsRegular() {
			paths = append(paths, p)
		}
	}
	pr, pw := io.Pipe()
	go func() {
		tw := tar.NewWriter(pw)
		var n int64
		for c := 0; n < size; c++ {
			for _, p := range paths {
				if n >= size {
					break
				}
				data, err := os.ReadFile(filepath.Join("../..", p))
				if err != nil {
					pw.CloseWithError(err)
					return
				}
				name := fmt.Sprintf("%scopy%d/%s", prefix, c, p)
				if err := tw.WriteHeader(&tar.Header{Name: name, Mode: 0o644, Size: int64(len(data)), ModTime: time.Unix(1e9, 0)}); err != nil {
					pw.CloseWithError(err)
					return
				}
				if _, err := tw.Write(data); err != nil {
					pw.CloseWithError(err)
					return
				}
				n += int64(len(data))
			}
		}
		pw.CloseWithError(tw.Close())
	}()
	return pr
}

// BenchmarkSuspendResume: suspend (REST call to its answer) and resume
// (the next call's first result: its sandbox, the workspace restored, the
// call run) of a workspace of real source files, through shellbox serve,
// on each engine, runc, the dir store. Sizes 1 and 100 MiB;
// SHELLBOX_BENCH_BIG=1 adds 1 GiB. Each size runs cold (the resume
// creates its sandbox) and with a warm pool of one (the tenant's policy
// sets sandbox.pool.size: 1; the resume claims the pooled sandbox, and
// the pool is refilled, outside the timer, before the next suspend).
// Besides the totals it reports where a resume went, from the server's
// log: its sandbox (created or claimed: create-ms), the store's read and
// the agent's restore (restore-ms, the resumed event's own figure), and
// the rest (the call, and the claim's record writes).
//
//	SHELLBOX_BENCH_BIG=1 go test ./cmd/shellbox -run '^$' -bench SuspendResume -benchtime 2x
func BenchmarkSuspendResume(b *testing.B) {
	sizes := []int64{1, 100}
	if os.Getenv("SHELLBOX_BENCH_BIG") == "1" {
		sizes = append(sizes, 1024)
	}
	for _, eng := range enginetest.All {
		for _, mib := range sizes {
			for _, pool := range []bool{false, true} {
				name := fmt.Sprintf("%s/%dMiB/cold", eng.Name, mib)
				if pool {
					name = fmt.Sprintf("%s/%dMiB/pool", eng.Name, mib)
				}
				b.Run(name, func(b *testing.B) { benchSuspendResume(b, eng, mib, pool) })
			}
		}
	}
}

func benchSuspendResume(b *testing.B, eng enginetest.Engine, mib int64, pool bool) {
	requireEngine(b)
	bin := buildBinaries(b)
	// A policy for the tenant in both cases, so that the two differ by
	// the pool alone. It sets the sandbox's resources (a policy's, not
	// the server's, apply): room for the files, and memory beyond it
	// (the /tmp tmpfs is charged to the sandbox).
	pols := b.TempDir()
	policy := fmt.Sprintf("default: allow\nsandbox:\n  disk: %dMiB\n  memory: %dMiB\n", 2*mib+256, 2*mib+256+128+512)
	if pool {
		policy += "  pool: {size: 1}\n"
	}
	if err := os.WriteFile(filepath.Join(pols, dockerTenant+".yaml"), []byte(policy), 0o644); err != nil {
		b.Fatal(err)
	}
	cfg, stateDir, _ := suspendConfig(b, eng, "runc", "dir", "")
	raw, err := os.ReadFile(cfg)
	if err != nil {
		b.Fatal(err)
	}
	if err := os.WriteFile(cfg, []byte(strings.Replace(string(raw), "sandbox:\n", "policies:\n  dir: "+pols+"\nsandbox:\n", 1)), 0o644); err != nil {
		b.Fatal(err)
	}
	const s = "bench"
	removeSandboxesAtEnd(b, cfg, dockerTenant, s)
	if pool {
		removePooledAtEnd(b, eng, cfg, stateDir, filepath.Join(filepath.Dir(bin), "shellbox-agent"))
	}
	p := startServeProcess(b, bin, cfg)
	ctx := context.Background()
	c := client.New(p.url, testToken, nil)
	logs := &serverLog{p: p}
	if pool {
		logs.awaitPooled(b)
	}
	// In uploads of at most 256 MiB: a tar of this repository's files past
	// that holds more than the 100,000 entries an upload may (files.maxEntries).
	for part, left := 0, mib<<20; left > 0; part++ {
		n := min(left, 256<<20)
		if _, err := c.PutFile(ctx, s, "/workspace", repoTar(b, n, fmt.Sprintf("part%d/", part)), client.PutOptions{Tar: true}); err != nil {
			b.Fatalf("filling the workspace: %v", err)
		}
		left -= n
	}
	var suspend, resume, made, restore time.Duration
	b.ResetTimer()
	for b.Loop() {
		if pool {
			// The session's first call, or the last resume, claimed the
			// pooled sandbox: the next resume finds a new one ready.
			b.StopTimer()
			logs.awaitPooled(b)
			b.StartTimer()
		}
		logs.drain()
		t0 := time.Now()
		if _, err := c.SuspendSession(ctx, s); err != nil {
			b.Fatalf("suspend: %v", err)
		}
		t1 := time.Now()
		r, err := c.Call(ctx, s, "bash", json.RawMessage(`{"command":"echo back","description":"resume"}`))
		if err != nil || r.Text != "back" {
			b.Fatalf("resume: %v %q", err, r.Text)
		}
		suspend += t1.Sub(t0)
		resume += time.Since(t1)
		m, r2, ok := logs.resumePhases(t1, pool)
		if !ok {
			b.Fatalf("no sandbox and resumed lines in the server's log")
		}
		made += m
		restore += r2
	}
	n := float64(b.N)
	b.ReportMetric(float64(suspend.Milliseconds())/n, "suspend-ms/op")
	b.ReportMetric(float64(resume.Milliseconds())/n, "resume-ms/op")
	b.ReportMetric(float64(made.Milliseconds())/n, "create-ms/op")
	b.ReportMetric(float64(restore.Milliseconds())/n, "restore-ms/op")
}

// serverLog reads a benchmark's server's log, counting the pooled
// sandboxes it reports made, whoever reads the line.
type serverLog struct {
	p      *serveProcess
	pooled int // "pooled sandbox created" lines not yet awaited
}

// next returns the next line, or false after d (at once for 0).
func (l *serverLog) next(d time.Duration) (string, bool) {
	var s string
	if d <= 0 {
		select {
		case s = <-l.p.logs:
		default:
			return "", false
		}
	} else {
		select {
		case s = <-l.p.logs:
		case <-time.After(d):
			return "", false
		}
	}
	if strings.Contains(s, "pooled sandbox created") {
		l.pooled++
	}
	return s, true
}

// awaitPooled waits for a pooled sandbox made since the last one awaited.
func (l *serverLog) awaitPooled(b *testing.B) {
	b.Helper()
	var seen []string
	for deadline := time.Now().Add(2 * time.Minute); l.pooled == 0; {
		s, ok := l.next(time.Until(deadline))
		if !ok {
			b.Fatalf("no pooled sandbox made within 2 minutes; the server logged:\n%s", strings.Join(seen, "\n"))
		}
		if len(seen) < 100 {
			seen = append(seen, s)
		}
	}
	l.pooled--
}

// drain reads the lines logged so far.
func (l *serverLog) drain() {
	for {
		if _, ok := l.next(0); !ok {
			return
		}
	}
}

// resumePhases reads, from the server's log of a resume that began at
// start, how long its sandbox took (to the "sandbox created" line, or
// the claim's with pool) and the restore (the resumed event's figure).
func (l *serverLog) resumePhases(start time.Time, pool bool) (made, restore time.Duration, ok bool) {
	want := "sandbox created"
	if pool {
		want = "sandbox claimed from pool"
	}
	var got int
	for deadline := time.Now().Add(10 * time.Second); got < 2; {
		s, ok := l.next(time.Until(deadline))
		if !ok {
			return 0, 0, false
		}
		var e struct {
			Time   time.Time
			Msg    string
			Detail string
		}
		if json.Unmarshal([]byte(s), &e) != nil {
			continue
		}
		switch {
		case e.Msg == want:
			made, got = e.Time.Sub(start), got+1
		case e.Msg == "session resumed":
			i := strings.LastIndex(e.Detail, " in ")
			if i < 0 {
				return 0, 0, false
			}
			d, err := time.ParseDuration(strings.Fields(e.Detail[i+4:])[0])
			if err != nil {
				return 0, 0, false
			}
			restore, got = d, got+1
		}
	}
	return made, restore, true
}

// removePooledAtEnd removes, after the benchmark, the pooled sandboxes
// the server kept (a server leaves them for its next start to adopt).
func removePooledAtEnd(b *testing.B, eng enginetest.Engine, cfg, stateDir, agent string) {
	raw, err := os.ReadFile(cfg)
	if err != nil {
		b.Fatal(err)
	}
	owner := regexp.MustCompile(`\n  owner: (\S+)`).FindSubmatch(raw)
	if owner == nil {
		b.Fatalf("no owner in %s", raw)
	}
	b.Cleanup(func() {
		rt := eng.Runtime(b, stateDir, agent, "runc")
		list, err := rt.List(context.Background(), string(owner[1]))
		for _, sb := range list {
			if err == nil && sandbox.IsPooled(sb.Session) {
				err = rt.Remove(context.Background(), sb.ID)
			}
		}
		if err != nil {
			b.Errorf("removing the pooled sandboxes: %v", err)
		}
	})
}
