package executortest

import (
	"fmt"
	"regexp"
	"strconv"
	"strings"
	"time"

	"github.com/shellbox/shellbox/executor"
	"github.com/shellbox/shellbox/tools"
)

func backgroundScenarios() []scenario {
	return []scenario{
		{name: "completed", run: bgCompleted},
		{name: "cursor", run: bgCursor},
		{name: "concurrent_20", run: bgConcurrent},
		{name: "reader_behind", profile: profBuffer, run: bgReaderBehind},
		{name: "kill_running", run: bgKillRunning},
		{name: "kill_term_ignored", run: bgKillTermIgnored},
		{name: "self_signal", run: bgSelfSignal},
		{name: "other_session", run: bgOtherSession},
		{name: "seen_no_notice", run: bgSeenNoNotice},
		{name: "no_timeout", profile: profShort, run: bgNoTimeout},
		{name: "leftover_child", run: bgLeftoverChild},
	}
}

// bgCompleted: a finished task's notice comes once, with the session's next
// call (not another session's); a read then returns all its output and the
// status; a kill says it was already done.
func bgCompleted(s *session) {
	id := s.start("echo out; echo err >&2; exit 4")
	n := s.waitNotice(id)
	if want := (executor.Status{State: executor.Completed, ExitCode: 4}); n.Status != want {
		s.t.Errorf("notice status %+v, want %+v", n.Status, want)
	}
	s.other().do(tools.ToolBash, bashArgs("true"))
	s.do(tools.ToolBash, bashArgs("true"))
	r := s.do(tools.ToolBashOutput, taskArgs(id))
	if o, ok := r.Value.(*tools.TaskOutput); ok {
		if o.Stdout != "out\n" || o.Stderr != "err\n" || o.Status != (executor.Status{State: executor.Completed, ExitCode: 4}) {
			s.t.Errorf("typed read %+v", o.Output)
		}
	}
	s.do(tools.ToolBashOutput, taskArgs(id))
	r = s.do(tools.ToolBashKill, taskArgs(id))
	if k, ok := r.Value.(*tools.TaskKill); !ok || !k.AlreadyDone || k.Status.State != executor.Completed || k.Status.ExitCode != 4 {
		s.t.Errorf("typed kill %#v", r.Value)
	}
	s.do(tools.ToolBash, bashArgs("true"))
}

// bgCursor: each read returns only what is new since the previous one.
func bgCursor(s *session) {
	gate := s.f("gate")
	id := s.start(fmt.Sprintf("echo first; while [ ! -e %s ]; do sleep 0.01; done; echo second; echo err >&2", gate))
	// The task is blocked after "first": poll until it has reached us, and
	// record that read.
	deadline := time.Now().Add(waitBound)
	for {
		late := pastBound(deadline)
		o, r := s.read(id)
		if o.Stdout != "" || o.Stderr != "" || o.Status.State != executor.Running {
			s.record("bash_output "+s.normaliseArgs(taskArgs(id)), r)
			break
		}
		if late {
			s.t.Fatalf("no output from task %s within %s", id, waitBound)
		}
		time.Sleep(10 * time.Millisecond)
	}
	// Nothing new while it is blocked.
	s.do(tools.ToolBashOutput, taskArgs(id))
	// Unrecorded: the task may end, and its notice ride on this call,
	// before the call returns.
	s.sh("touch " + gate)
	out, errOut, last := s.readUntilDone(id)
	if out != "second\n" || errOut != "err\n" || last.Status != (executor.Status{State: executor.Completed}) {
		s.t.Errorf("after the gate, read stdout %q, stderr %q, status %+v; want \"second\\n\", \"err\\n\", completed 0", out, errOut, last.Status)
	}
	s.do(tools.ToolBashOutput, taskArgs(id))
}

