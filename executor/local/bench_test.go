package local_test

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"slices"
	"testing"
	"time"

	"github.com/shellbox/shellbox/agent/landlock"
	"github.com/shellbox/shellbox/executor/local"
	"github.com/shellbox/shellbox/tools"
)

// BenchmarkForegroundInterleaved measures what BenchmarkForegroundTrue of
// executortest does, a foreground `true` through tools and the local executor
// against `bash -c true` started directly, but interleaved: every iteration
// makes one call of each path in turn, so a burst of load on the machine
// (other builds, a noisy neighbour) hits every path alike instead of
// whichever sub-benchmark happened to run then. It reports the p50 of each
// path and each path's p50 overhead over the direct start. Run with
//
//	go test ./executor/local/ -run XXX -bench Interleaved -benchtime 1000x -count 3
func BenchmarkForegroundInterleaved(b *testing.B) {
	type path struct {
		name string
		call func() error
		lat  []time.Duration
	}
	paths := []*path{{name: "bash", call: func() error { return exec.Command("bash", "-c", "true").Run() }}}
	args := json.RawMessage(`{"command":"true","description":"do nothing"}`)
	// Each mode, and v2 and off again with every command started through
	// the per-call Landlock shim (as the agent starts them), for its cost.
	type variant struct {
		mode local.CgroupMode
		shim *os.File
	}
	variants := []variant{{mode: local.CgroupV2}, {mode: local.CgroupV1}, {mode: local.CgroupOff}}
	if shim, err := landlock.Shim(); err != nil {
		b.Logf("no Landlock shim: %v", err)
	} else {
		b.Cleanup(func() { shim.Close() })
		variants = append(variants, variant{local.CgroupV2, shim}, variant{local.CgroupOff, shim})
	}
	for _, v := range variants {
		mode, name := v.mode, string(v.mode)
		if v.shim != nil {
			name += "+landlock"
		}
		e, err := local.New(local.Config{Root: b.TempDir(), SpillDir: b.TempDir(), Cgroup: mode, ExecShim: v.shim})
		if err != nil {
			b.Logf("cgroup mode %s unavailable: %v", mode, err)
			continue
		}
		b.Cleanup(func() { e.Close(context.Background()) })
		ts, err := tools.New(e, tools.Config{})
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(ts.Close)
		paths = append(paths, &path{name: name, call: func() error {
			r := ts.Call(context.Background(), tools.Invocation{Session: "bench", Tool: "bash", Args: args})
			if r.IsError || r.Text != "(no output)" {
				return fmt.Errorf("got %q", r.Text)
			}
			return nil
		}})
	}
	for _, p := range paths {
		p.lat = make([]time.Duration, 0, b.N)
	}
	for b.Loop() {
		for _, p := range paths {
			t0 := time.Now()
			if err := p.call(); err != nil {
				b.Fatalf("%s: %v", p.name, err)
			}
			p.lat = append(p.lat, time.Since(t0))
		}
	}
	var base float64
	for _, p := range paths {
		slices.Sort(p.lat)
		p50 := float64(p.lat[len(p.lat)/2].Microseconds()) / 1000
		b.ReportMetric(p50, "p50-ms-"+p.name)
		if p.name == "bash" {
			base = p50
		} else {
			b.ReportMetric(100*(p50/base-1), "%-over-bash-"+p.name)
		}
	}
}
