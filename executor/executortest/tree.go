package executortest

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/shellbox/shellbox/tools"
)

// The tree scenarios check the execution semantics' "nothing the command
// started survives it" (docs/architecture.md#execution-semantics-every-executor): commands write the pids of what they start to files in the root, and a
// follow-up call checks, through the executor, that those processes are gone.

func treeScenarios() []scenario {
	return []scenario{
		{name: "timeout_setsid_grandchild", run: timeoutSetsidGrandchild},
		{name: "timeout_term_ignoring_tree", run: timeoutTermIgnoringTree},
		{name: "exit_leaves_child_on_pipe", run: exitLeavesChildOnPipe},
		{name: "exit_leaves_nohup_child", run: exitLeavesNohupChild},
		{name: "exit_leaves_daemon", run: exitLeavesDaemon},
		{name: "cancel_kills_tree", run: cancelKillsTree},
		{name: "cancel_before_start", run: cancelBeforeStart},
	}
}

// setsidChild starts `sleep 300` in a new session whose pid is written to
// the named pid file, and waits until it is: the grandchild has left the
// command's process group and session.
func (s *session) setsidChild(name string) string {
	f := s.f(name + ".pid")
	return fmt.Sprintf(`setsid sh -c 'echo $$ > %[1]s; exec sleep 300' & while [ ! -s %[1]s ]; do sleep 0.01; done`, f)
}

// timeoutSetsidGrandchild: a timeout ends a grandchild that called setsid.
// The grandchild must be there before the timer fires: the call is timed
// (session.raceTimeout).
func timeoutSetsidGrandchild(s *session) {
	cmd := fmt.Sprintf("echo $$ > %s; %s; : > %s; sleep 300", s.f("leader.pid"), s.setsidChild("grandchild"), s.f("ready"))
	s.raceTimeout(func(ms int64) tools.Result { return s.do(tools.ToolBash, bashArgs(cmd, "timeoutMs", ms)) })
	s.checkGone("leader", "grandchild")
}

// timeoutTermIgnoringTree: a tree that ignores SIGTERM is SIGKILLed after
// the grace period, children included. The trap and the child must be
// there before the timer fires: the call is timed (session.raceTimeout).
func timeoutTermIgnoringTree(s *session) {
	cmd := fmt.Sprintf("trap '' TERM; echo $$ > %s; sleep 300 & echo $! > %s; : > %s; sleep 300",
		s.f("leader.pid"), s.f("child.pid"), s.f("ready"))
	s.raceTimeout(func(ms int64) tools.Result { return s.do(tools.ToolBash, bashArgs(cmd, "timeoutMs", ms)) })
	s.checkGone("leader", "child")
}

// exitLeavesChildOnPipe: `sleep 300 &` keeps the stdout pipe open after the
// command exits 0. The call must still return, and the child be gone.
func exitLeavesChildOnPipe(s *session) {
	s.do(tools.ToolBash, bashArgs(fmt.Sprintf("sleep 300 & echo $! > %s", s.f("child.pid"))))
	s.checkGone("child")
}

// exitLeavesNohupChild: nohup does not save a child from the end of its
// command.
func exitLeavesNohupChild(s *session) {
	s.do(tools.ToolBash, bashArgs(fmt.Sprintf("nohup sleep 300 > /dev/null 2>&1 & echo $! > %s", s.f("child.pid"))))
	s.checkGone("child")
}

// exitLeavesDaemon: a daemon (forked, setsid, streams closed) does not
// survive its command either.
func exitLeavesDaemon(s *session) {
	f := s.f("daemon.pid")
	s.do(tools.ToolBash, bashArgs(fmt.Sprintf(
		`setsid -f sh -c 'echo $$ > %[1]s; exec sleep 300' > /dev/null 2>&1 < /dev/null; while [ ! -s %[1]s ]; do sleep 0.01; done; echo started`, f)))
	s.checkGone("daemon")
}

// cancelKillsTree: a caller that goes away mid-call gets "tool call
// aborted", and the command's tree (which ignores SIGTERM, and holds a setsid
// grandchild) is gone.
func cancelKillsTree(s *session) {
	ready := s.f("ready")
	args := bashArgs(fmt.Sprintf("trap '' TERM; echo $$ > %s; sleep 300 & echo $! > %s; %s; echo ok > %s; wait",
		s.f("leader.pid"), s.f("child.pid"), s.setsidChild("grandchild"), ready))
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan tools.Result, 1)
	go func() {
		done <- s.in.call(ctx, tools.Invocation{Session: s.id, Tool: tools.ToolBash, Args: json.RawMessage(args)})
	}()
	s.waitFiles(ready)
	cancel()
	var r tools.Result
	select {
	case r = <-done:
	case <-time.After(callBound):
		s.t.Fatalf("the call did not return within %s of its context being cancelled", callBound)
	}
	s.note(r)
	s.checkInvariants(tools.ToolBash, args, r)
	s.record("bash "+s.normaliseArgs(args)+" <cancelled once ready>", r)
	s.checkGone("leader", "child", "grandchild")
}

// cancelBeforeStart: a call whose context is already cancelled is aborted.
func cancelBeforeStart(s *session) {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	args := bashArgs("sleep 300")
	r := s.callCtx(ctx, tools.ToolBash, args)
	s.record("bash "+s.normaliseArgs(args)+" <context already cancelled>", r)
}
