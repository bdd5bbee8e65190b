// Package snapshottest is the conformance suite every snapshot.Store runs,
// unchanged: the Dir store and the S3 store keep the same promises (commit
// only when whole, verify on read, names per tenant and session), and a
// session suspended on one must resume the same from the other.
//
// An implementation provides a Harness and calls Run from a test; Bench
// measures its throughput.
package snapshottest

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"runtime"
	"runtime/metrics"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/shellbox/shellbox/errdefs"
	"github.com/shellbox/shellbox/sandbox/snapshot"
)

// Harness is what an implementation provides.
type Harness struct {
	// New returns an empty store of its own (a new directory, a new key
	// prefix), cleaned up with t.Cleanup.
	New func(t *testing.T) snapshot.Store
	// Corrupt changes one byte of a committed snapshot's stored bytes,
	// behind the store's back.
	Corrupt func(t *testing.T, s snapshot.Store, info snapshot.Info)
	// Truncate cuts a committed snapshot's stored bytes to n, behind the
	// store's back.
	Truncate func(t *testing.T, s snapshot.Store, info snapshot.Info, n int64)
	// Plant leaves in s what a Put that crashed midway leaves behind (a
	// temporary of (tenant, session)), and says how many leftovers Sweep
	// is to find for it.
	Plant func(t *testing.T, s snapshot.Store, tenant, session string) int
	// Reopen, if set, opens another store on s's backing (the same
	// directory, the same bucket and prefix), as another process would:
	// the SwapRecord race runs one per racer.
	Reopen func(t *testing.T, s snapshot.Store) snapshot.Store
	// PartSize is the store's unit of upload, if it has one (S3): the
	// failure cases cut streams after more than one part.
	PartSize int64
}

// Run runs every case against h's stores.
func Run(t *testing.T, h Harness) {
	cases := []struct {
		name string
		f    func(*testing.T, Harness)
	}{
		{"RoundTrip", testRoundTrip},
		{"Empty", testEmpty},
		{"FailedPutKeepsPrevious", testFailedPut},
		{"CancelledPutKeepsPrevious", testCancelledPut},
		{"CorruptRefused", testCorrupt},
		{"TruncatedRefused", testTruncated},
		{"ListNewestFirst", testListOrder},
		{"Delete", testDelete},
		{"TenantIsolation", testIsolation},
		{"InvalidNames", testInvalidNames},
		{"Sweep", testSweep},
		{"BoundedMemory", testBoundedMemory},
		{"Records", testRecords},
		{"SwapRecord", testSwapRecord},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) { c.f(t, h) })
	}
}

// ctx is a case's context: bounded, so a hung store fails the case.
func ctx(t *testing.T) context.Context {
	c, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	t.Cleanup(cancel)
	return c
}

// random returns n random bytes.
func random(t testing.TB, n int) []byte {
	b := make([]byte, n)
	if _, err := rand.Read(b); err != nil {
		t.Fatal(err)
	}
	return b
}

func sum(b []byte) string {
	s := sha256.Sum256(b)
	return hex.EncodeToString(s[:])
}

// put commits data and checks the Info it gets back.
func put(t *testing.T, s snapshot.Store, tenant, session string, data []byte) snapshot.Info {
	t.Helper()
	before := time.Now()
	info, err := s.Put(ctx(t), tenant, session, bytes.NewReader(data))
	if err != nil {
		t.Fatalf("Put %s/%s: %v", tenant, session, err)
	}
	if info.Tenant != tenant || info.Session != session || info.ID == "" {
		t.Fatalf("Put %s/%s: Info %+v", tenant, session, info)
	}
	if info.Size != int64(len(data)) || info.SHA256 != sum(data) {
		t.Fatalf("Put: Info says %d bytes, sha256 %s; put %d bytes, sha256 %s", info.Size, info.SHA256, len(data), sum(data))
	}
	if info.Created.Before(before.Add(-time.Second)) || info.Created.After(time.Now().Add(time.Second)) {
		t.Fatalf("Put: Created %v, not the time of the Put (%v)", info.Created, before)
	}
	return info
}

// read reads a snapshot to its end, returning what came and the error in
// place of io.EOF (nil for a verified end).
func read(t *testing.T, s snapshot.Store, tenant, session, id string) ([]byte, snapshot.Info, error) {
	t.Helper()
	rc, info, err := s.Get(ctx(t), tenant, session, id)
	if err != nil {
		return nil, info, err
	}
	defer rc.Close()
	b, err := io.ReadAll(rc)
	return b, info, err
}

