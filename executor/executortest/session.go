package executortest

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/shellbox/shellbox/executor"
	"github.com/shellbox/shellbox/tools"
)

// session is one model session of one case: it makes the calls, checks the
// invariants every result owes, records the transcript of a scenario and
// normalises texts for comparison.
type session struct {
	t     *testing.T
	suite *suite
	in    *instance
	prof  profile
	id    string
	root  string
	home  string
	// alias is the placeholder of id in normalised text.
	alias string
	// golden names the transcript's golden file (default <group>_<name>).
	golden string
	// timeoutMs, set by raceTimeout, is the timeout of its call, normalised
	// as <timeoutMs> where a text names it.
	timeoutMs int64

	feed chan tools.Notice // from Config.OnNotice

	// mu guards what follows; a session and its peers share it.
	mu      *sync.Mutex
	peers   []*session // other sessions of a cross-session case
	ids     []string   // task ids, in order of appearance
	paths   []string   // spill paths seen
	calls   int
	notices []seenNotice // every notice returned with a result
	pending []tools.Notice
	script  strings.Builder
}

// seenNotice is a notice and the index of the call whose result carried it.
type seenNotice struct {
	call int
	n    tools.Notice
}

// other returns a second session of the same executor, for cross-session
// cases; its id is normalised as <other>.
func (s *session) other() *session {
	o := s.suite.newSession(s.t, s.prof, s.id+"-b")
	o.alias = "<other>"
	o.mu = s.mu
	s.mu.Lock()
	defer s.mu.Unlock()
	o.ids = append([]string(nil), s.ids...)
	s.peers = append(s.peers, o)
	o.peers = append(o.peers, s)
	return o
}

// f names a file of the session in the root: sessions share a local root.
func (s *session) f(name string) string { return s.id + "-" + name }

// call makes one tool call with raw JSON args and checks the invariants of
// its result. It is not recorded in the transcript.
func (s *session) call(tool, args string) tools.Result {
	s.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), callBound)
	defer cancel()
	return s.callCtx(ctx, tool, args)
}

// callCtx is call under the caller's ctx. A call still running callBound
// after ctx is done fails the test: the executor ignored its ctx.
func (s *session) callCtx(ctx context.Context, tool, args string) tools.Result {
	s.t.Helper()
	done := make(chan tools.Result, 1)
	go func() {
		done <- s.in.call(ctx, tools.Invocation{Session: s.id, Tool: tool, Args: json.RawMessage(args)})
	}()
	var r tools.Result
	select {
	case r = <-done:
	case <-time.After(callBound + 10*time.Second):
		s.t.Fatalf("%s %s: the call did not return, even %s after its context ended", tool, args, callBound)
	}
	s.note(r)
	s.checkInvariants(tool, args, r)
	return r
}

// do makes a recorded call: it and its normalised result join the
// transcript.
func (s *session) do(tool, args string) tools.Result {
	s.t.Helper()
	r := s.call(tool, args)
	s.record(tool+" "+s.normaliseArgs(args), r)
	return r
}

// doAs is do with a label in the transcript instead of the arguments, for
// helper commands whose text would only be noise.
func (s *session) doAs(label, tool, args string) tools.Result {
	s.t.Helper()
	r := s.call(tool, args)
	s.record(label, r)
	return r
}

// record appends a call and its result to the transcript. Notices are shown
// after the text they came with.
func (s *session) record(label string, r tools.Result) {
	s.mu.Lock()
	defer s.mu.Unlock()
	prefix := ""
	if s.alias == "<other>" {
		prefix = "[other] "
	}
	// A peer's calls go to the first session's transcript, so a
	// cross-session scenario reads as one conversation.
	w := &s.script
	if s.alias == "<other>" && len(s.peers) > 0 {
		w = &s.peers[0].script
	}
	fmt.Fprintf(w, "$ %s%s\n%s\n", prefix, label, s.normaliseLocked(r.Text))
	for _, n := range r.Notices {
		fmt.Fprintf(w, "(notice) %s\n", s.normaliseLocked(n.Text))
	}
}

