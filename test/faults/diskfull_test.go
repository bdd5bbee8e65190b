package faults_test

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/shellbox/shellbox/sandbox"
	"github.com/shellbox/shellbox/sandbox/enginetest"
	"github.com/shellbox/shellbox/tools"
)

// smallDisk mounts a fresh ext4 filesystem of size bytes (its image in a
// temporary directory, on a loop device that clears itself) and returns
// its mount point, labelled shellbox-faults; the test's end unmounts it
// and whatever is mounted below it.
func smallDisk(t *testing.T, size int64) string {
	t.Helper()
	dir, err := os.MkdirTemp("/tmp", "sbfull-")
	if err != nil {
		t.Fatal(err)
	}
	img := filepath.Join(t.TempDir(), "disk.ext4")
	if err := os.WriteFile(img, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Truncate(img, size); err != nil {
		t.Fatal(err)
	}
	for _, args := range [][]string{
		{"mkfs.ext4", "-q", "-F", "-m", "0", "-L", "shellbox-faults", img},
		{"mount", "-o", "loop", img, dir},
	} {
		if out, err := exec.Command(args[0], args[1:]...).CombinedOutput(); err != nil {
			os.Remove(dir)
			t.Skipf("%s: %v: %s (this test needs root and loop devices)", args[0], err, out)
		}
	}
	t.Cleanup(func() {
		if out, err := exec.Command("umount", "-R", dir).CombinedOutput(); err != nil {
			t.Errorf("unmounting the small disk: %v: %s", err, out)
			exec.Command("umount", "-R", "-l", dir).Run()
		}
		os.Remove(dir)
	})
	return dir
}

// fill writes path until its filesystem is full, and returns how much it
// wrote.
func fill(t *testing.T, path string) int64 {
	t.Helper()
	f, err := os.OpenFile(path, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, 0o600)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	buf := make([]byte, 64<<10)
	var n int64
	for {
		m, err := f.Write(buf)
		n += int64(m)
		if errors.Is(err, syscall.ENOSPC) {
			f.Sync()
			return n
		}
		if err != nil {
			t.Fatal(err)
		}
	}
}

// TestStateDiskFull: the state directory of `shellbox serve` (sandbox
// host directories, workspace images) and its audit log share a small
// disk, which the test fills while a session works. The calls during the
// fault get their result or a clear error naming what failed, within
// hung; once the space is freed, calls succeed, in the old session and a
// new one; the workspace's files from before, the background task's
// output and the audit log are whole, one sandbox per session, and the
// server did not die. The running session's workspace keeps working
// through the fault: its image's blocks are reserved on the disk
// (sandbox/hostdir reserve), so a write inside it cannot fail below ext4
// (which, sparse, aborted the journal and left the workspace read-only
// for good), and what a write during the fault said it wrote is there.
func TestStateDiskFull(t *testing.T) {
	enginetest.Each(t, func(t *testing.T, e enginetest.Engine) {
		for _, runtime := range []string{sandbox.RuntimeRunc, sandbox.RuntimeRunsc} {
			t.Run(runtime, func(t *testing.T) { stateDiskFull(t, e, runtime) })
		}
	})
}

func stateDiskFull(t *testing.T, e enginetest.Engine, runtime string) {
	disk := smallDisk(t, 96<<20)
	s := newServed(t, e, runtime, disk)
	p := s.start(t)
	const session, fresh = "full", "fresh"
	t.Cleanup(func() { p.deleteSessions(t, session, fresh) })

	// A file of the workspace, checked after.
	sum := p.bash(t, session, "head -c 1048576 /dev/urandom > /workspace/before && sha256sum < /workspace/before")
	r, _, err := p.call(t, session, tools.ToolBash,
		`{"command":"for i in $(seq 1 40); do echo line $i; sleep 0.25; done","description":"prints","run_in_background":true}`)
	if err != nil || r.IsError {
		t.Fatalf("starting the task: %v %q", err, r.Text)
	}
	task := r.Value.(*tools.Background).TaskID

	filled := fill(t, filepath.Join(disk, "fill"))
	start := time.Now()
	during := map[string]string{}
	var out strings.Builder // the task's output, as read
	for _, c := range []struct{ name, session, tool, args string }{
		{"write in the workspace", session, tools.ToolBash, `{"command":"yes | head -c 4194304 > /workspace/during && sync && echo wrote","description":"write"}`},
		{"read the workspace", session, tools.ToolBash, `{"command":"sha256sum < /workspace/before","description":"read"}`},
		{"read the task", session, tools.ToolBashOutput, fmt.Sprintf(`{"task_id":%q}`, task)},
		{"a new session", fresh, tools.ToolBash, `{"command":"echo new","description":"new"}`},
	} {
		r, took, err := p.call(t, c.session, c.tool, c.args)
		if err != nil {
			t.Errorf("%s with the disk full: %v (the server: %s)", c.name, err, p.log())
			continue
		}
		during[c.name] = fmt.Sprintf("%q in %s", r.Text, took.Round(time.Millisecond))
		if c.tool == tools.ToolBashOutput {
			out.WriteString(r.Text + "\n")
		}
		if r.IsError && !strings.Contains(strings.ToLower(r.Text), "no space left on device") {
			t.Errorf("%s with the disk full: %q, want its result or an error naming the full disk", c.name, r.Text)
		}
	}
	if err := os.Remove(filepath.Join(disk, "fill")); err != nil {
		t.Fatal(err)
	}
	freed := time.Now()

	// After: calls succeed within hung: a new session, and the old one,
	// whose workspace is writable.
	var after, recovery time.Duration
	var afterText string
	for deadline := time.Now().Add(hung); ; time.Sleep(200 * time.Millisecond) {
		a, _, errA := p.call(t, session, tools.ToolBash, `{"command":"echo after > /workspace/after && cat /workspace/after","description":"after"}`)
		b, _, errB := p.call(t, fresh, tools.ToolBash, `{"command":"echo new > /workspace/new && cat /workspace/new","description":"new"}`)
		if errA == nil && errB == nil && !a.IsError && b.Text == "new" {
			after, afterText = time.Since(freed), a.Text
			recovery = time.Since(start)
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("calls after the space was freed: %v %q; %v %q", errA, a.Text, errB, b.Text)
		}
	}
	if afterText != "after" {
		t.Errorf("a write to the old session's workspace after the fault: %q, want it written", afterText)
	}
	if got := p.bash(t, session, "sha256sum < /workspace/before"); got != sum {
		t.Errorf("the workspace's file after the fault: %s, want %s", got, sum)
	}
	for deadline := time.Now().Add(hung); ; time.Sleep(500 * time.Millisecond) {
		r, _, err := p.call(t, session, tools.ToolBashOutput, fmt.Sprintf(`{"task_id":%q}`, task))
		if err != nil || r.IsError {
			t.Fatalf("bash_output after the fault: %v %q", err, r.Text)
		}
		out.WriteString(r.Text + "\n")
		if strings.Contains(r.Text, "status: completed") || time.Now().After(deadline) {
			break
		}
	}
	for i := 1; i <= 40; i++ {
		if want := fmt.Sprintf("line %d\n", i); !strings.Contains(out.String(), want) {
			t.Errorf("the task's output lacks %q:\n%s", want, out.String())
			break
		}
	}

	// What the write during the fault was told it wrote.
	kept := p.bash(t, session, "yes | head -c 4194304 | cmp -s - /workspace/during && echo yes || echo no")
	if !strings.Contains(during["write in the workspace"], `"wrote"`) || kept != "yes" {
		t.Errorf("the write during the fault: %s, read back whole: %s; want it written, and whole", during["write in the workspace"], kept)
	}
	if n := len(s.sandboxes(t)); n != 2 {
		t.Errorf("%d sandboxes of the owner on the engine, want 2 (one per session)", n)
	}

	// The audit log: whole lines of JSON, the calls of before and after.
	b, err := os.ReadFile(s.audit)
	if err != nil {
		t.Fatal(err)
	}
	sc := bufio.NewScanner(bytes.NewReader(b))
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	var cmds []string
	for sc.Scan() {
		var rec struct{ Command string }
		if err := json.Unmarshal(sc.Bytes(), &rec); err != nil {
			t.Errorf("a torn audit line: %q: %v", sc.Text(), err)
			continue
		}
		cmds = append(cmds, rec.Command)
	}
	all := strings.Join(cmds, "\n")
	for _, want := range []string{"head -c 1048576 /dev/urandom", "for i in $(seq 1 40)", "echo after > /workspace/after", "echo new > /workspace/new"} {
		if !strings.Contains(all, want) {
			t.Errorf("the audit log has no line of %q:\n%s", want, all)
		}
	}
	select {
	case err := <-p.done:
		p.done <- err
		t.Fatalf("the server died: %v\n%s", err, p.log())
	default:
	}
	if strings.Contains(p.log(), "panic") {
		t.Errorf("the server's log has a panic:\n%s", p.log())
	}
	audited := 0
	for _, c := range cmds {
		if strings.Contains(c, "> /workspace/during && sync && echo wrote") {
			audited++
		}
	}
	t.Logf("fault %s/%s/state disk full (%d MiB filled): during: %v; the call during audited %d times; calls after succeeded %s after the space was freed (fault to recovery %s); a write to the old workspace after: %q; the file written during it kept whole: %s",
		e.Name, runtime, filled>>20, during, audited, after.Round(time.Millisecond), recovery.Round(time.Millisecond), afterText, kept)
}
