package local

import (
	"context"
	"os"
	"testing"

	"github.com/shellbox/shellbox/executor"
)

// TestBackgroundSpillBytes: a background task's end reports the exact size
// of its spill file, whichever way the end is read (Read, Wait, Kill of an
// ended task, Kill of a running one); nothing while it runs, nothing for a
// task that did not spill.
func TestBackgroundSpillBytes(t *testing.T) {
	t.Parallel()
	e := newExec(t, CgroupAuto)
	ctx := context.Background()
	size := func(path string) int64 {
		t.Helper()
		fi, err := os.Stat(path)
		if err != nil {
			t.Fatalf("spill file: %v", err)
		}
		return fi.Size()
	}

	t.Run("ended", func(t *testing.T) {
		// 300,000 bytes and 20 more on stderr: past the 30,000-byte
		// tails, and, with a 10-byte buffer, past memory while it runs.
		tk := start(t, e, executor.Request{Command: "head -c 300000 /dev/zero | tr '\\0' b; echo 0123456789012345678 >&2"},
			func(s *executor.Spec) { s.BufferBytes = 10 })
		res, err := tk.Wait(ctx)
		if err != nil {
			t.Fatal(err)
		}
		o, err := tk.Read(ctx)
		if err != nil || o.Status.State != executor.Completed || o.SpillPath == "" {
			t.Fatalf("read after the end: %+v %v", o, err)
		}
		n := size(o.SpillPath)
		k, err := tk.Kill(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if n != 300_020 || o.SpillBytes != n || res.SpillBytes != n || k.SpillBytes != n || !k.AlreadyDone {
			t.Errorf("spill file %d bytes; Read says %d, Wait %d, Kill %d (already done: %v); want 300020 each",
				n, o.SpillBytes, res.SpillBytes, k.SpillBytes, k.AlreadyDone)
		}
	})

	t.Run("killed", func(t *testing.T) {
		tk := start(t, e, executor.Request{Command: "head -c 200000 /dev/zero | tr '\\0' b; echo; sleep 100"})
		var acc executor.Output
		readUntil(t, tk, &acc, func(o executor.Output) bool { return len(o.Stdout) == 200_001 })
		if o, _ := tk.Read(ctx); o.Status.State != executor.Running || o.SpillBytes != 0 {
			t.Errorf("while running: %+v, want no spill figure", o)
		}
		k, err := tk.Kill(ctx)
		if err != nil || k.AlreadyDone || k.Status.State != executor.Killed {
			t.Fatalf("kill: %+v %v", k, err)
		}
		o, _ := tk.Read(ctx)
		if n := size(o.SpillPath); n != 200_001 || k.SpillBytes != n || o.SpillBytes != n {
			t.Errorf("spill file %d bytes; Kill says %d, Read %d; want 200001 each", n, k.SpillBytes, o.SpillBytes)
		}
	})

	t.Run("no spill", func(t *testing.T) {
		tk := start(t, e, executor.Request{Command: "echo small"})
		res, err := tk.Wait(ctx)
		if err != nil {
			t.Fatal(err)
		}
		o, _ := tk.Read(ctx)
		if o.SpillPath != "" || o.SpillBytes != 0 || res.SpillBytes != 0 {
			t.Errorf("a task that fits memory: read %+v, wait %+v", o, res)
		}
	})
}
