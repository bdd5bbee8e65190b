package local

import (
	"bytes"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/shellbox/shellbox/executor"
)

func seq(from, to int) string {
	var b strings.Builder
	for i := from; i <= to; i++ {
		fmt.Fprintf(&b, "%d\n", i)
	}
	return b.String()
}

func TestOutputSpill(t *testing.T) {
	t.Parallel()
	e := newExec(t, CgroupAuto, func(c *Config) { c.Limits.TailBytes = 100 })
	spillRE := regexp.MustCompile("^" + regexp.QuoteMeta(e.cfg.SpillDir+"/"+session+"/") + "[0-9a-f]{12}\\.log$")
	tests := []struct {
		name           string
		command        string
		stdout, stderr string // the whole streams
		file           string // the spill file; "" for none
	}{
		{"fits: no file", "seq 1 20; seq 1 5 >&2", seq(1, 20), seq(1, 5), ""},
		{"stdout over the tail", "seq 1 1000", seq(1, 1000), "", seq(1, 1000)},
		{"stderr over the tail", "seq 1 1000 >&2", "", seq(1, 1000), seq(1, 1000)},
		{"both streams fit, together over the tail", "seq 1 25; seq 1 25 >&2", seq(1, 25), seq(1, 25), ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			res := run(t, e, executor.Request{Command: tt.command})
			if want := tail(tt.stdout, 100); res.Stdout != want {
				t.Errorf("stdout tail %q, want %q", res.Stdout, want)
			}
			if want := tail(tt.stderr, 100); res.Stderr != want {
				t.Errorf("stderr tail %q, want %q", res.Stderr, want)
			}
			if res.Truncated != (tt.file != "") || res.SpillError != "" {
				t.Fatalf("Truncated %v SpillError %q", res.Truncated, res.SpillError)
			}
			if tt.file == "" {
				if res.SpillPath != "" {
					t.Errorf("SpillPath %q for output that fits", res.SpillPath)
				}
				return
			}
			if !spillRE.MatchString(res.SpillPath) {
				t.Errorf("SpillPath %q does not match %s", res.SpillPath, spillRE)
			}
			b, err := os.ReadFile(res.SpillPath)
			if err != nil || string(b) != tt.file {
				t.Errorf("spill file holds %q (%v), want %q", b, err, tt.file)
			}
		})
	}
}

func tail(s string, n int) string { return s[max(0, len(s)-n):] }

// TestOutputNoFileForSmallOutput checks that calls that fit write nothing at
// all under the spill directory.
func TestOutputNoFileForSmallOutput(t *testing.T) {
	t.Parallel()
	e := newExec(t, CgroupOff)
	for range 5 {
		run(t, e, executor.Request{Command: "echo hi; echo there >&2"})
	}
	ents, _ := os.ReadDir(e.cfg.SpillDir)
	if len(ents) != 0 {
		t.Errorf("spill directory holds %d entries", len(ents))
	}
}

// TestOutputInterleaved: the spill file has both streams in arrival order.
func TestOutputInterleaved(t *testing.T) {
	t.Parallel()
	e := newExec(t, CgroupOff, func(c *Config) { c.Limits.TailBytes = 50 })
	res := run(t, e, executor.Request{Command: "for i in $(seq 1 200); do echo out$i; echo err$i >&2; done"})
	b, err := os.ReadFile(res.SpillPath)
	if err != nil {
		t.Fatal(err)
	}
	next := map[string]int{"out": 1, "err": 1}
	lines := strings.Split(strings.TrimSuffix(string(b), "\n"), "\n")
	for _, l := range lines {
		var n int
		fmt.Sscanf(l[3:], "%d", &n)
		if n != next[l[:3]] {
			t.Fatalf("line %q out of order", l)
		}
		next[l[:3]]++
	}
	if len(lines) != 400 {
		t.Errorf("%d lines, want 400", len(lines))
	}
}