// mustRead reads a snapshot that must come back verified and equal to want.
func mustRead(t *testing.T, s snapshot.Store, info snapshot.Info, want []byte) {
	t.Helper()
	got, ginfo, err := read(t, s, info.Tenant, info.Session, info.ID)
	if err != nil {
		t.Fatalf("Get %s: %v", info.ID, err)
	}
	if !bytes.Equal(got, want) {
		t.Fatalf("Get %s: %d bytes back (sha256 %s), want %d (sha256 %s)", info.ID, len(got), sum(got), len(want), sum(want))
	}
	if !ginfo.Created.Equal(info.Created) || ginfo.Size != info.Size || ginfo.SHA256 != info.SHA256 || ginfo.ID != info.ID {
		t.Fatalf("Get's Info %+v, Put's %+v", ginfo, info)
	}
}

func list(t *testing.T, s snapshot.Store, tenant, session string) []snapshot.Info {
	t.Helper()
	infos, err := s.List(ctx(t), tenant, session)
	if err != nil {
		t.Fatalf("List %s/%s: %v", tenant, session, err)
	}
	return infos
}

// ids lists the ids of infos, in order.
func ids(infos []snapshot.Info) []string {
	out := make([]string, len(infos))
	for i, in := range infos {
		out[i] = in.ID
	}
	return out
}

// noLeftovers checks a Sweep of everything finds nothing: a failed Put
// cleaned up after itself.
func noLeftovers(t *testing.T, s snapshot.Store) {
	t.Helper()
	swept, err := s.Sweep(ctx(t), time.Now().Add(time.Hour))
	if err != nil {
		t.Fatalf("Sweep: %v", err)
	}
	if len(swept) != 0 {
		t.Fatalf("a failed Put left %d temporaries for Sweep: %+v", len(swept), swept)
	}
}

func testRoundTrip(t *testing.T, h Harness) {
	s := h.New(t)
	data := random(t, 6<<20+12345)
	info := put(t, s, "t1", "s1", data)
	mustRead(t, s, info, data)
	got := list(t, s, "t1", "s1")
	if len(got) != 1 || got[0] != info {
		t.Fatalf("List: %+v, want [%+v]", got, info)
	}
}

func testEmpty(t *testing.T, h Harness) {
	s := h.New(t)
	if got := list(t, s, "t1", "never"); got == nil || len(got) != 0 {
		t.Fatalf("List of a session with no snapshots: %#v, want an empty list", got)
	}
	info := put(t, s, "t1", "s1", nil)
	mustRead(t, s, info, nil)
}

// failAfter yields n bytes of data, then fails with err.
type failAfter struct {
	r   io.Reader
	n   int64
	err error
}

func (f *failAfter) Read(b []byte) (int, error) {
	if f.n <= 0 {
		return 0, f.err
	}
	if int64(len(b)) > f.n {
		b = b[:f.n]
	}
	n, err := f.r.Read(b)
	f.n -= int64(n)
	return n, err
}

// cut is where the failure cases stop a stream: past a part or two.
func cut(h Harness) int64 {
	if h.PartSize > 0 {
		return 2*h.PartSize + 4096
	}
	return 3<<20 + 4096
}

func testFailedPut(t *testing.T, h Harness) {
	s := h.New(t)
	prev := random(t, 1<<20)
	first := put(t, s, "t1", "s1", prev)
	boom := errors.New("the workspace stream broke")
	src := &failAfter{r: bytes.NewReader(random(t, int(cut(h))+(1<<20))), n: cut(h), err: boom}
	_, err := s.Put(ctx(t), "t1", "s1", src)
	if !errors.Is(err, boom) {
		t.Fatalf("Put of a stream that fails: %v, want the stream's error", err)
	}
	if got := list(t, s, "t1", "s1"); len(got) != 1 || got[0] != first {
		t.Fatalf("after a failed Put, List: %+v, want only the previous snapshot %s", got, first.ID)
	}
	mustRead(t, s, first, prev)
	noLeftovers(t, s)
}

// cancelAfter yields random bytes and cancels a context once n are read;
// it keeps yielding after that, so only the store can stop the Put.
type cancelAfter struct {
	n      int64
	cancel context.CancelFunc
	block  []byte
}

func (c *cancelAfter) Read(b []byte) (int, error) {
	n := copy(b, c.block)
	c.n -= int64(n)
	if c.n <= 0 {
		c.cancel()
	}
	return n, nil
}

