package tools

import (
	"fmt"
	"strings"
	"unicode/utf8"

	"github.com/shellbox/shellbox/executor"
)

// The renderers below are the whole model-facing text contract
// (docs/architecture.md#the-tool-contract).
// Sections are joined by one newline; one trailing newline of each stream's
// text is dropped so markers and sections start on their own line without a
// blank line before them.

// InvalidUTF8Marker follows output that held bytes that are not UTF-8;
// each such byte is shown as U+FFFD (as a JSON transport would show it).
// Valid output never gets it, nor does a character cut where the output
// was cut (the start of a kept tail, either end of a bash_output read).
const InvalidUTF8Marker = "[output was not valid UTF-8; invalid bytes replaced with U+FFFD]"

// RenderForeground renders how a foreground command ended.
func RenderForeground(r executor.Result) string {
	var b strings.Builder
	stdout, bad1 := validText(r.Stdout, r.Truncated, false)
	stderr, bad2 := validText(r.Stderr, r.Truncated, false)
	section(&b, stdout)
	if stderr != "" {
		section(&b, "[stderr]\n"+stderr)
	}
	if b.Len() == 0 {
		// Nothing printed (or a lone newline): say so rather than show nothing.
		section(&b, "(no output)")
	}
	if bad1 || bad2 {
		section(&b, InvalidUTF8Marker)
	}
	if r.Truncated {
		section(&b, "[output truncated; "+fullOutput(r.SpillPath, r.SpillError)+"]")
	}
	if r.TimedOut {
		section(&b, fmt.Sprintf("[timed out after %dms]", r.TimeoutMs))
	}
	if r.Signal != "" {
		section(&b, "[killed by signal: "+r.Signal+"]")
	} else if r.ExitCode != 0 {
		section(&b, fmt.Sprintf("[exit code: %d]", r.ExitCode))
	}
	return b.String()
}

// withSandboxOOM returns r with the note on its sandbox's death as its
// stderr when the whole sandbox died of its memory limit (r.SandboxOOM),
// and r unchanged otherwise: a command the kernel's OOM killer ended in a
// sandbox that lives on (runc) is an ordinary OOMKilled result.
func withSandboxOOM(r executor.Result) executor.Result {
	if r.SandboxOOM == nil {
		return r
	}
	note := "shellbox: the sandbox ran out of memory and was killed whole, with its background tasks; the session's next call starts a fresh sandbox\n"
	if r.SandboxOOM.MemoryBytes > 0 {
		note = fmt.Sprintf("shellbox: the sandbox ran out of memory (memory limit: %d bytes) and was killed whole, with its background tasks; the session's next call starts a fresh sandbox\n", r.SandboxOOM.MemoryBytes)
	}
	r.Stderr = note
	return r
}

// RenderBackground is the acknowledgement of a started background task.
func RenderBackground(id string) string { return "started background task " + id }

// RenderOutput renders one bash_output read.
func RenderOutput(o executor.Output) string {
	var b strings.Builder
	// A read starts where the previous one ended, and a running task's
	// read ends wherever the command is: either may cut a character.
	running := o.Status.State == executor.Running
	stdout, bad1 := validText(o.Stdout, true, running)
	stderr, bad2 := validText(o.Stderr, true, running)
	section(&b, stdout)
	if stderr != "" {
		section(&b, "[stderr]\n"+stderr)
	}
	if bad1 || bad2 {
		section(&b, InvalidUTF8Marker)
	}
	if o.Lost > 0 {
		section(&b, fmt.Sprintf("[output lost: %d bytes not kept in memory; %s]", o.Lost, fullOutput(o.SpillPath, o.SpillError)))
	}
	section(&b, RenderStatus(o.Status))
	return b.String()
}

// RenderStatus is the status line of bash_output.
func RenderStatus(s executor.Status) string {
	switch s.State {
	case executor.Running:
		return "status: running"
	case executor.Killed:
		return "status: killed"
	default:
		return fmt.Sprintf("status: completed, exit code: %d", s.ExitCode)
	}
}

// RenderKill renders what bash_kill found.
func RenderKill(id string, k executor.KillResult) string {
	if !k.AlreadyDone {
		return "killed background task " + id
	}
	if k.Status.State == executor.Killed {
		return "task " + id + " already killed"
	}
	return fmt.Sprintf("task %s already completed, exit code: %d", id, k.Status.ExitCode)
}

// RenderNotice renders a background completion notice.
func RenderNotice(id string, s executor.Status) string {
	if s.State == executor.Killed {
		return "background task " + id + " killed"
	}
	return fmt.Sprintf("background task %s completed, exit code: %d", id, s.ExitCode)
}

// RenderError normalises an error message.
func RenderError(msg string) string { return "Error: " + msg }

func fullOutput(path, spillErr string) string {
	switch {
	case spillErr != "":
		return "full output unavailable: " + spillErr
	case path != "":
		return "full output: " + path
	default:
		return "full output unavailable: no spill file was written"
	}
}

// validText returns s with each byte that is not part of valid UTF-8
// replaced by U+FFFD, exactly as encoding/json replaces it, so the text is
// the same in process and over every transport; and whether s had such a
// byte other than a character cut at an edge where the output was cut
// (cutStart: its first bytes may continue a character; cutEnd: its last
// bytes may begin one).
func validText(s string, cutStart, cutEnd bool) (string, bool) {
	if utf8.ValidString(s) {
		return s, false
	}
	inner := s
	if cutStart {
		for i := 0; i < utf8.UTFMax-1 && inner != "" && !utf8.RuneStart(inner[0]); i++ {
			inner = inner[1:]
		}
	}
	if cutEnd {
		for i := len(inner) - 1; i >= 0 && i >= len(inner)-(utf8.UTFMax-1); i-- {
			if utf8.RuneStart(inner[i]) {
				if !utf8.FullRuneInString(inner[i:]) {
					inner = inner[:i]
				}
				break
			}
		}
	}
	var b strings.Builder
	b.Grow(len(s) + 8)
	for i := 0; i < len(s); {
		r, size := utf8.DecodeRuneInString(s[i:])
		if r == utf8.RuneError && size == 1 {
			b.WriteString("\uFFFD")
		} else {
			b.WriteString(s[i : i+size])
		}
		i += size
	}
	return b.String(), !utf8.ValidString(inner)
}

func section(b *strings.Builder, s string) {
	if s == "" {
		return
	}
	if b.Len() > 0 {
		b.WriteByte('\n')
	}
	b.WriteString(strings.TrimSuffix(s, "\n"))
}

// RenderLive is live output as a harness shows its user while a call runs
// (MCP progress messages): the chunks' bytes in arrival order, both streams
// interleaved as a terminal shows them, each gap a line "[… N bytes not
// streamed …]", invalid UTF-8 replaced. It is not for the model: the result
// text is RenderForeground's whatever was streamed.
func RenderLive(chunks []executor.Chunk) string {
	var b strings.Builder
	for _, c := range chunks {
		if c.Skipped > 0 {
			if b.Len() > 0 && !strings.HasSuffix(b.String(), "\n") {
				b.WriteByte('\n')
			}
			fmt.Fprintf(&b, "[… %d bytes not streamed …]\n", c.Skipped)
		}
		b.Write(c.Data)
	}
	return strings.ToValidUTF8(b.String(), "\uFFFD")
}