// bgConcurrent: twenty tasks at once, each read back whole and in order.
func bgConcurrent(s *session) {
	const n, count = 20, 200
	ids := make([]string, n)
	for i := range n {
		cmd := fmt.Sprintf(`sleep 0.2; for i in $(seq 1 %d); do echo "task %d line $i"; done; echo "task %d done" >&2`, count, i, i)
		r := s.call(tools.ToolBash, bgArgs(cmd))
		bg, ok := r.Value.(*tools.Background)
		if !ok {
			s.t.Fatalf("start of task %d: %s", i, r.Text)
		}
		ids[i] = bg.TaskID
	}
	seen := map[string]bool{}
	for _, id := range ids {
		if seen[id] {
			s.t.Fatalf("task id %s given twice", id)
		}
		seen[id] = true
	}
	out := make([]strings.Builder, n)
	errOut := make([]strings.Builder, n)
	done := make([]bool, n)
	deadline := time.Now().Add(waitBound)
	for left := n; left > 0; {
		late := pastBound(deadline)
		for i, id := range ids {
			if done[i] {
				continue
			}
			o, _ := s.read(id)
			out[i].WriteString(o.Stdout)
			errOut[i].WriteString(o.Stderr)
			if o.Lost > 0 {
				s.t.Errorf("task %d lost %d bytes with the default buffer", i, o.Lost)
			}
			if o.Status.State != executor.Running {
				done[i] = true
				left--
				if o.Status != (executor.Status{State: executor.Completed}) {
					s.t.Errorf("task %d ended %+v, want completed 0", i, o.Status)
				}
			}
		}
		if left > 0 && late {
			s.t.Fatalf("tasks still running after %s", waitBound)
		}
		time.Sleep(10 * time.Millisecond)
	}
	for i := range n {
		want := lines(fmt.Sprintf("task %d line %%d", i), 1, count)
		if got := out[i].String(); got != want {
			s.t.Errorf("task %d stdout:\n%s", i, diff(want, got))
		}
		if got, want := errOut[i].String(), fmt.Sprintf("task %d done\n", i); got != want {
			s.t.Errorf("task %d stderr %q, want %q", i, got, want)
		}
	}
}

var lostRE = regexp.MustCompile(`^(?s)(?:.*\n)?\[output lost: (\d+) bytes not kept in memory; full output: <path>\]\nstatus: completed, exit code: 0$`)

// bgReaderBehind: a reader that fell behind a 1 KiB buffer gets the newest
// output still in memory, the count of the bytes lost, and the spill file,
// which holds everything.
func bgReaderBehind(s *session) {
	full := lines("%d", 1, 2000)
	id := s.start("seq 1 2000")
	s.waitNotice(id)
	o, r := s.read(id)
	text := s.normalise(r.Text)
	m := lostRE.FindStringSubmatch(text)
	switch {
	case m == nil:
		s.t.Errorf("read text does not match %s:\n%s", lostRE, indent(text))
	case m[1] != strconv.FormatInt(o.Lost, 10):
		s.t.Errorf("text says %s bytes lost, the typed value %d", m[1], o.Lost)
	}
	if o.Stdout == "" || !strings.HasSuffix(full, o.Stdout) || int64(len(o.Stdout))+o.Lost != int64(len(full)) {
		s.t.Errorf("read %d bytes (a suffix of the output: %v) and lost %d, of %d: want a non-empty suffix and the rest lost",
			len(o.Stdout), strings.HasSuffix(full, o.Stdout), o.Lost, len(full))
	}
	s.do(tools.ToolBashOutput, taskArgs(id))
	if o.SpillPath == "" {
		s.t.Fatalf("no spill path for a read that lost bytes (spill error %q)", o.SpillError)
	}
	s.do(tools.ToolBash, bashArgs(fmt.Sprintf("seq 1 2000 | cmp - %s && echo same", o.SpillPath)))
}

// treeTask is a background command that prints "started", then holds a
// child and a setsid grandchild, recording their pids.
func (s *session) treeTask(prefix string) string {
	return fmt.Sprintf("%secho started; echo $$ > %s; sleep 300 & echo $! > %s; %s; echo ok > %s; wait",
		prefix, s.f("leader.pid"), s.f("child.pid"), s.setsidChild("grandchild"), s.f("ready"))
}

