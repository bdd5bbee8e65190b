package tools

import (
	"fmt"
	"strings"

	"github.com/shellbox/shellbox/executor"
)

// The renderers below are the whole model-facing text contract (DESIGN §2).
// Sections are joined by one newline; one trailing newline of each stream's
// text is dropped so markers and sections start on their own line without a
// blank line before them.

// RenderForeground renders how a foreground command ended.
func RenderForeground(r executor.Result) string {
	var b strings.Builder
	section(&b, r.Stdout)
	if r.Stderr != "" {
		section(&b, "[stderr]\n"+r.Stderr)
	}
	if b.Len() == 0 {
		// Nothing printed (or a lone newline): say so rather than show nothing.
		section(&b, "(no output)")
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

// RenderBackground is the acknowledgement of a started background task.
func RenderBackground(id string) string { return "started background task " + id }

// RenderOutput renders one bash_output read.
func RenderOutput(o executor.Output) string {
	var b strings.Builder
	section(&b, o.Stdout)
	if o.Stderr != "" {
		section(&b, "[stderr]\n"+o.Stderr)
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

func section(b *strings.Builder, s string) {
	if s == "" {
		return
	}
	if b.Len() > 0 {
		b.WriteByte('\n')
	}
	b.WriteString(strings.TrimSuffix(s, "\n"))
}
