package local

import (
	"context"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/shellbox/shellbox/executor"
	"github.com/shellbox/shellbox/tools"
)

// TestSpillSpaceEvictsOldest: a session whose spill space is a 64 MiB tmpfs
// writes 1 GB of large results (40 × 25 MB): every result's spill is whole
// (none fails with ENOSPC), the oldest finished spill files are deleted to
// make room, a task still running keeps its spill file, and a background
// task whose spill was deleted says so in bash_output.
func TestSpillSpaceEvictsOldest(t *testing.T) {
	requireRoot(t)
	dir := t.TempDir()
	if err := unix.Mount("tmpfs", dir, "tmpfs", unix.MS_NOSUID|unix.MS_NODEV, "size=64m,mode=0755"); err != nil {
		t.Fatalf("mount a 64 MiB tmpfs for the spill space: %v", err)
	}
	t.Cleanup(func() { unix.Unmount(dir, unix.MNT_DETACH) })
	e := newExec(t, CgroupOff, func(c *Config) { c.SpillDir = dir })

	const size = 25_000_000
	gen := fmt.Sprintf("head -c %d /dev/zero", size)
	old := start(t, e, executor.Request{Command: gen})
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if _, err := old.Wait(ctx); err != nil {
		t.Fatal(err)
	}

	// A task still running (its spill file open) is never evicted.
	running := start(t, e, executor.Request{Command: "head -c 10000000 /dev/zero; exec sleep 60"})
	t.Cleanup(func() { running.Kill(context.Background()) })
	var runningSpill string
	for deadline := time.Now().Add(20 * time.Second); ; {
		o, err := running.Read(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		if fi, err := os.Stat(o.SpillPath); o.SpillPath != "" && err == nil && fi.Size() == 10000000 {
			runningSpill = o.SpillPath
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the running task's spill: %+v", o)
		}
		time.Sleep(20 * time.Millisecond)
	}

	var paths []string
	for i := range 40 {
		res := run(t, e, executor.Request{Command: gen, Timeout: time.Minute})
		if !res.Truncated || res.SpillPath == "" || res.SpillError != "" {
			t.Fatalf("result %d: truncated %v, spill %q, spill error %q", i, res.Truncated, res.SpillPath, res.SpillError)
		}
		fi, err := os.Stat(res.SpillPath)
		if err != nil || fi.Size() != size {
			t.Fatalf("result %d: spill file %v %v, want %d bytes", i, fi, err, size)
		}
		paths = append(paths, res.SpillPath)
	}
	// The newest two fit the space (2 × 25 MB < 64 MiB); older ones went.
	for i, p := range paths {
		_, err := os.Stat(p)
		if i >= len(paths)-2 && err != nil {
			t.Errorf("newest spill %d: %v", i, err)
		}
		if i < len(paths)-3 && err == nil {
			t.Errorf("spill %d of 40 is still there: nothing was evicted?", i)
		}
	}
	if n := e.space.Evicted(); n < 37 {
		t.Errorf("%d spill files evicted, want at least 37", n)
	}

	if fi, err := os.Stat(runningSpill); err != nil || fi.Size() != 10000000 {
		t.Errorf("the running task's spill file: %v %v, want it whole", fi, err)
	}
	if o, err := running.Read(context.Background()); err != nil || o.SpillError != "" {
		t.Errorf("the running task's read: %v, spill error %q", err, o.SpillError)
	}

	o, err := old.Read(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	want := fmt.Sprintf("%s was deleted to make room for newer output (the session's spill space is %d bytes)", o.SpillPath, 64<<20)
	if o.SpillError != want {
		t.Errorf("the old task's spill error: %q, want %q", o.SpillError, want)
	}
	text := tools.RenderOutput(o)
	if !strings.Contains(text, "; full output unavailable: "+want+"]\nstatus: completed, exit code: 0") {
		t.Errorf("bash_output of the old task:\n%s", text[max(0, len(text)-300):])
	}
}