// note remembers the task ids, spill paths and notices a result carries.
func (s *session) note(r tools.Result) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.calls++
	switch v := r.Value.(type) {
	case *tools.Background:
		s.addID(v.TaskID)
	case *tools.Foreground:
		s.addPath(v.SpillPath)
	case *tools.TaskOutput:
		s.addPath(v.SpillPath)
	}
	for _, n := range r.Notices {
		s.notices = append(s.notices, seenNotice{call: s.calls, n: n})
	}
}

func (s *session) addID(id string) {
	for _, p := range append([]*session{s}, s.peers...) {
		if !contains(p.ids, id) && id != "" {
			p.ids = append(p.ids, id)
		}
	}
}

func (s *session) addPath(p string) {
	if p != "" && !contains(s.paths, p) {
		s.paths = append(s.paths, p)
	}
}

func contains(xs []string, x string) bool {
	for _, y := range xs {
		if y == x {
			return true
		}
	}
	return false
}

// checkInvariants checks what every result owes whatever the case: the typed
// value matches the kind of text, bounds hold, spill facts are consistent.
func (s *session) checkInvariants(tool, args string, r tools.Result) {
	t := s.t
	t.Helper()
	lim := s.in.lim
	where := func() string { return fmt.Sprintf("%s %s", tool, args) }
	if _, isErr := r.Value.(*tools.ErrorValue); isErr != r.IsError {
		t.Errorf("%s: IsError=%v with a %T value; text %q", where(), r.IsError, r.Value, r.Text)
	}
	switch v := r.Value.(type) {
	case *tools.ErrorValue:
		if r.Text != "Error: "+v.Message {
			t.Errorf("%s: error text %q does not carry the message %q", where(), r.Text, v.Message)
		}
	case *tools.Foreground:
		if len(v.Stdout) > lim.TailBytes || len(v.Stderr) > lim.TailBytes {
			t.Errorf("%s: kept %d stdout and %d stderr bytes, over the tail bound %d", where(), len(v.Stdout), len(v.Stderr), lim.TailBytes)
		}
		if v.Truncated && v.SpillPath == "" && v.SpillError == "" {
			t.Errorf("%s: truncated without a spill path or a spill error", where())
		}
		if !v.Truncated && (v.SpillPath != "" || v.SpillError != "") {
			t.Errorf("%s: not truncated, yet spill path %q / spill error %q", where(), v.SpillPath, v.SpillError)
		}
		if v.TimeoutMs <= 0 {
			t.Errorf("%s: effective timeout %dms is not positive", where(), v.TimeoutMs)
		}
		if v.Signal != "" && !strings.HasPrefix(v.Signal, "SIG") {
			t.Errorf("%s: signal %q is not a signal name", where(), v.Signal)
		}
		if v.Kind != "foreground" {
			t.Errorf("%s: kind %q", where(), v.Kind)
		}
	case *tools.Background:
		if r.Text != "started background task "+v.TaskID || v.TaskID == "" || strings.ContainsAny(v.TaskID, " \t\n") {
			t.Errorf("%s: background start %q with task id %q", where(), r.Text, v.TaskID)
		}
	case *tools.TaskOutput:
		switch v.Status.State {
		case executor.Running, executor.Completed, executor.Killed:
		default:
			t.Errorf("%s: unknown task state %q", where(), v.Status.State)
		}
		if len(v.Stdout) > lim.BufferBytes || len(v.Stderr) > lim.BufferBytes {
			t.Errorf("%s: read %d stdout and %d stderr bytes, over the buffer bound %d", where(), len(v.Stdout), len(v.Stderr), lim.BufferBytes)
		}
		if v.Lost < 0 || v.Lost > 0 && v.SpillPath == "" && v.SpillError == "" {
			t.Errorf("%s: lost %d bytes with spill path %q, spill error %q", where(), v.Lost, v.SpillPath, v.SpillError)
		}
	case *tools.TaskKill:
		if v.AlreadyDone && v.Status.State == executor.Running {
			t.Errorf("%s: already done, yet running", where())
		}
	default:
		t.Errorf("%s: unexpected value %T", where(), r.Value)
	}
}

