package workspace_test

import (
	"context"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"runtime"
	"runtime/debug"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/shellbox/shellbox/agentapi/workspace"
)

// benchMiB is the size of the benchmark's tree: SHELLBOX_BENCH_MIB, or
// 100.
func benchMiB(b *testing.B) int64 {
	if v := os.Getenv("SHELLBOX_BENCH_MIB"); v != "" {
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil || n <= 0 {
			b.Fatalf("SHELLBOX_BENCH_MIB=%q: want a positive number", v)
		}
		return n
	}
	return 100
}

// realTree copies the files of $GOROOT/src (then $GOROOT/pkg, and again,
// until there are enough) into dir until it holds mib MiB: real source,
// real binaries, real names and depths. It returns the bytes copied.
func realTree(b *testing.B, dir string, mib int64) int64 {
	b.Helper()
	goroot := runtime.GOROOT()
	want := mib << 20
	var total int64
	for round := 0; total < want; round++ {
		before := total
		for _, sub := range []string{"src", "pkg", "lib", "misc"} {
			from := filepath.Join(goroot, sub)
			err := filepath.WalkDir(from, func(p string, d fs.DirEntry, err error) error {
				if err != nil || total >= want {
					return filepath.SkipAll
				}
				rel, _ := filepath.Rel(goroot, p)
				to := filepath.Join(dir, strconv.Itoa(round), rel)
				switch {
				case d.IsDir():
					return os.MkdirAll(to, 0o755)
				case !d.Type().IsRegular():
					return nil
				}
				n, err := copyFile(p, to)
				total += n
				return err
			})
			if err != nil {
				b.Fatal(err)
			}
		}
		if total == before {
			b.Fatalf("%s holds no files", goroot)
		}
	}
	return total
}

func copyFile(from, to string) (int64, error) {
	in, err := os.Open(from)
	if err != nil {
		return 0, err
	}
	defer in.Close()
	out, err := os.OpenFile(to, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o644)
	if err != nil {
		return 0, err
	}
	n, err := io.Copy(out, in)
	if cerr := out.Close(); err == nil {
		err = cerr
	}
	return n, err
}

// peakHeap samples the live heap while fn runs and returns its peak above
// the heap before it, in bytes.
func peakHeap(fn func()) uint64 {
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	base := ms.HeapAlloc
	var peak atomic.Uint64
	stop := make(chan struct{})
	done := make(chan struct{})
	go func() {
		defer close(done)
		t := time.NewTicker(5 * time.Millisecond)
		defer t.Stop()
		for {
			select {
			case <-stop:
				return
			case <-t.C:
				var ms runtime.MemStats
				runtime.ReadMemStats(&ms)
				if ms.HeapAlloc > base && ms.HeapAlloc-base > peak.Load() {
					peak.Store(ms.HeapAlloc - base)
				}
			}
		}
	}()
	fn()
	close(stop)
	<-done
	return peak.Load()
}

// BenchmarkPackUnpack packs a tree of real files (a copy of $GOROOT,
// benchMiB MiB) to a file, then unpacks that file into an empty
// directory: MB/s of the tree's bytes, the stream's size, and the heap's
// peak growth during each (sampled every 5 ms, with GOGC at 100).
func BenchmarkPackUnpack(b *testing.B) {
	base := b.TempDir()
	src := filepath.Join(base, "src")
	size := realTree(b, src, benchMiB(b))
	packed := filepath.Join(base, "packed.zst")
	ctx := context.Background()
	// The stream the unpack benchmark reads, whether or not the pack one
	// runs.
	f, err := os.Create(packed)
	if err != nil {
		b.Fatal(err)
	}
	_, err = workspace.Pack(ctx, src, f, workspace.Limits{})
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		b.Fatal(err)
	}

	b.Run("pack", func(b *testing.B) {
		b.SetBytes(size)
		var heap uint64
		var st workspace.Stats
		for b.Loop() {
			f, err := os.Create(packed)
			if err != nil {
				b.Fatal(err)
			}
			heap = max(heap, peakHeap(func() { st, err = workspace.Pack(ctx, src, f, workspace.Limits{}) }))
			if cerr := f.Close(); err == nil {
				err = cerr
			}
			if err != nil {
				b.Fatal(err)
			}
		}
		b.ReportMetric(float64(st.Stream)/float64(size), "stream/tree")
		b.ReportMetric(float64(heap)/(1<<20), "peak-heap-MiB")
	})

	b.Run("unpack", func(b *testing.B) {
		b.SetBytes(size)
		var heap uint64
		for i := 0; b.Loop(); i++ {
			dst := filepath.Join(base, "dst"+strconv.Itoa(i))
			if err := os.Mkdir(dst, 0o700); err != nil {
				b.Fatal(err)
			}
			f, err := os.Open(packed)
			if err != nil {
				b.Fatal(err)
			}
			heap = max(heap, peakHeap(func() { _, err = workspace.Unpack(ctx, f, dst, workspace.Limits{}) }))
			f.Close()
			if err != nil {
				b.Fatal(err)
			}
			b.StopTimer()
			os.RemoveAll(dst)
			b.StartTimer()
		}
		b.ReportMetric(float64(heap)/(1<<20), "peak-heap-MiB")
	})
	debug.FreeOSMemory()
}
