// Package tools is the model-facing layer: the bash, bash_output, bash_kill and
// pwsh tools of the tool contract (docs/architecture.md#the-tool-contract) —
// their JSON Schemas, argument validation with the exact error texts, and the
// rendering of results with the exact markers in their exact order.
//
// It is pure: it imports the executor seam, never a backend. A Toolset takes
// raw JSON arguments, validates them, builds an executor.Request (with the
// managed DSH_* environment), passes it through the permissions Gate, and hands
// it to whatever executor.BashExecutor it was given; the facts that come back
// are rendered here and nowhere else. Every result carries both the rendered
// text (what the model reads) and a typed value (what programs read), so no
// consumer ever parses text.
//
// Background tasks: the Toolset watches each task it starts and, when one
// ends, queues a completion notice for its session. A notice is durable
// context, not a wake-up: it is returned with the session's next tool result
// (Result.Notices) and handed to Config.OnNotice for event streams. Notices of
// a task whose end the model already saw through bash_output or bash_kill are
// dropped.
package tools
