package executortest

import (
	"context"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/shellbox/shellbox/executor"
	"github.com/shellbox/shellbox/tools"
)

// Harness is what an implementation provides to Run.
type Harness struct {
	// New returns a fresh executor configured with lim. It registers the
	// executor's cleanup with t.Cleanup and fails t when it cannot build one.
	// Run calls it once per limits profile, from the goroutine of the test
	// that called Run.
	New func(t *testing.T, lim executor.Limits) executor.BashExecutor

	// Root returns the session cwd of session on e, as its commands see it:
	// the configured directory of a local executor, "/workspace" in a sandbox.
	// FixedRoot builds it when the root does not depend on e or the session.
	Root func(e executor.BashExecutor, session string) string

	// Home is DSH_HOME as commands see it. Run configures the Toolset with it
	// and expects commands to see exactly it.
	Home string

	// InProcess says the executor's memory is this test process's, so the
	// memory cases can bound the Go heap while a command prints 100 MB.
	InProcess bool

	// MemoryProbe, for an executor out of process, returns the bytes its side
	// uses now (e.g. the sandbox agent's RSS). Optional: without it and
	// without InProcess, the memory cases check the output but not memory.
	MemoryProbe func() uint64

	// EndSession, if set, is called when the case that used session on e
	// has ended, after its checks: a sandboxed harness removes the session's
	// sandbox there, so a suite run holds only the sandboxes of running cases.
	EndSession func(e executor.BashExecutor, session string)

	// Transport, if set, carries every call of the suite to ts through a
	// transport (the server's REST API, MCP) instead of calling ts.Call, so
	// the same cases hold the transport to the same contract. Run calls it
	// once per limits profile, after New, with that profile's Toolset; the
	// returned function must return the Result the transport delivered,
	// typed Value included, and honour ctx like ts.Call does.
	Transport func(t *testing.T, ts *tools.Toolset) func(ctx context.Context, inv tools.Invocation) tools.Result

	// Notices, if set, is where the completion notices of background tasks
	// come from when the tasks do not end in the Toolset Run made (a remote
	// server runs its own, reached through Transport). Run calls it once per
	// limits profile, after Transport, with that profile's executor and the
	// function to give every notice to (it does not block). It returns once
	// the notices of tasks started from then on are sure to be delivered,
	// and stops delivering when t ends. Without it, notices come from the
	// Toolset's OnNotice.
	Notices func(t *testing.T, e executor.BashExecutor, notify func(session string, n tools.Notice))

	// Skip names the cases ("group/name") the transport cannot express, each
	// with the reason, e.g. a call MCP refuses at the protocol level.
	Skip map[string]string
}

// FixedRoot is a Harness.Root for executors whose session cwd is one
// directory whatever the executor or session.
func FixedRoot(dir string) func(executor.BashExecutor, string) string {
	return func(executor.BashExecutor, string) string { return dir }
}

// The canary is set in the test process before any executor exists; no
// command may see it (the server's environment never leaks:
// docs/architecture.md#the-tool-contract).
const (
	canaryName  = "SHELLBOX_CONFORMANCE_CANARY"
	canaryValue = "leaked-from-the-test-process"
)

// heapBound is how much the executor's memory may grow while a command prints
// 100 MB: the output must stream through bounded buffers, not accumulate.
const heapBound = 32 << 20

// Bounds that turn a hang into a failure. They are not assertions on
// duration: a conforming executor is far inside them, even under gVisor on
// a 2-core CI node running two such suites at once. There, at load ~20,
// memory/background_64MB took 41-49 s, most of it waiting for the notice,
// and bg/concurrent_20 33 s: close to the 30 s these bounds once were.
const (
	callBound = 3 * time.Minute
	waitBound = 2 * time.Minute
)

// pastBound reports whether deadline (a start plus waitBound) has passed.
// A poll asks it before its reads, and fails on a task still running only
// in reads begun after the deadline: the bound is on the task, not on the
// time the reads take. On a loaded 2-core CI node a bash_output through a
// cluster takes seconds, and twenty of them in a row had the bound run
// out while the reads, not the tasks, were slow (bg/concurrent_20 over MCP,
// its twenty starts alone 116 s).
func pastBound(deadline time.Time) bool { return time.Now().After(deadline) }

