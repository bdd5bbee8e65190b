package executortest

import (
	"fmt"
	"runtime"
	"strings"
	"sync"
	"time"

	"github.com/shellbox/shellbox/executor"
	"github.com/shellbox/shellbox/tools"
)

// The memory scenarios push more output through the executor than it may
// keep (memory per task is bounded whatever the command prints:
// docs/architecture.md#execution-semantics-every-executor).
// They run alone, before the parallel groups, so the heap they sample is
// theirs.

func memoryScenarios() []scenario {
	return []scenario{
		{name: "foreground_100MB", run: memForeground},
		{name: "background_64MB", run: memBackground},
	}
}

// measure runs f while sampling the executor's memory, and returns how far
// it rose above where it started; ok is false when the harness gives no way
// to measure.
func (s *session) measure(f func()) (growth uint64, ok bool) {
	h := s.suite.h
	var probe func() uint64
	switch {
	case h.InProcess:
		probe = func() uint64 {
			var ms runtime.MemStats
			runtime.ReadMemStats(&ms)
			return ms.HeapAlloc
		}
		runtime.GC()
	case h.MemoryProbe != nil:
		probe = h.MemoryProbe
	default:
		f()
		return 0, false
	}
	base := probe()
	peak := base
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() {
		tick := time.NewTicker(5 * time.Millisecond)
		defer tick.Stop()
		for {
			select {
			case <-stop:
				return
			case <-tick.C:
				peak = max(peak, probe())
			}
		}
	})
	f()
	close(stop)
	wg.Wait()
	peak = max(peak, probe())
	return peak - base, true
}

func (s *session) checkGrowth(growth uint64, ok bool, what string) {
	if !ok {
		s.t.Logf("memory not measured: the harness is neither InProcess nor has a MemoryProbe")
		return
	}
	s.t.Logf("memory grew by %.1f MiB during %s", float64(growth)/(1<<20), what)
	if growth >= heapBound {
		s.t.Errorf("memory grew by %.1f MiB during %s, bound %d MiB: output is being accumulated", float64(growth)/(1<<20), what, heapBound>>20)
	}
}

// memForeground: 100 MB of 'a' through a foreground call with the default
// tail. The result keeps exactly the last 30000 bytes; the spill file has all
// 100000000, all 'a'.
func memForeground(s *session) {
	const n = 100_000_000
	var r tools.Result
	growth, ok := s.measure(func() {
		r = s.call(tools.ToolBash, bashArgs(fmt.Sprintf(`head -c %d /dev/zero | tr '\0' a`, n)))
	})
	s.checkGrowth(growth, ok, "a 100 MB foreground call")
	fg, isFg := r.Value.(*tools.Foreground)
	if !isFg {
		s.t.Fatalf("want a foreground result, got %T:\n%s", r.Value, clip(r.Text))
	}
	checkForeground(s.t, r, fgWant{truncated: true})
	tail := s.in.lim.TailBytes
	if want := strings.Repeat("a", tail) + "\n[output truncated; full output: " + fg.SpillPath + "]"; r.Text != want {
		s.t.Errorf("text: %d bytes, want %d 'a's and the truncation marker:\n%s", len(r.Text), tail, diff(want, r.Text))
	}
	if fg.SpillPath == "" {
		s.t.Fatalf("no spill path (spill error %q)", fg.SpillError)
	}
	if fg.SpillBytes != n {
		s.t.Errorf("SpillBytes %d, want %d", fg.SpillBytes, n)
	}
	checkOutput(s.t, s, fmt.Sprintf("wc -c < %[1]s; tr -d a < %[1]s | wc -c", fg.SpillPath), fmt.Sprintf("%d\n0\n", n))
}

// memBackground: 64 MB of 'b' through a background task nobody reads while
// it runs. The one read gets the newest bytes still in memory and counts the
// rest as lost; the spill file has everything.
func memBackground(s *session) {
	const n = 64_000_000
	r := s.call(tools.ToolBash, bgArgs(fmt.Sprintf(`head -c %d /dev/zero | tr '\0' b`, n)))
	bg, isBg := r.Value.(*tools.Background)
	if !isBg {
		s.t.Fatalf("want a background start, got %T:\n%s", r.Value, r.Text)
	}
	var o *tools.TaskOutput
	growth, ok := s.measure(func() {
		s.waitNotice(bg.TaskID)
		o, r = s.read(bg.TaskID)
	})
	s.checkGrowth(growth, ok, "a 64 MB background task and its read")
	if o.Status != (executor.Status{State: executor.Completed}) {
		s.t.Errorf("status %+v, want completed 0", o.Status)
	}
	if o.Stdout == "" || strings.Trim(o.Stdout, "b") != "" || int64(len(o.Stdout))+o.Lost != n {
		s.t.Errorf("read %d bytes (all 'b': %v) and lost %d, of %d", len(o.Stdout), strings.Trim(o.Stdout, "b") == "", o.Lost, n)
	}
	want := fmt.Sprintf("%s\n[output lost: %d bytes not kept in memory; full output: %s]\nstatus: completed, exit code: 0", o.Stdout, o.Lost, o.SpillPath)
	if r.Text != want {
		s.t.Errorf("text:\n%s", diff(want, r.Text))
	}
	if o.SpillPath == "" {
		s.t.Fatalf("no spill path (spill error %q)", o.SpillError)
	}
	checkOutput(s.t, s, fmt.Sprintf("wc -c < %[1]s; tr -d b < %[1]s | wc -c", o.SpillPath), fmt.Sprintf("%d\n0\n", n))
}
