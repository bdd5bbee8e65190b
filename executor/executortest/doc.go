// Package executortest is the conformance suite every executor.BashExecutor
// and every sandbox runtime runs, unchanged: what the model reads must not
// depend on where its command ran (DESIGN §1–§3).
//
// An implementation provides a Harness and calls Run from a test:
//
//	// Harness is what an implementation provides.
//	type Harness struct {
//		// New returns a fresh executor configured with lim, cleaned up via t.Cleanup.
//		New func(t *testing.T, lim executor.Limits) executor.BashExecutor
//		// Root returns the session cwd as commands see it (a t.TempDir() for
//		// local, /workspace in a sandbox): FixedRoot(dir) when it is one directory.
//		Root func(e executor.BashExecutor, session string) string
//		// Home is DSH_HOME as commands see it.
//		Home string
//		// InProcess: the executor's memory is this test process's (heap growth
//		// can be asserted); otherwise MemoryProbe, if set, measures it.
//		InProcess   bool
//		MemoryProbe func() uint64
//		// Transport carries the calls through an API (REST, MCP) instead of
//		// calling the Toolset, and must deliver an Invocation's Live output
//		// (REST event stream, MCP progress); Skip names cases it cannot express.
//		Transport func(t *testing.T, ts *tools.Toolset) func(context.Context, tools.Invocation) tools.Result
//		Skip      map[string]string
//		// Notices delivers completion notices when the tasks end elsewhere
//		// than in Run's Toolset (a remote server's event stream).
//		Notices func(t *testing.T, e executor.BashExecutor, notify func(session string, n tools.Notice))
//	}
//	func Run(t *testing.T, h Harness)
//
// # How cases are written
//
// Every case goes through tools.Toolset.Call with raw JSON arguments, exactly
// as a model's call arrives, and asserts two things: the rendered model text
// (exactly, against a golden file, or by regexp where a number varies) and the
// typed value (*tools.Foreground, *tools.Background, *tools.TaskOutput,
// *tools.TaskKill, *tools.ErrorValue). Single calls are rows of a table in the
// style of Nomad's ExecTaskStreamingConformanceTests; multi-call cases are
// scenario funcs whose recorded calls form a transcript, compared with a golden
// file as a whole.
//
// Golden files live in testdata/<group>_<case>.golden and are embedded, so the
// suite runs from any package's test. Dynamic parts are replaced before
// comparing: the session root by <root>, DSH_HOME by <home>, the session id by
// <session> (<other> for a second session), task ids by <id1>, <id2>… in order
// of appearance, spill paths by <path>. Regenerate them with
//
//	go test ./executor/executortest/ -run X -update
//
// and read the diff: -update records whatever the executor under test does.
//
// # Rules the cases keep
//
//   - Outcomes, never durations: no case asserts how long anything took
//     (timing belongs in benchmarks). Timeouts are short (500 ms) and the
//     limits given to New have a 300 ms grace, so the suite stays fast; waits
//     for a file or a task poll with a generous bound that only turns a hang
//     into a failure.
//   - Facts are checked from the executor's side, through the executor: spill
//     files are read with a follow-up bash call (`wc -c < PATH`, `cmp`), and
//     "the tree is gone" is a follow-up `kill -0` on pids the command wrote to
//     files in its workdir. In a sandbox the paths and pids are the sandbox's,
//     which also proves the model can use them. A zombie counts as gone: it is
//     dead, and reaping it is its parent's business.
//   - Every case has its own session (and its own files, prefixed by the
//     session id), so cases run in parallel and a shared root is fine.
//
// # What Run asks of the test that calls it
//
// Run sets a canary variable in the test process with t.Setenv before it
// creates any executor, and checks that no command sees it; so the test that
// calls Run must not call t.Parallel. Run creates one executor per limits
// profile (default limits with a 300 ms grace; a 64-byte tail with a 4 KiB
// spill cap; a 1 KiB background buffer; a 400 ms default and maximum timeout)
// through Harness.New, from its own goroutine.
//
// The memory group runs first and alone (100 MB through a foreground call,
// 64 MB through a background task): the Go heap of an InProcess executor, or
// MemoryProbe, must grow by less than 32 MiB while it runs. Everything else
// runs in parallel.
//
// # Contract points the suite pins down
//
// Besides the texts of DESIGN §2, the suite holds every executor to these
// readings of the contract:
//   - a kept tail is exactly the last TailBytes bytes of its stream;
//   - a reader that fell behind gets the newest output still in memory (a
//     suffix of the stream) and Lost counts exactly the rest: nothing is
//     both lost and returned, nothing is neither;
//   - once bash_output reports a final status, it has returned all the output
//     (nothing arrives after "status: completed" or "status: killed"), and a
//     task counts as ended only when its whole tree is gone;
//   - a spill capped by SpillLimit renders as "full output unavailable" and,
//     if a path is given, holds a prefix of the output no longer than the cap;
//   - a workdir that is missing, a file, or escapes through a symlink is an
//     error naming the workdir (as the model gave it, or made absolute) and,
//     for an escape, the root; nothing runs;
//   - stdin is empty (`cat` ends at once), and bash is not a login shell.
package executortest