func testCancelledPut(t *testing.T, h Harness) {
	s := h.New(t)
	prev := random(t, 1<<20)
	first := put(t, s, "t1", "s1", prev)
	cctx, cancel := context.WithCancel(ctx(t))
	defer cancel()
	done := make(chan error, 1)
	go func() {
		_, err := s.Put(cctx, "t1", "s1", &cancelAfter{n: cut(h), cancel: cancel, block: random(t, 64<<10)})
		done <- err
	}()
	select {
	case err := <-done:
		if !errors.Is(err, context.Canceled) {
			t.Fatalf("Put cancelled midway: %v, want context.Canceled", err)
		}
	case <-time.After(2 * time.Minute):
		t.Fatal("Put did not return within 2 minutes of its context's cancellation")
	}
	if got := list(t, s, "t1", "s1"); len(got) != 1 || got[0] != first {
		t.Fatalf("after a cancelled Put, List: %+v, want only the previous snapshot %s", got, first.ID)
	}
	mustRead(t, s, first, prev)
	noLeftovers(t, s)
}

// refused reads a snapshot that must fail its check, and returns the error.
func refused(t *testing.T, s snapshot.Store, info snapshot.Info) error {
	t.Helper()
	_, _, err := read(t, s, info.Tenant, info.Session, info.ID)
	if err == nil {
		t.Fatalf("Get %s: read to a clean EOF, want ErrCorrupt", info.ID)
	}
	if !errors.Is(err, snapshot.ErrCorrupt) {
		t.Fatalf("Get %s: %v, want ErrCorrupt", info.ID, err)
	}
	return err
}

func testCorrupt(t *testing.T, h Harness) {
	s := h.New(t)
	prev := random(t, 2<<20)
	first := put(t, s, "t1", "s1", prev)
	second := put(t, s, "t1", "s1", random(t, 3<<20))
	h.Corrupt(t, s, second)
	if err := refused(t, s, second); !strings.Contains(err.Error(), "sha256") {
		t.Fatalf("corrupt snapshot: %v, want the checksum named", err)
	}
	// The corrupt one is still listed, first; the one before it restores.
	got := list(t, s, "t1", "s1")
	if len(got) != 2 || got[0].ID != second.ID || got[1] != first {
		t.Fatalf("List: %v, want [%s %s]", ids(got), second.ID, first.ID)
	}
	mustRead(t, s, got[1], prev)
}

func testTruncated(t *testing.T, h Harness) {
	s := h.New(t)
	info := put(t, s, "t1", "s1", random(t, 3<<20))
	h.Truncate(t, s, info, 1<<20)
	if err := refused(t, s, info); !strings.Contains(err.Error(), "truncated") {
		t.Fatalf("truncated snapshot: %v, want it called truncated", err)
	}
	h.Truncate(t, s, info, 0)
	refused(t, s, info)
}

func testListOrder(t *testing.T, h Harness) {
	s := h.New(t)
	var want []string
	for i := range 4 {
		info := put(t, s, "t1", "s1", random(t, 1000+i))
		want = append([]string{info.ID}, want...)
	}
	put(t, s, "t1", "other", []byte("another session"))
	got := list(t, s, "t1", "s1")
	if strings.Join(ids(got), " ") != strings.Join(want, " ") {
		t.Fatalf("List: %v, want newest first %v", ids(got), want)
	}
	for i := 1; i < len(got); i++ {
		if got[i].Created.After(got[i-1].Created) {
			t.Fatalf("List: %s created after %s, listed after it", got[i].ID, got[i-1].ID)
		}
	}
}

func testDelete(t *testing.T, h Harness) {
	s := h.New(t)
	c := ctx(t)
	oldData := random(t, 2000)
	old := put(t, s, "t1", "s1", oldData)
	newer := put(t, s, "t1", "s1", random(t, 3000))
	other := put(t, s, "t1", "s2", []byte("s2's"))
	if err := s.Delete(c, "t1", "s1", newer.ID); err != nil {
		t.Fatalf("Delete: %v", err)
	}
	if got := list(t, s, "t1", "s1"); len(got) != 1 || got[0] != old {
		t.Fatalf("after Delete, List: %v, want [%s]", ids(got), old.ID)
	}
	if _, _, err := s.Get(c, "t1", "s1", newer.ID); !errors.Is(err, errdefs.ErrNotFound) {
		t.Fatalf("Get of a deleted snapshot: %v, want ErrNotFound", err)
	}
	if err := s.Delete(c, "t1", "s1", newer.ID); err != nil {
		t.Fatalf("Delete again: %v, want nil (idempotent)", err)
	}
	mustRead(t, s, old, oldData)
	if err := s.DeleteSession(c, "t1", "s1"); err != nil {
		t.Fatalf("DeleteSession: %v", err)
	}
	if got := list(t, s, "t1", "s1"); len(got) != 0 {
		t.Fatalf("after DeleteSession, List: %v", ids(got))
	}
	if _, _, err := s.Get(c, "t1", "s1", old.ID); !errors.Is(err, errdefs.ErrNotFound) {
		t.Fatalf("Get after DeleteSession: %v, want ErrNotFound", err)
	}
	if err := s.DeleteSession(c, "t1", "s1"); err != nil {
		t.Fatalf("DeleteSession again: %v, want nil (idempotent)", err)
	}
	mustRead(t, s, other, []byte("s2's"))
	// The session can start over.
	again := put(t, s, "t1", "s1", []byte("again"))
	mustRead(t, s, again, []byte("again"))
}

