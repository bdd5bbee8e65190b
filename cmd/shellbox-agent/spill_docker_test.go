package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/shellbox/shellbox/agentapi"
	"github.com/shellbox/shellbox/executor"
)

// TestDockerSpillSpace: a session whose spill space is a 64 MiB tmpfs (as
// sandbox/hostdir mounts it) writes 1 GB of large results, 40 × 25 MB: every
// result's spill file is whole when the result names it, none fails with
// ENOSPC, and a background task whose spill was deleted for newer output
// says so when read.
func TestDockerSpillSpace(t *testing.T) {
	cli := engine(t)
	const space = 64 << 20
	sb := newSandboxPrep(t, cli, "runc", 256<<20, agentapi.PidsCgroupLimit(256), func(hostDir string) {
		dir := filepath.Join(hostDir, "spill")
		if err := os.Mkdir(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		if err := unix.Mount("tmpfs", dir, "tmpfs", unix.MS_NOSUID|unix.MS_NODEV|unix.MS_NOEXEC, fmt.Sprintf("size=%d,mode=0755", space)); err != nil {
			t.Fatalf("mount the spill tmpfs: %v", err)
		}
		t.Cleanup(func() { unix.Unmount(dir, unix.MNT_DETACH) })
	})
	ctx := context.Background()
	const size = 25_000_000
	gen := fmt.Sprintf("head -c %d /dev/zero | tr '\\0' x", size)
	old, err := sb.agent.Start(ctx, spec(executor.Request{Command: gen, Background: true}))
	if err != nil {
		t.Fatal(err)
	}
	wctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	if _, err := old.Wait(wctx); err != nil {
		t.Fatal(err)
	}
	var first string
	for i := range 40 {
		res := sb.run(gen, time.Minute)
		if !res.Truncated || res.SpillPath == "" || res.SpillError != "" {
			t.Fatalf("result %d: truncated %v, spill %q, spill error %q", i, res.Truncated, res.SpillPath, res.SpillError)
		}
		if got := sb.run("wc -c < "+res.SpillPath, 0).Stdout; got != fmt.Sprintf("%d\n", size) {
			t.Fatalf("result %d: the spill file holds %q bytes, want %d", i, got, size)
		}
		if i == 0 {
			first = res.SpillPath
		}
	}
	if got := sb.run("test -e "+first+" && echo kept || echo gone", 0).Stdout; got != "gone\n" {
		t.Errorf("the first result's spill after 1 GB more: %q, want it evicted", got)
	}
	o, err := old.Read(ctx)
	if err != nil {
		t.Fatal(err)
	}
	want := fmt.Sprintf("%s was deleted to make room for newer output (the session's spill space is %d bytes)", o.SpillPath, space)
	if o.SpillError != want || o.Lost == 0 || !strings.HasPrefix(o.SpillPath, "/run/shellbox/spill/") {
		t.Errorf("the old task's read: lost %d, spill %q, spill error %q; want %q", o.Lost, o.SpillPath, o.SpillError, want)
	}
}