// bgKillRunning: bash_kill ends the whole tree of a running task; the task
// then reads as killed, with its output, and no notice repeats it.
func bgKillRunning(s *session) {
	id := s.start(s.treeTask(""))
	from := s.callCount()
	s.waitFiles(s.f("ready"))
	r := s.do(tools.ToolBashKill, taskArgs(id))
	if k, ok := r.Value.(*tools.TaskKill); !ok || k.AlreadyDone {
		s.t.Errorf("typed kill %#v, want not already done", r.Value)
	}
	s.do(tools.ToolBashOutput, taskArgs(id))
	s.checkGone("leader", "child", "grandchild")
	r = s.do(tools.ToolBashKill, taskArgs(id))
	if k, ok := r.Value.(*tools.TaskKill); !ok || !k.AlreadyDone || k.Status.State != executor.Killed {
		s.t.Errorf("typed second kill %#v, want already done, killed", r.Value)
	}
	s.call(tools.ToolBash, bashArgs("true"))
	if ns := s.noticesFor(id, from); len(ns) > 0 {
		s.t.Errorf("a notice for a task the model killed: %q", ns[0].n.Text)
	}
}

// bgKillTermIgnored: a task that ignores SIGTERM is killed after the grace.
func bgKillTermIgnored(s *session) {
	id := s.start(s.treeTask("trap '' TERM; "))
	s.waitFiles(s.f("ready"))
	s.do(tools.ToolBashKill, taskArgs(id))
	s.do(tools.ToolBashOutput, taskArgs(id))
	s.checkGone("leader", "child", "grandchild")
}

// bgSelfSignal: a task that dies of a signal reads, and is noticed, as
// killed.
func bgSelfSignal(s *session) {
	id := s.start("kill -9 $$")
	n := s.waitNotice(id)
	if n.Status.State != executor.Killed || n.Status.Signal != "SIGKILL" {
		s.t.Errorf("notice status %+v, want killed by SIGKILL", n.Status)
	}
	s.do(tools.ToolBash, bashArgs("true"))
	r := s.do(tools.ToolBashOutput, taskArgs(id))
	if o, ok := r.Value.(*tools.TaskOutput); ok && o.Status.State != executor.Killed {
		s.t.Errorf("typed status %+v, want killed", o.Status)
	}
	s.do(tools.ToolBashKill, taskArgs(id))
}

// bgOtherSession: another session's task id answers exactly like an unknown
// one, for reads and kills, and the task is untouched.
func bgOtherSession(s *session) {
	id := s.start("sleep 300")
	o := s.other()
	for _, tool := range []string{tools.ToolBashOutput, tools.ToolBashKill} {
		r := o.do(tool, taskArgs(id))
		if r.Text != "Error: no such task: "+id || !r.IsError {
			s.t.Errorf("%s of another session's task: %q, want exactly the unknown-id error", tool, r.Text)
		}
	}
	s.do(tools.ToolBashOutput, taskArgs(id))
	s.do(tools.ToolBashKill, taskArgs(id))
	o.do(tools.ToolBashOutput, taskArgs(id))
}

// bgSeenNoNotice: once bash_output has shown a task's end, no notice for it
// comes, with that result or any later one.
func bgSeenNoNotice(s *session) {
	id := s.start("echo x")
	out, _, _ := s.readUntilDone(id)
	end := s.callCount()
	if out != "x\n" {
		s.t.Errorf("read %q, want \"x\\n\"", out)
	}
	s.do(tools.ToolBashOutput, taskArgs(id))
	s.do(tools.ToolBash, bashArgs("true"))
	if ns := s.noticesFor(id, end); len(ns) > 0 {
		s.t.Errorf("notice %q after bash_output showed the end", ns[0].n.Text)
	}
}

// bgNoTimeout: no timeout applies to a background task, neither the
// default nor one the call names.
func bgNoTimeout(s *session) {
	id := s.start(fmt.Sprintf("sleep %d.%03d; echo late", shortMs*2/1000, shortMs*2%1000), "timeoutMs", 100)
	s.waitNotice(id)
	s.do(tools.ToolBashOutput, taskArgs(id))
}

// bgLeftoverChild: a task whose command exits ends; what it left running
// goes with it.
func bgLeftoverChild(s *session) {
	id := s.start(fmt.Sprintf("sleep 300 & echo $! > %s", s.f("child.pid")))
	s.waitNotice(id)
	s.checkGone("child")
}