func testIsolation(t *testing.T, h Harness) {
	s := h.New(t)
	c := ctx(t)
	data := []byte("tenant A's workspace")
	a := put(t, s, "tenant-a", "s1", data)
	// B names A's snapshot exactly: same session id, same snapshot id.
	if _, _, err := s.Get(c, "tenant-b", "s1", a.ID); !errors.Is(err, errdefs.ErrNotFound) {
		t.Fatalf("tenant B's Get of A's snapshot id: %v, want ErrNotFound", err)
	}
	if got := list(t, s, "tenant-b", "s1"); len(got) != 0 {
		t.Fatalf("tenant B lists %v in A's session name", ids(got))
	}
	if err := s.Delete(c, "tenant-b", "s1", a.ID); err != nil {
		t.Fatalf("tenant B's Delete: %v", err)
	}
	if err := s.DeleteSession(c, "tenant-b", "s1"); err != nil {
		t.Fatalf("tenant B's DeleteSession: %v", err)
	}
	if _, _, err := s.Get(c, "tenant-a", "s2", a.ID); !errors.Is(err, errdefs.ErrNotFound) {
		t.Fatalf("Get of s1's snapshot as s2's: %v, want ErrNotFound", err)
	}
	mustRead(t, s, a, data)
	// Names that differ only in case or by a prefix are other tenants.
	for _, other := range []string{"Tenant-a", "tenant-a.", "tenant"} {
		if _, _, err := s.Get(c, other, "s1", a.ID); !errors.Is(err, errdefs.ErrNotFound) {
			t.Fatalf("tenant %q's Get of tenant-a's snapshot: %v, want ErrNotFound", other, err)
		}
	}
}

// neverRead fails the test if a Put reads it.
type neverRead struct{ t *testing.T }

func (n neverRead) Read([]byte) (int, error) {
	n.t.Error("Put read the stream of an invalid name")
	return 0, io.EOF
}

func testInvalidNames(t *testing.T, h Harness) {
	s := h.New(t)
	c := ctx(t)
	valid := put(t, s, "t1", "s1", []byte("x"))
	bad := []string{"", ".", "..", "../t1", "a/b", "/abs", ".hidden", "-dash", "a\x00b", "a b", "tenant\n", strings.Repeat("x", 65)}
	for _, b := range bad {
		for _, p := range [][2]string{{b, "s1"}, {"t1", b}} {
			tenant, session := p[0], p[1]
			if _, err := s.Put(c, tenant, session, neverRead{t}); !errors.Is(err, errdefs.ErrInvalid) {
				t.Errorf("Put(%q, %q): %v, want ErrInvalid", tenant, session, err)
			}
			if _, _, err := s.Get(c, tenant, session, valid.ID); !errors.Is(err, errdefs.ErrInvalid) {
				t.Errorf("Get(%q, %q): %v, want ErrInvalid", tenant, session, err)
			}
			if _, err := s.List(c, tenant, session); !errors.Is(err, errdefs.ErrInvalid) {
				t.Errorf("List(%q, %q): %v, want ErrInvalid", tenant, session, err)
			}
			if err := s.Delete(c, tenant, session, valid.ID); !errors.Is(err, errdefs.ErrInvalid) {
				t.Errorf("Delete(%q, %q): %v, want ErrInvalid", tenant, session, err)
			}
			if err := s.DeleteSession(c, tenant, session); !errors.Is(err, errdefs.ErrInvalid) {
				t.Errorf("DeleteSession(%q, %q): %v, want ErrInvalid", tenant, session, err)
			}
		}
	}
	badIDs := append(bad, "../s2/"+valid.ID, valid.ID+"/..", valid.ID+".snap", valid.ID[:len(valid.ID)-6]+"ABCDEF", "latest")
	for _, id := range badIDs {
		if _, _, err := s.Get(c, "t1", "s1", id); !errors.Is(err, errdefs.ErrInvalid) {
			t.Errorf("Get(id %q): %v, want ErrInvalid", id, err)
		}
		if err := s.Delete(c, "t1", "s1", id); !errors.Is(err, errdefs.ErrInvalid) {
			t.Errorf("Delete(id %q): %v, want ErrInvalid", id, err)
		}
	}
	if _, err := s.Put(c, "t1", strings.Repeat("s", 64), bytes.NewReader([]byte("64 bytes is the bound"))); err != nil {
		t.Errorf("Put with a 64-byte session id: %v", err)
	}
	if _, err := s.Put(c, "t1", "a.b_c@d:e-f", bytes.NewReader([]byte("every allowed sign"))); err != nil {
		t.Errorf("Put with every allowed sign: %v", err)
	}
	mustRead(t, s, valid, []byte("x"))
}