// profile names a set of limits an executor is created with.
type profile int

const (
	// profDefault: the defaults of the tool contract and the execution
	// semantics (executor.DefaultLimits). Every profile keeps the default
	// SIGTERM-to-SIGKILL grace (2 s): the cases whose command traps SIGTERM
	// and exits (timeout/term_trapped_*, tail/all_markers_exit_code) need
	// the trap run and the shell gone within it, or they read as SIGKILLed:
	// a signal, a trap and an exit must not have to beat a scheduler at
	// load 70 by a fixed 300 ms, as these profiles once had them do.
	profDefault profile = iota
	// profTail: a 64-byte tail and a 4 KiB spill cap, for truncation.
	profTail
	// profBuffer: a 1 KiB background buffer, for readers falling behind.
	profBuffer
	// profShort: a 400 ms default and maximum timeout, for clamping.
	profShort
	numProfiles
)

const (
	tailBytes   = 64
	spillLimit  = 4096
	bufferBytes = 1024
	shortMs     = 400
)

func (p profile) limits() executor.Limits {
	l := executor.DefaultLimits()
	switch p {
	case profTail:
		l.TailBytes = tailBytes
		l.SpillLimit = spillLimit
	case profBuffer:
		l.BufferBytes = bufferBytes
	case profShort:
		l.DefaultTimeout = shortMs * time.Millisecond
		l.MaxTimeout = shortMs * time.Millisecond
	}
	return l
}

func (p profile) String() string {
	return [...]string{"default", "tail", "buffer", "short"}[p]
}

// instance is one executor and the Toolset over it.
type instance struct {
	exec  executor.BashExecutor
	tools *tools.Toolset
	lim   executor.Limits
	// call makes a tool call: tools.Call, or through Harness.Transport.
	call func(ctx context.Context, inv tools.Invocation) tools.Result
}

// suite is one Run: the harness, an instance per profile, and the sessions
// that completion notices are routed to.
type suite struct {
	h     Harness
	insts [numProfiles]*instance

	mu       sync.Mutex
	sessions map[string]*session
}

// group is a set of cases and scenarios sharing a name prefix.
type group struct {
	name      string
	cases     []testCase
	scenarios []scenario
}

// scenario is a multi-call case. Its recorded calls form a transcript that is
// compared with testdata/<group>_<name>.golden.
type scenario struct {
	name    string
	profile profile
	run     func(s *session)
}

// Run runs the conformance suite against the executors h builds. The test
// calling it must not be parallel (Run uses t.Setenv); Run's subtests are.
func Run(t *testing.T, h Harness) {
	t.Helper()
	if h.New == nil || h.Root == nil {
		t.Fatal("executortest: Harness.New and Harness.Root are required")
	}
	// Before New: an executor that snapshots os.Environ when it is built
	// would otherwise escape the check.
	t.Setenv(canaryName, canaryValue)

	s := &suite{h: h, sessions: map[string]*session{}}
	for p := range numProfiles {
		lim := p.limits()
		e := h.New(t, lim)
		if e == nil {
			t.Fatalf("executortest: Harness.New returned nil for the %s profile", p)
		}
		ts, err := tools.New(e, tools.Config{Home: h.Home, OnNotice: s.onNotice})
		if err != nil {
			t.Fatalf("executortest: tools.New: %v", err)
		}
		// Registered after New's cleanups, so it runs before them: the
		// watchers stop before the executor goes.
		t.Cleanup(ts.Close)
		in := &instance{exec: e, tools: ts, lim: lim, call: ts.Call}
		if h.Transport != nil {
			in.call = h.Transport(t, ts)
		}
		if h.Notices != nil {
			h.Notices(t, e, s.onNotice)
		}
		s.insts[p] = in
	}

	// The memory cases run first and alone, so the heap they sample is
	// theirs; the parallel groups start when Run's caller returns.
	t.Run("memory", func(t *testing.T) {
		for _, sc := range memoryScenarios() {
			t.Run(sc.name, func(t *testing.T) {
				s.skip(t, "memory/"+sc.name)
				s.runScenario(t, "memory", sc)
			})
		}
	})
	for _, g := range groups() {
		t.Run(g.name, func(t *testing.T) {
			t.Parallel()
			for _, c := range g.cases {
				t.Run(c.name, func(t *testing.T) {
					t.Parallel()
					s.skip(t, g.name+"/"+c.name)
					s.runCase(t, g.name, c)
				})
			}
			for _, sc := range g.scenarios {
				t.Run(sc.name, func(t *testing.T) {
					t.Parallel()
					s.skip(t, g.name+"/"+sc.name)
					s.runScenario(t, g.name, sc)
				})
			}
		})
	}
}

