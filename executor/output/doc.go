// Package output holds the bounded buffers a command's output goes through.
// It knows nothing about processes: every type is an io.Writer fed by the
// goroutine that reads a pipe, and a reader on another goroutine.
//
// Three shapes, one rule: memory is bounded whatever is written, and a write
// never blocks on, or fails because of, a reader.
//
//   - Tail keeps the last N bytes of a stream and counts all of them: the kept
//     tail of a foreground result, and of a finished background task.
//   - Ring keeps the last N bytes of a stream with one read cursor: a
//     background task's bash_output reads what arrived since the previous
//     read; what the writer overwrote before it was read is counted as lost.
//   - Spill is the full output of one call, both streams interleaved in
//     arrival order, written to a file only when it is needed: past a
//     threshold, or when a reader asks for it (a tail was truncated, a ring
//     lost bytes). A call with small output writes no file at all.
//   - Space is the room the spill files of one executor share: a Spill that
//     finds it full deletes the oldest finished spill files to make room.
//
// All types are safe for concurrent use.
package output
