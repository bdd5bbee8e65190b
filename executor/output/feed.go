package output

import (
	"context"
	"sync"
	"time"

	"github.com/shellbox/shellbox/executor"
)

// Feed is the bounded queue between a running command's live output (an
// executor.Live fed by the output pumps) and the one consumer that sends it
// on: a streamed agent answer, MCP progress notifications, a REST event
// stream. Write never blocks: what is pending is coalesced (consecutive
// chunks of a stream are one chunk) into at most max bytes, and what does
// not fit is only counted, as Skipped of the chunk that follows the gap (or
// of a trailing chunk with no data). Pump sends what is pending at most once
// per interval, so a command printing gigabytes produces a bounded number of
// bounded messages, and a consumer that falls behind loses bytes with a
// count, never stalls the command or grows memory.
type Feed struct {
	max    int
	ready  chan struct{} // 1-buffered: something changed
	closed chan struct{}

	mu        sync.Mutex
	done      bool
	pending   []executor.Chunk
	size      int
	gap       int64  // bytes skipped since the last kept byte
	gapStream string // the stream of the last skipped byte
}

// NewFeed returns a Feed that holds at most limit bytes of output (at least 1).
func NewFeed(limit int) *Feed {
	return &Feed{max: max(limit, 1), ready: make(chan struct{}, 1), closed: make(chan struct{})}
}

// Write queues c's data, or counts what does not fit; c.Skipped (bytes an
// earlier feed skipped) adds to the gap before c's data. It is an
// executor.Live: it never blocks and does not keep c.Data. After Close it
// does nothing.
func (f *Feed) Write(c executor.Chunk) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.done {
		return
	}
	if c.Skipped > 0 {
		f.gap += c.Skipped
		f.gapStream = c.Stream
	}
	data := c.Data
	if room := f.max - f.size; len(data) > room {
		data = data[:room]
	}
	if len(data) > 0 {
		if n := len(f.pending); n > 0 && f.gap == 0 && f.pending[n-1].Stream == c.Stream {
			f.pending[n-1].Data = append(f.pending[n-1].Data, data...)
		} else {
			f.pending = append(f.pending, executor.Chunk{Stream: c.Stream, Data: append([]byte(nil), data...), Skipped: f.gap})
			f.gap = 0
		}
		f.size += len(data)
	}
	if dropped := len(c.Data) - len(data); dropped > 0 {
		f.gap += int64(dropped)
		f.gapStream = c.Stream
	}
	select {
	case f.ready <- struct{}{}:
	default:
	}
}

// Close ends the feed: Pump sends what is pending and returns. Idempotent.
func (f *Feed) Close() {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.done {
		return
	}
	f.done = true
	close(f.closed)
	select {
	case f.ready <- struct{}{}:
	default:
	}
}

// take returns what is pending (a gap not followed by data yet as a last
// chunk without data) and empties the feed; done reports that it is closed,
// so nothing more will come.
func (f *Feed) take() (chunks []executor.Chunk, done bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	chunks, f.pending, f.size = f.pending, nil, 0
	if f.gap > 0 {
		chunks = append(chunks, executor.Chunk{Stream: f.gapStream, Skipped: f.gap})
		f.gap = 0
	}
	return chunks, f.done
}

// Pump calls send with what the feed holds, at most once per interval,
// until the feed is closed and emptied (nil), ctx is done (ctx.Err()) or
// send fails (its error). send may keep the chunks. Writes go on being
// accepted (and dropped with a count) while send is slow.
func (f *Feed) Pump(ctx context.Context, interval time.Duration, send func([]executor.Chunk) error) error {
	var timer *time.Timer
	defer func() {
		if timer != nil {
			timer.Stop()
		}
	}()
	for {
		select {
		case <-f.ready:
		case <-ctx.Done():
			return ctx.Err()
		}
		chunks, done := f.take()
		if len(chunks) > 0 {
			if err := send(chunks); err != nil {
				return err
			}
		}
		if done {
			return nil
		}
		if interval <= 0 {
			continue
		}
		if timer == nil {
			timer = time.NewTimer(interval)
		} else {
			timer.Reset(interval)
		}
		select {
		case <-timer.C:
		case <-f.closed:
			// The end goes out at once: the result waits for it.
			if !timer.Stop() {
				<-timer.C
			}
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}