// taskIDRE finds task ids where the texts and arguments carry them.
var taskIDRE = regexp.MustCompile(`(task:? |"task_id":")([^\s"]+)`)

// fullOutputRE finds spill paths in markers, in case one was not seen in a
// typed value.
var fullOutputRE = regexp.MustCompile(`(full output: )([^\]\n]+)\]`)

// normalise replaces the dynamic parts of text with placeholders.
func (s *session) normalise(text string) string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.normaliseLocked(text)
}

func (s *session) normaliseLocked(text string) string {
	if s.timeoutMs != 0 {
		n := strconv.FormatInt(s.timeoutMs, 10)
		text = strings.NewReplacer(
			"[timed out after "+n+"ms]", "[timed out after <timeoutMs>ms]",
			`"timeoutMs":`+n+",", `"timeoutMs":<timeoutMs>,`,
			`"timeoutMs":`+n+"}", `"timeoutMs":<timeoutMs>}`,
		).Replace(text)
	}
	text = taskIDRE.ReplaceAllStringFunc(text, func(m string) string {
		sub := taskIDRE.FindStringSubmatch(m)
		for i, id := range s.ids {
			if sub[2] == id {
				return sub[1] + fmt.Sprintf("<id%d>", i+1)
			}
		}
		return m
	})
	// Literal replacements, longest first, so a path that contains another
	// is replaced whole.
	type repl struct{ from, to string }
	var rs []repl
	for _, p := range s.paths {
		rs = append(rs, repl{p, "<path>"})
	}
	rs = append(rs, repl{s.root, "<root>"})
	if s.home != "" {
		rs = append(rs, repl{s.home, "<home>"})
		// The managed variable names which it is: where the home is the
		// session cwd (a server's sandboxes: both /workspace), the bare
		// path alone would read as <root>.
		rs = append(rs, repl{"DSH_HOME=" + s.home, "DSH_HOME=<home>"})
	}
	alias := s.alias
	if alias == "" {
		alias = "<session>"
	}
	rs = append(rs, repl{s.id, alias})
	for _, p := range s.peers {
		pa := p.alias
		if pa == "" {
			pa = "<session>"
		}
		rs = append(rs, repl{p.id, pa})
	}
	sort.SliceStable(rs, func(i, j int) bool { return len(rs[i].from) > len(rs[j].from) })
	var olds []string
	for _, r := range rs {
		if r.from != "" && r.from != "/" {
			olds = append(olds, r.from, r.to)
		}
	}
	text = strings.NewReplacer(olds...).Replace(text)
	return fullOutputRE.ReplaceAllString(text, "${1}<path>]")
}

// normaliseArgs renders args for the transcript: the description dropped
// (it is UI text), keys sorted, dynamic parts replaced.
func (s *session) normaliseArgs(args string) string {
	var m map[string]any
	dec := json.NewDecoder(strings.NewReader(args))
	dec.UseNumber()
	if err := dec.Decode(&m); err != nil || m == nil {
		return s.normalise(args)
	}
	delete(m, "description")
	return s.normalise(encode(m))
}

// encode marshals v without HTML escaping: commands are full of < > &.
func encode(v any) string {
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		panic("executortest: encode: " + err.Error())
	}
	return strings.TrimSuffix(b.String(), "\n")
}

// bashArgs builds bash arguments: command, a description, then key/value
// pairs.
func bashArgs(command string, kv ...any) string {
	m := map[string]any{"command": command, "description": "run a conformance check"}
	for i := 0; i+1 < len(kv); i += 2 {
		m[kv[i].(string)] = kv[i+1]
	}
	return encode(m)
}

// bgArgs builds the arguments of a background start.
func bgArgs(command string, kv ...any) string {
	return bashArgs(command, append([]any{"run_in_background", true}, kv...)...)
}

// taskArgs builds bash_output / bash_kill arguments.
func taskArgs(id string) string { return encode(map[string]string{"task_id": id}) }

