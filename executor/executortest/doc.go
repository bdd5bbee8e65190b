// Package executortest is the conformance suite every executor.BashExecutor
// and every sandbox runtime runs, unchanged: what the model reads must not
// depend on where its command ran (docs/architecture.md#layers,
// docs/architecture.md#the-tool-contract,
// docs/architecture.md#execution-semantics-every-executor).
//
// An implementation provides a Harness (harness.go: New, Root, Home, and
// optionally InProcess or MemoryProbe, Transport with Skip, Notices) and
// calls Run from a test.
//
// Every case goes through tools.Toolset.Call with raw JSON arguments, exactly
// as a model's call arrives, and asserts both the rendered model text (against
// a golden file, or by regexp where a number varies) and the typed value.
// Golden files live in testdata/<group>_<case>.golden and are embedded, so the
// suite runs from any package's test; dynamic parts (<root>, <home>,
// <session>, <id1>, <path>, ...) are replaced before comparing. Regenerate
// them with
//
//	go test ./executor/executortest/ -run X -update
//
// and read the diff: -update records whatever the executor under test does.
//
// Cases assert outcomes, never durations; they check facts from the
// executor's side, through the executor (a follow-up bash call); and each
// has its own session, so cases run in parallel.
//
// What Run asks of the test that calls it: Run sets a canary variable in the
// test process with t.Setenv before it creates any executor, and checks that
// no command sees it; so the test that calls Run must not call t.Parallel.
// Run creates one executor per limits profile through Harness.New, from its
// own goroutine. The memory group runs first and alone: the Go heap of an
// InProcess executor, or MemoryProbe, must grow by less than 32 MiB while it
// runs.
//
// The suite in full (the Harness, how cases are written, the rules they
// keep, the limits profiles and the contract points it pins down):
// docs/testing.md#the-conformance-suite-executorexecutortest.
package executortest
