package executortest

import (
	"fmt"
	"regexp"
	"strings"
	"testing"

	"github.com/shellbox/shellbox/tools"
)

// testCase is one tool call and what it must give. The text is compared,
// after normalisation, with want (computed), wantRE, or else the golden file
// testdata/<group>_<name>.golden.
type testCase struct {
	name    string
	tool    string // default bash
	profile profile
	// session, if set, is the session id used as is (valid or not).
	session string
	// setup is a bash command run first, in the session's root; it must
	// exit 0.
	setup string
	// args are the raw JSON arguments; {{s}} stands for the session id and
	// {{root}} for the session root.
	args string
	// timed, instead of args, is the command of a bash call whose timeout
	// must fire only once the command has reached the state the case is
	// about; the command creates {{ready}} then (session.raceTimeout). The
	// result's timeout is normalised as <timeoutMs>.
	timed  string
	want   func(s *session) string
	wantRE *regexp.Regexp
	// fg, if set, says the call ends as a foreground result with these
	// facts; isError, that it is an error.
	fg      *fgWant
	isError bool
	check   func(t *testing.T, s *session, r tools.Result)
}

// fgWant are the typed facts of a foreground result.
type fgWant struct {
	exit      int
	signal    string
	timedOut  bool
	truncated bool
	// timeoutMs is the effective timeout; 0 leaves it unchecked.
	timeoutMs int64
}

func (s *suite) runCase(t *testing.T, group string, c testCase) {
	var ss *session
	if c.session != "" {
		ss = s.sessionAs(t, c.profile, c.session)
	} else {
		ss = s.newSession(t, c.profile, group+"-"+c.name)
	}
	expand := strings.NewReplacer("{{s}}", ss.id, "{{root}}", ss.root, "{{ready}}", ss.f("ready"))
	if c.setup != "" {
		ss.sh(expand.Replace(c.setup))
	}
	tool := c.tool
	if tool == "" {
		tool = tools.ToolBash
	}
	fgw := c.fg
	var r tools.Result
	if c.timed != "" {
		var ms int64
		r, ms = ss.raceTimeout(func(ms int64) tools.Result {
			return ss.call(tool, bashArgs(expand.Replace(c.timed), "timeoutMs", ms))
		})
		if fgw != nil {
			w := *fgw
			w.timeoutMs = ms
			fgw = &w
		}
	} else {
		r = ss.call(tool, expand.Replace(c.args))
	}
	got := ss.normalise(r.Text)
	switch {
	case c.want != nil:
		if want := c.want(ss); got != want {
			t.Errorf("text:\n%s", diff(want, got))
		}
	case c.wantRE != nil:
		if !c.wantRE.MatchString(got) {
			t.Errorf("text does not match %s:\n%s", c.wantRE, indent(got))
		}
	default:
		checkGolden(t, group+"_"+c.name, got)
	}
	if c.isError {
		if _, ok := r.Value.(*tools.ErrorValue); !ok || !r.IsError {
			t.Errorf("want an error result, got %T (IsError %v)", r.Value, r.IsError)
		}
	}
	if fgw != nil {
		checkForeground(t, r, *fgw)
	}
	if c.check != nil {
		// Checks read the typed value a declared foreground result has.
		if _, isFg := r.Value.(*tools.Foreground); c.fg == nil || isFg {
			c.check(t, ss, r)
		}
	}
}

// checkForeground checks the typed facts of a foreground result.
func checkForeground(t *testing.T, r tools.Result, w fgWant) {
	t.Helper()
	fg, ok := r.Value.(*tools.Foreground)
	if !ok {
		t.Errorf("want a foreground result, got %T:\n%s", r.Value, indent(r.Text))
		return
	}
	got := fgWant{exit: fg.ExitCode, signal: fg.Signal, timedOut: fg.TimedOut, truncated: fg.Truncated, timeoutMs: fg.TimeoutMs}
	if w.timeoutMs == 0 {
		got.timeoutMs = 0
	}
	if w.signal != "" {
		// The exit code of a signalled command means nothing.
		got.exit = w.exit
	}
	if got != w {
		t.Errorf("typed result %+v, want %+v", got, w)
	}
}