func TestOutputSpillLimit(t *testing.T) {
	t.Parallel()
	e := newExec(t, CgroupOff, func(c *Config) {
		c.Limits.TailBytes = 100
		c.Limits.SpillLimit = 150
	})
	res := run(t, e, executor.Request{Command: "seq 1 1000"})
	want := fmt.Sprintf("spill limit of 150 bytes reached; the first 150 bytes are in %s", res.SpillPath)
	if res.SpillPath == "" || res.SpillError != want {
		t.Fatalf("SpillPath %q SpillError %q, want %q", res.SpillPath, res.SpillError, want)
	}
	b, _ := os.ReadFile(res.SpillPath)
	if string(b) != seq(1, 1000)[:150] {
		t.Errorf("spill file holds %q", b)
	}
}

func TestOutputSpillUnwritable(t *testing.T) {
	t.Parallel()
	blocker := filepath.Join(t.TempDir(), "file")
	must(t, os.WriteFile(blocker, nil, 0o644))
	e := newExec(t, CgroupOff, func(c *Config) {
		c.Limits.TailBytes = 100
		c.SpillDir = blocker
	})
	res := run(t, e, executor.Request{Command: "seq 1 1000"})
	if want := "mkdir " + blocker + "/" + session + ": not a directory"; res.SpillPath != "" || res.SpillError != want {
		t.Fatalf("SpillPath %q SpillError %q, want none and %q", res.SpillPath, res.SpillError, want)
	}
	if !res.Truncated || res.Stdout != tail(seq(1, 1000), 100) || res.ExitCode != 0 {
		t.Errorf("the command should run normally: %+v", res)
	}
}

// TestOutputHuge runs 100 MB through a call: the server's heap must stay
// small and the spill file must be byte-exact.
func TestOutputHuge(t *testing.T) {
	e := newExec(t, CgroupAuto)
	const size = 100_000_000

	runtime.GC()
	var base runtime.MemStats
	runtime.ReadMemStats(&base)
	var peak uint64
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		var m runtime.MemStats
		for {
			select {
			case <-stop:
				return
			case <-time.After(5 * time.Millisecond):
			}
			runtime.ReadMemStats(&m)
			peak = max(peak, m.HeapAlloc)
		}
	}()
	res := run(t, e, executor.Request{Command: fmt.Sprintf("head -c %d /dev/zero", size)})
	close(stop)
	wg.Wait()

	if growth := int64(peak) - int64(base.HeapAlloc); growth > 32<<20 {
		t.Errorf("heap grew by %d MiB while printing 100 MB", growth>>20)
	}
	t.Logf("heap: base %d KiB, peak %d KiB", base.HeapAlloc>>10, peak>>10)
	if !res.Truncated || len(res.Stdout) != executor.DefaultLimits().TailBytes || strings.Trim(res.Stdout, "\x00") != "" {
		t.Fatalf("Truncated %v, stdout of %d bytes", res.Truncated, len(res.Stdout))
	}
	f, err := os.Open(res.SpillPath)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var n int64
	buf := make([]byte, 1<<20)
	zero := make([]byte, 1<<20)
	for {
		k, err := f.Read(buf)
		if !bytes.Equal(buf[:k], zero[:k]) {
			t.Fatalf("non-zero byte in the spill file near offset %d", n)
		}
		n += int64(k)
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
	}
	if n != size {
		t.Errorf("spill file has %d bytes, want %d", n, size)
	}
	os.Remove(res.SpillPath)
}

// TestOutputLeaderOutputNotLost: output written just before the leader exits
// is all there, even when a leftover holds the pipes.
func TestOutputLeaderOutputNotLost(t *testing.T) {
	t.Parallel()
	e := newExec(t, CgroupAuto)
	res := run(t, e, executor.Request{Command: "sleep 100 & head -c 200000 /dev/zero | tr '\\0' a; echo; echo end"})
	if res.SpillPath == "" {
		t.Fatalf("no spill: %+v", res.SpillError)
	}
	b, _ := os.ReadFile(res.SpillPath)
	if want := strings.Repeat("a", 200000) + "\nend\n"; string(b) != want {
		t.Errorf("spill has %d bytes, want %d", len(b), len(want))
	}
	if !strings.HasSuffix(res.Stdout, "a\nend\n") {
		t.Errorf("stdout tail ends %q", tail(res.Stdout, 10))
	}
}