func testSweep(t *testing.T, h Harness) {
	s := h.New(t)
	c := ctx(t)
	data := random(t, 1<<20)
	info := put(t, s, "t1", "s1", data)
	planted := h.Plant(t, s, "t1", "s1") + h.Plant(t, s, "t2", "s9")
	if swept, err := s.Sweep(c, time.Now().Add(-time.Hour)); err != nil || len(swept) != 0 {
		t.Fatalf("Sweep of leftovers older than an hour: %+v, %v; want none (the planted ones are new)", swept, err)
	}
	swept, err := s.Sweep(c, time.Now().Add(time.Minute))
	if err != nil {
		t.Fatalf("Sweep: %v", err)
	}
	if len(swept) != planted {
		t.Fatalf("Sweep removed %d: %+v; want the %d planted", len(swept), swept, planted)
	}
	for _, l := range swept {
		if strings.Contains(l.Name, info.ID) {
			t.Fatalf("Sweep removed %s, part of committed snapshot %s", l.Name, info.ID)
		}
	}
	if swept, err := s.Sweep(c, time.Now().Add(time.Minute)); err != nil || len(swept) != 0 {
		t.Fatalf("second Sweep: %+v, %v; want none (idempotent)", swept, err)
	}
	mustRead(t, s, info, data)
}

// Generator yields n bytes that do not repeat (a block of random bytes with
// a counter in each 4 KiB), cheaply: the store's work is what is measured.
type Generator struct {
	n, off int64
	block  []byte
}

// NewGenerator returns a Generator of n bytes.
func NewGenerator(n int64) *Generator {
	g := &Generator{n: n, block: make([]byte, 1<<20)}
	_, _ = rand.Read(g.block)
	return g
}

func (g *Generator) Read(b []byte) (int, error) {
	if g.off >= g.n {
		return 0, io.EOF
	}
	if rest := g.n - g.off; int64(len(b)) > rest {
		b = b[:rest]
	}
	start := int(g.off % int64(len(g.block)))
	n := copy(b, g.block[start:])
	for i := (4096 - start%4096) % 4096; i+8 <= n; i += 4096 {
		binary.LittleEndian.PutUint64(b[i:], uint64(g.off)+uint64(i))
	}
	g.off += int64(n)
	return n, nil
}

// memoryBound is what a Put of a large stream may add to the heap: it
// streams, never holding the whole. Dir holds one 256 KiB buffer; S3 one
// part (16 MiB by default), about twice that with the collector's slack
// (2026-12-06: Dir 1.3 MiB, S3 33 MiB for 256 MiB).
const memoryBound = 64 << 20

// heapSampler records the peak of the heap's object bytes (live and not
// yet swept) while it runs.
type heapSampler struct {
	stop chan struct{}
	done sync.WaitGroup
	peak uint64
}

func heapObjects() uint64 {
	s := []metrics.Sample{{Name: "/memory/classes/heap/objects:bytes"}}
	metrics.Read(s)
	return s[0].Value.Uint64()
}

func startSampler() *heapSampler {
	h := &heapSampler{stop: make(chan struct{})}
	h.done.Add(1)
	go func() {
		defer h.done.Done()
		tick := time.NewTicker(5 * time.Millisecond)
		defer tick.Stop()
		for {
			h.peak = max(h.peak, heapObjects())
			select {
			case <-h.stop:
				return
			case <-tick.C:
			}
		}
	}()
	return h
}

func (h *heapSampler) end() uint64 {
	close(h.stop)
	h.done.Wait()
	return h.peak
}

