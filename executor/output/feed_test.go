package output

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"reflect"
	"testing"

	"github.com/shellbox/shellbox/executor"
)

// sum adds up the data and the skipped bytes of chunks, and checks each
// batch's data against the feed's bound.
func sum(t *testing.T, batch []executor.Chunk, bound int) (data, skipped int64) {
	t.Helper()
	n := 0
	for _, c := range batch {
		n += len(c.Data)
		data += int64(len(c.Data))
		skipped += c.Skipped
	}
	if n > bound {
		t.Fatalf("a batch holds %d bytes of data, over the feed's %d", n, bound)
	}
	return data, skipped
}

// TestFeedHugeOutputNoConsumer: 100 MB written with nobody reading keeps
// the first max bytes and counts the rest, in one trailing gap.
func TestFeedHugeOutputNoConsumer(t *testing.T) {
	const max, total = 16 << 10, 100 << 20
	f := NewFeed(max)
	buf := bytes.Repeat([]byte("x"), 64<<10)
	for range total / len(buf) {
		f.Write(executor.Chunk{Stream: executor.Stdout, Data: buf})
	}
	f.Close()
	chunks, done := f.take()
	if !done {
		t.Fatal("take after Close: not done")
	}
	data, skipped := sum(t, chunks, max)
	if data != max || skipped != total-max {
		t.Fatalf("data %d, skipped %d; want %d and %d", data, skipped, max, total-max)
	}
	if len(chunks) != 2 || chunks[1].Data != nil || chunks[1].Stream != executor.Stdout {
		t.Fatalf("want one chunk of data and one trailing gap, got %d chunks: %+v", len(chunks), chunks[len(chunks)-1])
	}
}

// TestFeedSlowConsumer: a consumer that blocks in send while a producer
// writes fast gets bounded batches, in order, and every byte is either sent
// or counted as skipped.
func TestFeedSlowConsumer(t *testing.T) {
	const max, writes = 4 << 10, 5000
	f := NewFeed(max)
	gate := make(chan struct{})
	var batches [][]executor.Chunk
	pumped := make(chan error, 1)
	go func() {
		pumped <- f.Pump(context.Background(), 0, func(c []executor.Chunk) error {
			batches = append(batches, c)
			<-gate // the client is slow: the producer must not wait for it
			return nil
		})
	}()
	var want int64
	for i := range writes {
		line := []byte(fmt.Sprintf("line %06d\n", i))
		want += int64(len(line))
		f.Write(executor.Chunk{Stream: executor.Stdout, Data: line})
	}
	f.Close()
	close(gate)
	if err := <-pumped; err != nil {
		t.Fatal(err)
	}
	var data, skipped int64
	var got bytes.Buffer
	for _, b := range batches {
		d, s := sum(t, b, max)
		data, skipped = data+d, skipped+s
		for _, c := range b {
			got.Write(c.Data)
		}
	}
	if data+skipped != want {
		t.Fatalf("sent %d + skipped %d = %d bytes, want %d", data, skipped, data+skipped, want)
	}
	if skipped == 0 {
		t.Fatal("a consumer blocked for the whole run skipped nothing: the feed buffered without bound")
	}
	// What was kept is in order: each kept line number is above the last.
	last := -1
	for _, ln := range bytes.Split(got.Bytes(), []byte("\n")) {
		var n int
		if _, err := fmt.Sscanf(string(ln), "line %06d", &n); err != nil {
			continue // a line cut at the bound
		}
		if n <= last {
			t.Fatalf("line %d after line %d: out of order", n, last)
		}
		last = n
	}
}

// TestFeedCoalesces: consecutive writes of a stream are one chunk; a change
// of stream starts another; a gap is reported before the data after it.
func TestFeedCoalesces(t *testing.T) {
	f := NewFeed(8)
	f.Write(executor.Chunk{Stream: executor.Stdout, Data: []byte("ab")})
	f.Write(executor.Chunk{Stream: executor.Stdout, Data: []byte("cd")})
	f.Write(executor.Chunk{Stream: executor.Stderr, Data: []byte("e")})
	f.Write(executor.Chunk{Stream: executor.Stderr, Data: []byte("fghij")}) // 2 bytes over
	chunks, _ := f.take()
	want := []executor.Chunk{
		{Stream: executor.Stdout, Data: []byte("abcd")},
		{Stream: executor.Stderr, Data: []byte("efgh")},
		{Stream: executor.Stderr, Skipped: 2},
	}
	if !reflect.DeepEqual(chunks, want) {
		t.Fatalf("got %s, want %s", show(chunks), show(want))
	}
	f.Write(executor.Chunk{Stream: executor.Stdout, Data: []byte("k"), Skipped: 5})
	f.Write(executor.Chunk{Stream: executor.Stdout, Data: []byte("l")})
	chunks, _ = f.take()
	want = []executor.Chunk{{Stream: executor.Stdout, Data: []byte("kl"), Skipped: 5}}
	if !reflect.DeepEqual(chunks, want) {
		t.Fatalf("an upstream gap: got %s, want %s", show(chunks), show(want))
	}
}

// TestFeedClose: Pump sends what is pending at Close and returns; later
// writes are ignored; a failing send ends Pump with its error.
func TestFeedClose(t *testing.T) {
	f := NewFeed(64)
	f.Write(executor.Chunk{Stream: executor.Stdout, Data: []byte("last")})
	f.Close()
	f.Close()
	f.Write(executor.Chunk{Stream: executor.Stdout, Data: []byte("late")})
	var got []executor.Chunk
	if err := f.Pump(context.Background(), 1<<40, func(c []executor.Chunk) error { got = append(got, c...); return nil }); err != nil {
		t.Fatal(err)
	}
	if len(got) != 1 || string(got[0].Data) != "last" {
		t.Fatalf("got %s", show(got))
	}

	f = NewFeed(64)
	f.Write(executor.Chunk{Stream: executor.Stdout, Data: []byte("x")})
	boom := errors.New("client gone")
	if err := f.Pump(context.Background(), 0, func([]executor.Chunk) error { return boom }); !errors.Is(err, boom) {
		t.Fatalf("Pump = %v, want %v", err, boom)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := NewFeed(1).Pump(ctx, 0, nil); !errors.Is(err, context.Canceled) {
		t.Fatalf("Pump on a done ctx = %v", err)
	}
}

func show(cs []executor.Chunk) string {
	var b bytes.Buffer
	for _, c := range cs {
		fmt.Fprintf(&b, "{%s %q skipped %d}", c.Stream, c.Data, c.Skipped)
	}
	return b.String()
}