// sh runs a helper command in the foreground, unrecorded, and returns its
// stdout. Anything but a clean exit fails the test.
func (s *session) sh(command string, kv ...any) string {
	s.t.Helper()
	r := s.call(tools.ToolBash, bashArgs(command, kv...))
	fg, ok := r.Value.(*tools.Foreground)
	if !ok || fg.ExitCode != 0 || fg.Signal != "" || fg.TimedOut {
		s.t.Fatalf("helper command %q failed:\n%s", command, r.Text)
	}
	return fg.Stdout
}

// waitFiles waits until every named file in the root is non-empty: a
// command writes its pids there, and the case must not act before. The
// wait is bounded by its call's timeout (waitBound) alone: a count of polls
// ran out sooner where each poll's sleep is a slow exec.
func (s *session) waitFiles(names ...string) {
	s.t.Helper()
	var conds []string
	for _, n := range names {
		conds = append(conds, fmt.Sprintf("[ -s %s ]", n))
	}
	s.sh(fmt.Sprintf(`until %s; do sleep 0.01; done`, strings.Join(conds, " && ")), "timeoutMs", waitBound.Milliseconds())
}

// The timeouts of raceTimeout's attempts: the first, doubled after each
// attempt that tested nothing, up to the last. The commands it runs sleep
// longer than the last and the grace together.
const (
	raceFirstMs = 3000
	raceLastMs  = 24000
)

// raceTimeout makes a call whose timer must fire only once its command has
// reached the state its case is about (traps set, output written, pids
// recorded), and returns the result and the timeout it had. attempt makes
// the call with the timeout it is given (recorded or not); its command
// creates the file s.f("ready") once in that state, and only then, so
// that file tells whether it got there before the timer fired: a command
// that had not yet set its traps dies of the SIGTERM, one that had carries
// on to create it.
//
// The timer starts with the command, and the command's start races it:
// no fixed timeout wins every time (on a CI node at load 70 a shell had
// not printed 500 ms after its start). An attempt whose command was not
// ready tests nothing; it is made again with the timeout doubled, its
// transcript entry dropped. Only the ready attempt's result is returned and checked,
// as strictly as ever; none ready even at raceLastMs fails the case.
func (s *session) raceTimeout(attempt func(ms int64) tools.Result) (tools.Result, int64) {
	s.t.Helper()
	ready := s.f("ready")
	for ms := int64(raceFirstMs); ; ms *= 2 {
		s.sh("rm -f " + ready)
		s.mu.Lock()
		s.timeoutMs = ms
		mark := s.script.Len()
		s.mu.Unlock()
		r := attempt(ms)
		if s.sh(fmt.Sprintf("[ -e %s ] && echo ready || echo not", ready)) == "ready\n" {
			return r, ms
		}
		if ms >= raceLastMs {
			s.t.Fatalf("the command had not reached the state under test when its timer fired, even with a %d ms timeout; the last result:\n%s", ms, indent(r.Text))
		}
		s.t.Logf("with a %d ms timeout the command had not reached the state under test when the timer fired (a slow start); again with %d ms. That result:\n%s",
			ms, 2*ms, indent(r.Text))
		s.mu.Lock()
		kept := s.script.String()[:mark]
		s.script.Reset()
		s.script.WriteString(kept)
		s.mu.Unlock()
	}
}

// start starts a recorded background task and returns its id.
func (s *session) start(command string, kv ...any) string {
	s.t.Helper()
	r := s.do(tools.ToolBash, bgArgs(command, kv...))
	bg, ok := r.Value.(*tools.Background)
	if !ok {
		s.t.Fatalf("background start of %q: got %T:\n%s", command, r.Value, r.Text)
	}
	return bg.TaskID
}

// read makes an unrecorded bash_output call and returns its typed value.
func (s *session) read(id string) (*tools.TaskOutput, tools.Result) {
	s.t.Helper()
	r := s.call(tools.ToolBashOutput, taskArgs(id))
	o, ok := r.Value.(*tools.TaskOutput)
	if !ok {
		s.t.Fatalf("bash_output %s: got %T:\n%s", id, r.Value, r.Text)
	}
	return o, r
}