func testBoundedMemory(t *testing.T, h Harness) {
	if testing.Short() {
		t.Skip("-short: a 256 MiB put")
	}
	s := h.New(t)
	const size = 256 << 20
	runtime.GC()
	base := heapObjects()
	sampler := startSampler()
	info, err := s.Put(ctx(t), "t1", "big", NewGenerator(size))
	peak := sampler.end()
	if err != nil {
		t.Fatalf("Put of 256 MiB: %v", err)
	}
	if info.Size != size {
		t.Fatalf("Put of 256 MiB: Info.Size %d", info.Size)
	}
	grew := int64(peak) - int64(base)
	t.Logf("Put of 256 MiB: the heap grew by %.1f MiB at most (bound %d MiB)", float64(grew)/(1<<20), memoryBound>>20)
	if grew > memoryBound {
		t.Fatalf("Put of 256 MiB grew the heap by %.1f MiB, over the %d MiB bound: it does not stream", float64(grew)/(1<<20), memoryBound>>20)
	}
	// Read it back through the verifier, with the same bound.
	rc, _, err := s.Get(ctx(t), "t1", "big", info.ID)
	if err != nil {
		t.Fatalf("Get: %v", err)
	}
	defer rc.Close()
	runtime.GC()
	base = heapObjects()
	sampler = startSampler()
	n, err := io.Copy(io.Discard, rc)
	peak = sampler.end()
	if err != nil || n != size {
		t.Fatalf("Get of 256 MiB: %d bytes, %v", n, err)
	}
	if grew := int64(peak) - int64(base); grew > memoryBound {
		t.Fatalf("Get of 256 MiB grew the heap by %.1f MiB, over the %d MiB bound", float64(grew)/(1<<20), memoryBound>>20)
	}
}

// Bench measures a Put and a Get of size bytes from a Generator, reporting
// MB/s (b.SetBytes). Timing belongs here, never in Run's pass or fail.
func Bench(b *testing.B, s snapshot.Store, size int64) {
	b.Run("Put", func(b *testing.B) {
		b.SetBytes(size)
		for b.Loop() {
			info, err := s.Put(context.Background(), "bench", "put", NewGenerator(size))
			if err != nil {
				b.Fatal(err)
			}
			b.StopTimer()
			if err := s.Delete(context.Background(), "bench", "put", info.ID); err != nil {
				b.Fatal(err)
			}
			b.StartTimer()
		}
	})
	b.Run("Get", func(b *testing.B) {
		info, err := s.Put(context.Background(), "bench", "get", NewGenerator(size))
		if err != nil {
			b.Fatal(err)
		}
		b.SetBytes(size)
		for b.Loop() {
			rc, _, err := s.Get(context.Background(), "bench", "get", info.ID)
			if err != nil {
				b.Fatal(err)
			}
			if _, err := io.Copy(io.Discard, rc); err != nil {
				b.Fatal(err)
			}
			rc.Close()
		}
	})
}