// spillHas returns a check that the spill file of a truncated foreground
// result holds exactly what gen prints (and size bytes), read through the
// executor itself.
func spillHas(gen string, size int) func(*testing.T, *session, tools.Result) {
	return func(t *testing.T, s *session, r tools.Result) {
		fg := r.Value.(*tools.Foreground)
		if fg.SpillPath == "" {
			t.Errorf("no spill path (spill error %q)", fg.SpillError)
			return
		}
		cmd := fmt.Sprintf("wc -c < %s", fg.SpillPath)
		want := fmt.Sprintf("%d\n", size)
		if gen != "" {
			cmd += fmt.Sprintf("; { %s; } | cmp - %s && echo same", gen, fg.SpillPath)
			want += "same\n"
		}
		checkOutput(t, s, cmd, want)
	}
}

// checkOutput runs a follow-up command and compares its text output.
func checkOutput(t *testing.T, s *session, cmd, want string) {
	t.Helper()
	r := s.call(tools.ToolBash, bashArgs(cmd, "timeoutMs", waitBound.Milliseconds()))
	fg, ok := r.Value.(*tools.Foreground)
	if !ok || fg.Stdout != want || fg.ExitCode != 0 {
		t.Errorf("follow-up %q:\ngot:\n%s\nwant stdout:\n%s", cmd, indent(r.Text), indent(want))
	}
}

// lines is seq -f FORMAT FIRST LAST, computed.
func lines(format string, first, last int) string {
	var b strings.Builder
	for i := first; i <= last; i++ {
		fmt.Fprintf(&b, format+"\n", i)
	}
	return b.String()
}

func foregroundCases() []testCase {
	return []testCase{
		{name: "stdout", args: bashArgs("echo hello"), fg: &fgWant{timeoutMs: 120000}},
		{name: "stderr", args: bashArgs("echo oops >&2"), fg: &fgWant{}},
		{name: "stdout_and_stderr", args: bashArgs("echo out; echo err >&2"), fg: &fgWant{}},
		{name: "no_output", args: bashArgs("true"), fg: &fgWant{}},
		{name: "lone_newline", args: bashArgs("echo"), fg: &fgWant{},
			check: func(t *testing.T, s *session, r tools.Result) {
				if fg := r.Value.(*tools.Foreground); fg.Stdout != "\n" {
					t.Errorf("stdout %q, want a lone newline", fg.Stdout)
				}
			}},
		{name: "no_trailing_newline", args: bashArgs(`printf 'a\nb'`), fg: &fgWant{}},
		{name: "blank_lines_kept", args: bashArgs(`printf 'a\n\n\nb\n\n'`), fg: &fgWant{}},
		{name: "exit_code", args: bashArgs("exit 3"), fg: &fgWant{exit: 3}},
		{name: "exit_code_with_output", args: bashArgs("echo partial; echo failed >&2; exit 3"), fg: &fgWant{exit: 3}},
		// A command that exits 137 exited; it was not killed.
		{name: "exit_137_is_a_code", args: bashArgs("exit 137"), fg: &fgWant{exit: 137}},
		{name: "sigkill", args: bashArgs("kill -9 $$"), fg: &fgWant{signal: "SIGKILL"}},
		{name: "sigterm", args: bashArgs("kill -TERM $$"), fg: &fgWant{signal: "SIGTERM"}},
		{name: "signal_with_output", args: bashArgs("echo before; kill -9 $$"), fg: &fgWant{signal: "SIGKILL"}},
		// The timeout is only a bound on a cat that waits for input.
		{name: "stdin_is_empty", args: bashArgs("cat; echo done", "timeoutMs", waitBound.Milliseconds()), fg: &fgWant{timeoutMs: waitBound.Milliseconds()}},
		{name: "not_a_login_shell", args: bashArgs("shopt -q login_shell && echo login || echo not-login"), fg: &fgWant{}},
		{name: "interleaved", args: bashArgs("for i in 1 2 3; do echo out$i; echo err$i >&2; done"), fg: &fgWant{}},
		// Each stream keeps its own order, however the writes interleave.
		{name: "interleaved_many", args: bashArgs("for i in $(seq 1 2000); do echo o$i; echo e$i >&2; done"), fg: &fgWant{},
			want: func(*session) string {
				return lines("o%d", 1, 2000) + "[stderr]\n" + strings.TrimSuffix(lines("e%d", 1, 2000), "\n")
			}},
	}
}