// readUntilDone polls bash_output until the task reports a final status and
// returns everything read (the reads are not recorded) and the last read.
func (s *session) readUntilDone(id string) (stdout, stderr string, last *tools.TaskOutput) {
	s.t.Helper()
	var out, errOut strings.Builder
	deadline := time.Now().Add(waitBound)
	for {
		late := pastBound(deadline)
		o, _ := s.read(id)
		out.WriteString(o.Stdout)
		errOut.WriteString(o.Stderr)
		if o.Lost > 0 {
			s.t.Errorf("bash_output %s: lost %d bytes with the default buffer", id, o.Lost)
		}
		if o.Status.State != executor.Running {
			return out.String(), errOut.String(), o
		}
		if late {
			s.t.Fatalf("task %s still running after %s; read so far:\n%s", id, waitBound, out.String())
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// waitNotice waits for the completion notice of task id from OnNotice. The
// next call of the session then carries it in Result.Notices (unless that
// call is a bash_output or bash_kill of the same task).
func (s *session) waitNotice(id string) tools.Notice {
	s.t.Helper()
	s.mu.Lock()
	for i, n := range s.pending {
		if n.TaskID == id {
			s.pending = append(s.pending[:i:i], s.pending[i+1:]...)
			s.mu.Unlock()
			return n
		}
	}
	s.mu.Unlock()
	timeout := time.After(waitBound)
	for {
		select {
		case n := <-s.feed:
			if n.TaskID == id {
				return n
			}
			s.mu.Lock()
			s.pending = append(s.pending, n)
			s.mu.Unlock()
		case <-timeout:
			s.t.Fatalf("no completion notice for task %s within %s", id, waitBound)
		}
	}
}

// noticesFor returns the notices of task id returned with calls from index
// from on (1-based call numbers).
func (s *session) noticesFor(id string, from int) []seenNotice {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []seenNotice
	for _, n := range s.notices {
		if n.n.TaskID == id && n.call >= from {
			out = append(out, n)
		}
	}
	return out
}

// callCount is the number of calls made so far.
func (s *session) callCount() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.calls
}

// checkGone records a check that the processes whose pids are in the named
// pid files (<session>-<name>.pid) no longer exist, and fails the case for
// any that does. A zombie counts as gone, and so does a process that is
// gone within 100 polls 0.1 s apart (10 s and more): one SIGKILLed a moment
// ago may still be on its way out (its /proc entry there, its stat or
// cmdline gone the next instant), and a call whose caller went away may
// return before its tree has had its grace; a survivor is still there
// after all the polls.
func (s *session) checkGone(names ...string) {
	s.t.Helper()
	var b strings.Builder
	b.WriteString(`state() { p=$(cat "$1" 2>/dev/null) || { echo "missing pid file"; return; }; ` +
		`i=0; while [ $i -lt 100 ]; do i=$((i+1)); ` +
		`st=$(cut -d' ' -f3 /proc/$p/stat 2>/dev/null) || { echo gone; return; }; ` +
		`case "$st" in Z|X|"") echo gone; return;; esac; sleep 0.1; done; ` +
		`echo "alive: $(tr '\0' ' ' < /proc/$p/cmdline 2>/dev/null)"; }`)
	for _, n := range names {
		fmt.Fprintf(&b, `; echo "%s: $(state %s)"`, n, s.f(n+".pid"))
	}
	r := s.doAs("bash <are gone: "+strings.Join(names, " ")+">", tools.ToolBash, bashArgs(b.String()))
	fg, ok := r.Value.(*tools.Foreground)
	if !ok {
		s.t.Fatalf("process check failed:\n%s", r.Text)
	}
	for _, line := range strings.Split(strings.TrimSpace(fg.Stdout), "\n") {
		if !strings.HasSuffix(line, ": gone") {
			s.t.Errorf("process survived its command: %s", line)
		}
	}
}

// want compares a normalised text exactly.
func (s *session) want(what string, r tools.Result, want string) {
	s.t.Helper()
	if got := s.normalise(r.Text); got != want {
		s.t.Errorf("%s:\ngot:\n%s\nwant:\n%s", what, indent(got), indent(want))
	}
}

// transcript returns the recorded calls.
func (s *session) transcript() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.script.String()
}

func indent(s string) string {
	return "\t" + strings.ReplaceAll(s, "\n", "\n\t")
}