func testRecords(t *testing.T, h Harness) {
	s := h.New(t)
	c := ctx(t)
	if _, _, err := s.Record(c, "t1", "s1"); !errors.Is(err, errdefs.ErrNotFound) {
		t.Fatalf("Record of a session with none: %v, want ErrNotFound", err)
	}
	if got, err := s.Records(c, ""); err != nil || len(got) != 0 {
		t.Fatalf("Records of an empty store: %v, %v", got, err)
	}
	snap := put(t, s, "t1", "s1", []byte("files"))
	for _, rec := range []string{`{"state":"suspended"}`, `{"state":"running","v":2}`} {
		if err := s.SetRecord(c, "t1", "s1", []byte(rec)); err != nil {
			t.Fatalf("SetRecord: %v", err)
		}
		got, _, err := s.Record(c, "t1", "s1")
		if err != nil || string(got) != rec {
			t.Fatalf("Record after SetRecord(%s): %q, %v", rec, got, err)
		}
	}
	if err := s.SetRecord(c, "t1", "s2", []byte("two")); err != nil {
		t.Fatalf("SetRecord: %v", err)
	}
	if err := s.SetRecord(c, "t2", "s1", []byte("other tenant")); err != nil {
		t.Fatalf("SetRecord: %v", err)
	}
	// A record is not a snapshot, and a snapshot is no record.
	if got := list(t, s, "t1", "s1"); len(got) != 1 || got[0] != snap {
		t.Fatalf("List beside a record: %v, want [%s]", ids(got), snap.ID)
	}
	recs := func(tenant string) map[string]string {
		t.Helper()
		got, err := s.Records(c, tenant)
		if err != nil {
			t.Fatalf("Records(%q): %v", tenant, err)
		}
		m := map[string]string{}
		for _, r := range got {
			m[r.Tenant+"/"+r.Session] = string(r.Data)
		}
		return m
	}
	all := recs("")
	if len(all) != 3 || all["t1/s1"] != `{"state":"running","v":2}` || all["t1/s2"] != "two" || all["t2/s1"] != "other tenant" {
		t.Fatalf("Records(\"\"): %v", all)
	}
	if one := recs("t2"); len(one) != 1 || one["t2/s1"] != "other tenant" {
		t.Fatalf("Records(t2): %v", one)
	}
	if none := recs("t3"); len(none) != 0 {
		t.Fatalf("Records(t3): %v", none)
	}
	// Bounded, named.
	if err := s.SetRecord(c, "t1", "s1", make([]byte, snapshot.MaxRecord+1)); !errors.Is(err, errdefs.ErrInvalid) {
		t.Fatalf("SetRecord past MaxRecord: %v, want ErrInvalid", err)
	}
	if got, _, _ := s.Record(c, "t1", "s1"); string(got) != `{"state":"running","v":2}` {
		t.Fatalf("a refused SetRecord changed the record: %q", got)
	}
	for _, bad := range [][2]string{{"../t", "s"}, {"t", "a/b"}, {"", "s"}} {
		if err := s.SetRecord(c, bad[0], bad[1], []byte("x")); !errors.Is(err, errdefs.ErrInvalid) {
			t.Fatalf("SetRecord(%q, %q): %v, want ErrInvalid", bad[0], bad[1], err)
		}
		if _, _, err := s.Record(c, bad[0], bad[1]); !errors.Is(err, errdefs.ErrInvalid) {
			t.Fatalf("Record(%q, %q): %v, want ErrInvalid", bad[0], bad[1], err)
		}
	}
	if _, err := s.Records(c, "../t"); !errors.Is(err, errdefs.ErrInvalid) {
		t.Fatalf("Records(../t): %v, want ErrInvalid", err)
	}
	// A record outlives nothing it should not: Sweep keeps it, DeleteSession takes it.
	if _, err := s.Sweep(c, time.Now().Add(time.Hour)); err != nil {
		t.Fatalf("Sweep: %v", err)
	}
	if _, _, err := s.Record(c, "t1", "s1"); err != nil {
		t.Fatalf("Record after Sweep: %v", err)
	}
	if err := s.DeleteSession(c, "t1", "s1"); err != nil {
		t.Fatalf("DeleteSession: %v", err)
	}
	if _, _, err := s.Record(c, "t1", "s1"); !errors.Is(err, errdefs.ErrNotFound) {
		t.Fatalf("Record after DeleteSession: %v, want ErrNotFound", err)
	}
	if all := recs(""); len(all) != 2 {
		t.Fatalf("Records after DeleteSession: %v", all)
	}
}