func timeoutCases() []testCase {
	// A command that must have printed or set its traps before the timer
	// fires (the text, signal and exit code under test depend on it) is
	// timed: its start races the timer, and an attempt it lost is made
	// again with a longer timeout (session.raceTimeout). The sleeps outlast
	// every attempt's timeout and grace.
	timedOut := func(signal string, exit int) *fgWant {
		return &fgWant{timedOut: true, signal: signal, exit: exit}
	}
	return []testCase{
		{name: "sleep", args: bashArgs("sleep 30", "timeoutMs", 3000), fg: &fgWant{timedOut: true, signal: "SIGTERM", timeoutMs: 3000}},
		{name: "with_output", timed: "echo started; : > {{ready}}; sleep 300", fg: timedOut("SIGTERM", 0)},
		// SIGTERM ignored by the shell and (inherited) by sleep: SIGKILL after
		// the grace period.
		{name: "term_ignored", timed: "trap '' TERM; : > {{ready}}; sleep 300", fg: timedOut("SIGKILL", 0)},
		// The timer fired, however the command then ended.
		{name: "term_trapped_exit_0", timed: "trap 'echo caught; exit 0' TERM; : > {{ready}}; sleep 300 & wait", fg: timedOut("", 0)},
		{name: "term_trapped_exit_5", timed: "trap 'exit 5' TERM; : > {{ready}}; sleep 300 & wait", fg: timedOut("", 5)},
		// The timeout is only a bound on a hang here.
		{name: "not_reached", args: bashArgs("echo fast", "timeoutMs", waitBound.Milliseconds()), fg: &fgWant{timeoutMs: waitBound.Milliseconds()}},
		// The marker names the effective timeout: the default, the cap, a
		// fraction rounded up to whole milliseconds.
		{name: "default", profile: profShort, args: bashArgs("sleep 30"),
			fg: &fgWant{timedOut: true, signal: "SIGTERM", timeoutMs: shortMs}},
		{name: "clamped_to_max", profile: profShort, args: bashArgs("sleep 30", "timeoutMs", 100000),
			fg: &fgWant{timedOut: true, signal: "SIGTERM", timeoutMs: shortMs}},
		{name: "fraction_rounds_up", profile: profShort, args: bashArgs("sleep 30", "timeoutMs", 250.5),
			fg: &fgWant{timedOut: true, signal: "SIGTERM", timeoutMs: 251}},
	}
}

func tailCases() []testCase {
	// seq -f 'line%03g' prints 8-byte lines: 8 of them fill the 64-byte tail.
	const gen100 = "seq -f 'line%03g' 1 100"
	capped := "^" + regexp.QuoteMeta(strings.TrimSuffix(lines("l%06d", 1243, 1250), "\n")) +
		`\n\[output truncated; full output unavailable: [^\]\n]+\]$`
	return []testCase{
		{name: "truncated", profile: profTail, args: bashArgs(gen100),
			fg: &fgWant{truncated: true}, check: spillHas(gen100, 800)},
		{name: "truncated_exit_code", profile: profTail, args: bashArgs(gen100 + "; exit 3"),
			fg: &fgWant{truncated: true, exit: 3}, check: spillHas(gen100, 800)},
		// The spill interleaves both streams in arrival order, which two pipes
		// do not fix: only its size is checked.
		{name: "truncated_stderr", profile: profTail, args: bashArgs("echo out; " + gen100 + " >&2"),
			fg: &fgWant{truncated: true}, check: spillHas("", 804)},
		{name: "exact_fit", profile: profTail, args: bashArgs("seq -f 'line%03g' 1 8"), fg: &fgWant{}},
		// The tail is exactly the last 64 bytes, mid-line or not.
		{name: "one_byte_over", profile: profTail, args: bashArgs("seq -f 'line%03g' 1 8; printf x"),
			fg: &fgWant{truncated: true}, check: spillHas("seq -f 'line%03g' 1 8; printf x", 65)},
		{name: "one_line_over", profile: profTail, args: bashArgs("seq -f 'line%03g' 1 9"),
			fg: &fgWant{truncated: true}, check: spillHas("seq -f 'line%03g' 1 9", 72)},
		// The output must be written before the timeout ends the command
		// (at 500 ms a CI node at load 70 once ran out of time before seq
		// printed): timed.
		{name: "all_markers_signal", profile: profTail, timed: gen100 + "; : > {{ready}}; sleep 300",
			fg: &fgWant{truncated: true, timedOut: true, signal: "SIGTERM"}, check: spillHas(gen100, 800)},
		{name: "all_markers_exit_code", profile: profTail, timed: "trap 'exit 5' TERM; " + gen100 + "; : > {{ready}}; sleep 300 & wait",
			fg: &fgWant{truncated: true, timedOut: true, exit: 5}, check: spillHas(gen100, 800)},
		// 10000 bytes against a 4096-byte spill cap.
		{name: "spill_capped", profile: profTail, args: bashArgs("seq -f 'l%06g' 1 1250"),
			fg: &fgWant{truncated: true}, wantRE: regexp.MustCompile(capped),
			check: func(t *testing.T, s *session, r tools.Result) {
				fg := r.Value.(*tools.Foreground)
				if fg.SpillError == "" {
					t.Errorf("10000 bytes over a %d-byte spill cap, yet no spill error (path %q)", spillLimit, fg.SpillPath)
				}
				if fg.SpillPath != "" {
					checkOutput(t, s, fmt.Sprintf(`n=$(wc -c < %[1]s); [ "$n" -gt 0 ] && [ "$n" -le %[2]d ] && seq -f 'l%%06g' 1 1250 | head -c "$n" | cmp - %[1]s && echo prefix`,
						fg.SpillPath, spillLimit), "prefix\n")
				}
			}},
	}
}