// skip skips the case when the harness says its transport cannot express it.
func (s *suite) skip(t *testing.T, name string) {
	if why, ok := s.h.Skip[name]; ok {
		t.Skipf("skipped by the harness: %s", why)
	}
}

// groups lists every parallel group of the suite.
func groups() []group {
	return []group{
		{name: "fg", cases: foregroundCases(), scenarios: foregroundScenarios()},
		{name: "timeout", cases: timeoutCases()},
		{name: "tail", cases: tailCases()},
		{name: "workdir", cases: workdirCases()},
		{name: "args", cases: argCases()},
		{name: "env", cases: envCases(), scenarios: envScenarios()},
		{name: "tree", scenarios: treeScenarios()},
		{name: "bg", cases: backgroundCases(), scenarios: backgroundScenarios()},
		{name: "pwsh", scenarios: pwshScenarios()},
		{name: "live", scenarios: []scenario{
			{name: "output", run: liveOutput},
			{name: "background", run: liveBackground},
		}},
	}
}

// sessionChars are the characters a session id may not hold.
var sessionChars = regexp.MustCompile(`[^A-Za-z0-9._-]`)

// newSession makes the session a case runs in, named after the case so its
// files and tasks are its own.
func (s *suite) newSession(t *testing.T, p profile, id string) *session {
	if id == "" {
		t.Fatal("executortest: empty session id")
	}
	id = sessionChars.ReplaceAllString(id, "_")
	if len(id) > 64 {
		id = id[:64]
	}
	return s.sessionAs(t, p, id)
}

// sessionAs makes a session with exactly id, valid or not.
func (s *suite) sessionAs(t *testing.T, p profile, id string) *session {
	in := s.insts[p]
	ss := &session{
		t:     t,
		suite: s,
		in:    in,
		prof:  p,
		id:    id,
		root:  strings.TrimSuffix(s.h.Root(in.exec, id), "/"),
		home:  s.h.Home,
		feed:  make(chan tools.Notice, 64),
		mu:    new(sync.Mutex),
	}
	if ss.root == "" {
		ss.root = "/"
	}
	s.mu.Lock()
	s.sessions[id] = ss
	s.mu.Unlock()
	if s.h.EndSession != nil {
		t.Cleanup(func() { s.h.EndSession(in.exec, id) })
	}
	return ss
}

// onNotice routes a completion notice to its session's feed. It must not
// block (tools.Config.OnNotice, Harness.Notices): a full feed drops the
// notice, which a case waiting for it then reports.
func (s *suite) onNotice(session string, n tools.Notice) {
	s.mu.Lock()
	ss := s.sessions[session]
	s.mu.Unlock()
	if ss == nil {
		return
	}
	select {
	case ss.feed <- n:
	default:
	}
}

// Profiles returns the limits Run creates executors with, one per limits
// profile, in the order Run calls Harness.New: a harness whose executors
// are configured elsewhere (a server's tenants, each with a policy of its
// own) sets them up from this before Run.
func Profiles() []executor.Limits {
	ls := make([]executor.Limits, numProfiles)
	for p := range numProfiles {
		ls[p] = p.limits()
	}
	return ls
}