// testSwapRecord: SwapRecord writes only from the version it is given,
// and of racers swapping from one version exactly one wins, whatever the
// process (each racer here has a store of its own on the same backing,
// as two replicas have: Harness.Reopen).
func testSwapRecord(t *testing.T, h Harness) {
	s := h.New(t)
	c := ctx(t)
	record := func() ([]byte, string) {
		t.Helper()
		data, version, err := s.Record(c, "t1", "s1")
		if err != nil || version == "" {
			t.Fatalf("Record: %q, version %q, %v", data, version, err)
		}
		return data, version
	}
	v1, err := s.SwapRecord(c, "t1", "s1", "", []byte(`{"state":"suspended"}`))
	if err != nil || v1 == "" {
		t.Fatalf("SwapRecord of a session with no record, from \"\": %q, %v", v1, err)
	}
	if data, v := record(); string(data) != `{"state":"suspended"}` || v != v1 {
		t.Fatalf("Record after SwapRecord: %q at %q, want version %q", data, v, v1)
	}
	// "" means no record: a second creation loses.
	if _, err := s.SwapRecord(c, "t1", "s1", "", []byte(`{"state":"other"}`)); !errors.Is(err, snapshot.ErrConflict) {
		t.Fatalf("SwapRecord from \"\" over a record: %v, want ErrConflict", err)
	}
	v2, err := s.SwapRecord(c, "t1", "s1", v1, []byte(`{"state":"resuming","token":"a"}`))
	if err != nil || v2 == "" || v2 == v1 {
		t.Fatalf("SwapRecord from the current version: %q, %v (from %q)", v2, err, v1)
	}
	if _, err := s.SwapRecord(c, "t1", "s1", v1, []byte(`{"state":"resuming","token":"b"}`)); !errors.Is(err, snapshot.ErrConflict) {
		t.Fatalf("SwapRecord from a stale version: %v, want ErrConflict", err)
	}
	if data, v := record(); string(data) != `{"state":"resuming","token":"a"}` || v != v2 {
		t.Fatalf("a refused SwapRecord changed the record: %q at %q", data, v)
	}
	// A retry of a swap that landed (its answer lost) finds its own data
	// there and succeeds.
	if v, err := s.SwapRecord(c, "t1", "s1", v1, []byte(`{"state":"resuming","token":"a"}`)); err != nil || v != v2 {
		t.Fatalf("SwapRecord retried after it landed: %q, %v; want %q", v, err, v2)
	}
	// An unconditional SetRecord changes the version under a holder of v2.
	if err := s.SetRecord(c, "t1", "s1", []byte(`{"state":"running"}`)); err != nil {
		t.Fatal(err)
	}
	if _, err := s.SwapRecord(c, "t1", "s1", v2, []byte(`{"state":"late"}`)); !errors.Is(err, snapshot.ErrConflict) {
		t.Fatalf("SwapRecord from the version before a SetRecord: %v, want ErrConflict", err)
	}

	// Racers, each with its own store, swap from one version: one wins.
	_, from := record()
	const racers = 8
	type result struct {
		data, version string
		err           error
	}
	results := make(chan result, racers)
	var start sync.WaitGroup
	start.Add(1)
	for i := range racers {
		rs := s
		if h.Reopen != nil {
			rs = h.Reopen(t, s)
		}
		go func() {
			start.Wait()
			data := fmt.Sprintf(`{"state":"resuming","token":"racer-%d"}`, i)
			v, err := rs.SwapRecord(c, "t1", "s1", from, []byte(data))
			results <- result{data, v, err}
		}()
	}
	start.Done()
	var won []result
	for range racers {
		r := <-results
		switch {
		case r.err == nil:
			won = append(won, r)
		case !errors.Is(r.err, snapshot.ErrConflict):
			t.Errorf("a racer's SwapRecord: %v, want success or ErrConflict", r.err)
		}
	}
	if len(won) != 1 {
		t.Fatalf("%d of %d racers swapped from one version: %+v; want exactly one", len(won), racers, won)
	}
	if data, v := record(); string(data) != won[0].data || v != won[0].version {
		t.Fatalf("after the race the record is %q at %q; the winner wrote %q at %q", data, v, won[0].data, won[0].version)
	}

	// A removed record: a swap from its version loses, a creation wins.
	_, last := record()
	if err := s.DeleteSession(c, "t1", "s1"); err != nil {
		t.Fatal(err)
	}
	if _, err := s.SwapRecord(c, "t1", "s1", last, []byte(`{"state":"ghost"}`)); !errors.Is(err, snapshot.ErrConflict) {
		t.Fatalf("SwapRecord from the version of a removed record: %v, want ErrConflict", err)
	}
	if _, _, err := s.Record(c, "t1", "s1"); !errors.Is(err, errdefs.ErrNotFound) {
		t.Fatalf("a refused SwapRecord made a record: %v", err)
	}
	if _, err := s.SwapRecord(c, "t1", "s1", "", []byte(`{"state":"new"}`)); err != nil {
		t.Fatalf("SwapRecord from \"\" after DeleteSession: %v", err)
	}
	// Bounded, named, as SetRecord.
	if _, err := s.SwapRecord(c, "t1", "s1", "", make([]byte, snapshot.MaxRecord+1)); !errors.Is(err, errdefs.ErrInvalid) {
		t.Fatalf("SwapRecord past MaxRecord: %v, want ErrInvalid", err)
	}
	if _, err := s.SwapRecord(c, "../t", "s1", "", []byte("x")); !errors.Is(err, errdefs.ErrInvalid) {
		t.Fatalf("SwapRecord(../t): %v, want ErrInvalid", err)
	}
	// Records lists no lock or temporary as a session.
	if recs, err := s.Records(c, ""); err != nil || len(recs) != 1 {
		t.Fatalf("Records: %+v, %v; want t1/s1's alone", recs, err)
	}
	if swept, err := s.Sweep(c, time.Now().Add(time.Hour)); err != nil || len(swept) != 0 {
		t.Fatalf("Sweep after swaps: %+v, %v; want nothing left behind", swept, err)
	}
}