func workdirCases() []testCase {
	outside := func(wd string) *regexp.Regexp {
		return regexp.MustCompile(`^Error: invalid workdir: (<root>/)?` + regexp.QuoteMeta(wd) + ` is outside the session root <root>$`)
	}
	notDir := func(wd string) *regexp.Regexp {
		return regexp.MustCompile(`^Error: invalid workdir: (<root>/)?` + regexp.QuoteMeta(wd) + ` is not a directory$`)
	}
	return []testCase{
		{name: "default", args: bashArgs("pwd"), fg: &fgWant{}},
		{name: "empty", args: bashArgs("pwd", "workdir", ""), fg: &fgWant{}},
		{name: "root_itself", args: bashArgs("pwd", "workdir", "{{root}}"), fg: &fgWant{}},
		{name: "relative", setup: "mkdir -p {{s}}/sub", args: bashArgs("pwd", "workdir", "{{s}}/sub"), fg: &fgWant{}},
		{name: "absolute_inside", setup: "mkdir -p {{s}}/abs", args: bashArgs("pwd", "workdir", "{{root}}/{{s}}/abs"), fg: &fgWant{}},
		{name: "dotdot_inside", setup: "mkdir -p {{s}}/sub", args: bashArgs("pwd", "workdir", "{{s}}/sub/.."), fg: &fgWant{}},
		{name: "dotdot_escape", args: bashArgs("pwd", "workdir", "../../etc"), isError: true},
		{name: "absolute_outside", args: bashArgs("pwd", "workdir", "/etc"), isError: true},
		// Symlinks are resolved where the files are, and cannot lead out.
		{name: "symlink_to_slash", setup: "mkdir -p {{s}} && ln -sfn / {{s}}/escape",
			args: bashArgs("pwd", "workdir", "{{s}}/escape"), isError: true, wantRE: outside("<session>/escape")},
		{name: "symlink_to_slash_nested", setup: "mkdir -p {{s}} && ln -sfn / {{s}}/escape",
			args: bashArgs("pwd", "workdir", "{{s}}/escape/etc"), isError: true, wantRE: outside("<session>/escape/etc")},
		{name: "symlink_dotdot", setup: "mkdir -p {{s}} && ln -sfn ../.. {{s}}/up",
			args: bashArgs("pwd", "workdir", "{{s}}/up"), isError: true, wantRE: outside("<session>/up")},
		{name: "symlink_inside", setup: "mkdir -p {{s}}/real && ln -sfn real {{s}}/link",
			args: bashArgs("pwd -P", "workdir", "{{s}}/link"), fg: &fgWant{}},
		{name: "symlink_absolute_inside", setup: "mkdir -p {{s}}/real && ln -sfn {{root}}/{{s}}/real {{s}}/alink",
			args: bashArgs("pwd -P", "workdir", "{{s}}/alink"), fg: &fgWant{}},
		{name: "missing", args: bashArgs("pwd", "workdir", "{{s}}/nope"), isError: true, wantRE: notDir("<session>/nope")},
		{name: "file", setup: "mkdir -p {{s}} && touch {{s}}/file",
			args: bashArgs("pwd", "workdir", "{{s}}/file"), isError: true, wantRE: notDir("<session>/file")},
		// Opening a FIFO to check it would block: it is not a directory.
		{name: "fifo", setup: "mkdir -p {{s}} && mkfifo {{s}}/fifo",
			args: bashArgs("pwd", "workdir", "{{s}}/fifo"), isError: true, wantRE: notDir("<session>/fifo")},
		{name: "nul_byte", args: bashArgs("pwd", "workdir", "a\x00b"), isError: true},
		// A background start resolves its workdir before it returns.
		{name: "background_outside", args: bgArgs("pwd", "workdir", "/etc"), isError: true},
		{name: "background_missing", args: bgArgs("pwd", "workdir", "{{s}}/nope"), isError: true, wantRE: notDir("<session>/nope")},
		{name: "background_relative", setup: "mkdir -p {{s}}/sub", args: bgArgs("pwd", "workdir", "{{s}}/sub"),
			check: func(t *testing.T, s *session, r tools.Result) {
				bg, ok := r.Value.(*tools.Background)
				if !ok {
					t.Fatalf("want a background start, got %T", r.Value)
				}
				if out, _, _ := s.readUntilDone(bg.TaskID); out != s.root+"/"+s.id+"/sub\n" {
					t.Errorf("background pwd %q, want %q", out, s.root+"/"+s.id+"/sub\n")
				}
			}},
	}
}

