package server

import (
	"context"
	"encoding/json"
	"sort"
	"sync"
	"time"

	"github.com/shellbox/shellbox/executor"
	"github.com/shellbox/shellbox/tools"
)

// TaskInfo is a background task as the console shows it: what this server
// saw of it (its start, and its end when a notice, bash_output or
// bash_kill reported one).
type TaskInfo struct {
	Tenant  string          `json:"tenant"`
	Session string          `json:"session"`
	ID      string          `json:"id"`
	Tool    string          `json:"tool"`
	Command string          `json:"command"`
	Started time.Time       `json:"started"`
	Status  executor.Status `json:"status"`
	Ended   time.Time       `json:"ended,omitzero"`
	// metered: the task's spill was counted (taskBook.update).
	metered bool
}

// TaskPeek is a background task's recent output and status.
type TaskPeek struct {
	// Stdout and Stderr are the tails of the task's whole output so far.
	Stdout string          `json:"stdout"`
	Stderr string          `json:"stderr"`
	Status executor.Status `json:"status"`
}

// TaskPeeker is an optional ability of a Backend: a background task's
// output read without moving the cursor the model's bash_output reads
// with. Without it the console shows tasks' status only. An unknown task,
// or one whose executor cannot peek, is an error (ErrNoSuchSession-like
// classes map to statuses as elsewhere).
type TaskPeeker interface {
	PeekTask(ctx context.Context, tenant, session, id string) (TaskPeek, error)
}

// AllSessionsLister is an optional ability of a Backend: every tenant's
// sessions at once, so an operator's console view costs one listing, not
// one per tenant. Sessions of tenants the server does not configure are
// ignored.
type AllSessionsLister interface {
	AllSessions(ctx context.Context) ([]SessionInfo, error)
}

// Bounds of what the server remembers for the console.
const (
	maxTasksPerTenant = 200
	maxLastCalls      = 10000
	maxTaskCommand    = 4 << 10
)

// taskBook remembers the background tasks started through this server and
// when each session last had a tool call, bounded.
//
// It also meters the spill of background tasks (usage.Meter.Spill), once
// per task, when it first learns of the task's end from a report this
// server's backend made: a bash_output with a final status, a bash_kill,
// or its own completion notice (Server.notice, not relayed). Each carries
// the size of the task's spill file (executor.Output.SpillBytes,
// KillResult.SpillBytes, Result.SpillBytes through tools.Notice). A
// relayed notice, and a notice handed back in a call's result (it may be
// another replica's), mark the end without counting: the replica whose
// watcher saw the end counts it. Tasks are metered only where they are in
// this book, that is on the replica that started them, so a task's end
// reported on two replicas is counted once. What is missed: a task this
// book no longer holds (past maxTasksPerTenant while it ran, or started
// by a previous server process: a re-adopted sandbox); a task whose
// starting replica went away before it ended (a handover: the replica
// that takes over watches it but has no entry); and a task whose end the
// model read on another replica before this one's watcher saw it (that
// replica's report makes the watcher drop its notice: tools.Forget), a
// race of the relay's latency against the watcher's. Nothing is counted
// twice.
type taskBook struct {
	mu        sync.Mutex
	tasks     map[string][]*TaskInfo // tenant → oldest first
	lastCalls map[string]time.Time   // tenant "\x00" session → last call
	// spill counts a session's spilled bytes; nil: no metering.
	spill func(tenant, session string, bytes int64)
}

func newTaskBook(spill func(tenant, session string, bytes int64)) *taskBook {
	return &taskBook{tasks: map[string][]*TaskInfo{}, lastCalls: map[string]time.Time{}, spill: spill}
}

// called records a finished tool call and what its result says of tasks.
func (b *taskBook) called(tenant, session, tool string, args json.RawMessage, r tools.Result) {
	now := time.Now().UTC()
	b.mu.Lock()
	defer b.mu.Unlock()
	if len(b.lastCalls) >= maxLastCalls {
		b.evictLastCalls()
	}
	b.lastCalls[tenant+"\x00"+session] = now
	switch v := r.Value.(type) {
	case *tools.Background:
		var a struct {
			Command string `json:"command"`
		}
		_ = json.Unmarshal(args, &a)
		b.add(&TaskInfo{Tenant: tenant, Session: session, ID: v.TaskID, Tool: tool,
			Command: clip(a.Command, maxTaskCommand), Started: now, Status: executor.Status{State: executor.Running}})
	case *tools.TaskOutput:
		b.update(tenant, session, v.TaskID, v.Output.Status, v.Output.SpillBytes, true)
	case *tools.TaskKill:
		b.update(tenant, session, v.TaskID, v.Status, v.SpillBytes, true)
	}
	for _, n := range r.Notices {
		// Own notices are metered as Server.notice sees them.
		b.update(tenant, session, n.TaskID, n.Status, 0, false)
	}
}

// ended records a completion notice; relayed: another replica's.
func (b *taskBook) ended(tenant, session string, n tools.Notice, relayed bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.update(tenant, session, n.TaskID, n.Status, n.SpillBytes, !relayed)
}

func (b *taskBook) add(t *TaskInfo) {
	list := b.tasks[t.Tenant]
	if len(list) >= maxTasksPerTenant {
		// Forget the oldest ended task, else the oldest.
		drop := 0
		for i, o := range list {
			if o.Status.State != executor.Running {
				drop = i
				break
			}
		}
		list = append(list[:drop], list[drop+1:]...)
	}
	b.tasks[t.Tenant] = append(list, t)
}

// update records a report of a task's status. meter: the report is this
// server's own (see taskBook), and spill, the size of the task's spill
// file, is counted if the task has ended and was not counted yet.
func (b *taskBook) update(tenant, session, id string, st executor.Status, spill int64, meter bool) {
	for _, t := range b.tasks[tenant] {
		if t.Session == session && t.ID == id {
			if t.Status.State == executor.Running && st.State != executor.Running {
				t.Ended = time.Now().UTC()
			}
			if st.State != "" {
				t.Status = st
			}
			if meter && !t.metered && st.State != "" && st.State != executor.Running {
				t.metered = true
				if b.spill != nil && spill > 0 {
					b.spill(tenant, session, spill)
				}
			}
			return
		}
	}
}

// evictLastCalls forgets the older half of the last-call times.
func (b *taskBook) evictLastCalls() {
	times := make([]time.Time, 0, len(b.lastCalls))
	for _, t := range b.lastCalls {
		times = append(times, t)
	}
	sort.Slice(times, func(i, j int) bool { return times[i].Before(times[j]) })
	cut := times[len(times)/2]
	for k, t := range b.lastCalls {
		if t.Before(cut) {
			delete(b.lastCalls, k)
		}
	}
}

// list returns copies of the tenant's tasks, newest first.
func (b *taskBook) list(tenant string) []TaskInfo {
	b.mu.Lock()
	defer b.mu.Unlock()
	list := b.tasks[tenant]
	out := make([]TaskInfo, 0, len(list))
	for i := len(list) - 1; i >= 0; i-- {
		out = append(out, *list[i])
	}
	return out
}

func (b *taskBook) lastCall(tenant, session string) time.Time {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.lastCalls[tenant+"\x00"+session]
}
