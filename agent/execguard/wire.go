package execguard

import (
	"encoding/binary"
	"encoding/json"
	"fmt"
	"io"

	"github.com/shellbox/shellbox/internal/cmdmatch"
)

// The agent and the guard speak over a socket pair: frames of a 4-byte
// big-endian length and a JSON message, each at most maxFrame bytes.
const maxFrame = 4 << 20

// watch is the agent's message: pid is a process the agent started (a
// call's leader), argv what it started it with (after the shim), rules
// what its tree's execs are checked against.
type watch struct {
	// Sync, when set, asks the guard to echo it after every report it
	// made so far (and nothing else).
	Sync  uint64        `json:"sync,omitempty"`
	PID   int           `json:"pid"`
	Argv  []string      `json:"argv"`
	Rules *cmdmatch.Set `json:"rules,omitempty"`
}

// report is the guard's message: ready (or failed) once at start, then a
// refusal of an exec in the tree of Leader.
type report struct {
	Ready  bool   `json:"ready,omitempty"`
	Sync   uint64 `json:"sync,omitempty"` // watch.Sync, echoed
	Failed string `json:"failed,omitempty"`

	PID      int      `json:"pid,omitempty"`
	Leader   int      `json:"leader,omitempty"`
	Policy   string   `json:"policy,omitempty"`
	Rule     string   `json:"rule,omitempty"`
	Decision string   `json:"decision,omitempty"`
	Argv     []string `json:"argv,omitempty"`
	Killed   bool     `json:"killed,omitempty"`
	Why      string   `json:"why,omitempty"`
	// Line is what the call's stderr shows.
	Line string `json:"line,omitempty"`
}

func writeFrame(w io.Writer, v any) error {
	b, err := json.Marshal(v)
	if err != nil {
		return err
	}
	if len(b) > maxFrame {
		return fmt.Errorf("exec guard: a message of %d bytes, more than %d", len(b), maxFrame)
	}
	buf := make([]byte, 4+len(b))
	binary.BigEndian.PutUint32(buf, uint32(len(b)))
	copy(buf[4:], b)
	_, err = w.Write(buf)
	return err
}

func readFrame(r io.Reader, v any) error {
	var hdr [4]byte
	if _, err := io.ReadFull(r, hdr[:]); err != nil {
		return err
	}
	n := binary.BigEndian.Uint32(hdr[:])
	if n > maxFrame {
		return fmt.Errorf("exec guard: a message of %d bytes, more than %d", n, maxFrame)
	}
	b := make([]byte, n)
	if _, err := io.ReadFull(r, b); err != nil {
		return fmt.Errorf("exec guard: a message cut short: %w", err)
	}
	return json.Unmarshal(b, v)
}