func argCases() []testCase {
	const d = `"description":"d"`
	return []testCase{
		{name: "empty_object", args: `{}`, isError: true},
		{name: "empty_body", args: ``, isError: true},
		{name: "blank_command", args: `{"command":"   ",` + d + `}`, isError: true},
		{name: "command_nul_byte", args: bashArgs("echo a\x00; rm -rf /"), isError: true},
		{name: "missing_description", args: `{"command":"true"}`, isError: true},
		{name: "timeout_zero", args: `{"command":"true",` + d + `,"timeoutMs":0}`, isError: true},
		{name: "timeout_negative", args: `{"command":"true",` + d + `,"timeoutMs":-5}`, isError: true},
		{name: "timeout_string", args: `{"command":"true",` + d + `,"timeoutMs":"500"}`, isError: true},
		{name: "unknown_argument", args: `{"command":"true",` + d + `,"cwd":"/"}`, isError: true},
		{name: "not_an_object", args: `[]`, isError: true},
		{name: "null_optionals", args: `{"command":"echo ok",` + d + `,"timeoutMs":null,"workdir":null,"run_in_background":null}`, fg: &fgWant{}},
		{name: "invalid_session", session: "bad session", args: bashArgs("true"), isError: true},
		{name: "unknown_tool", tool: "zsh", args: bashArgs("true"), isError: true},
	}
}

func envCases() []testCase {
	return []testCase{
		{name: "managed", args: bashArgs("env | grep '^DSH_' | sort"), fg: &fgWant{}},
		{name: "no_leak", args: bashArgs(`echo "canary=${` + canaryName + `-unset}"; case "$(env)" in *` + canaryValue + `*) echo leaked;; *) echo clean;; esac`), fg: &fgWant{}},
	}
}

func backgroundCases() []testCase {
	return []testCase{
		{name: "output_no_task_id", tool: tools.ToolBashOutput, args: `{}`, isError: true},
		{name: "output_unknown_task", tool: tools.ToolBashOutput, args: `{"task_id":"nope"}`, isError: true},
		{name: "kill_no_task_id", tool: tools.ToolBashKill, args: `{}`, isError: true},
		{name: "kill_unknown_task", tool: tools.ToolBashKill, args: `{"task_id":"nope"}`, isError: true},
	}
}
