// Package eventstream holds what flows on a tenant's event stream: the Event,
// its types (an approval event carries an approval.Approval), plus the
// EventRelay contract that carries events between the server replicas of
// a release. It is a leaf below server: the server's SSE and MCP streams,
// its client (server/client) and the relay on Kubernetes (kube/events)
// share these types without the relay importing the server.
package eventstream

import (
	"time"

	"github.com/shellbox/shellbox/approval"
	"github.com/shellbox/shellbox/tools"
)

// Event types on the event streams.
const (
	// EventNotice: a background task of the session ended.
	EventNotice = "notice"
	// EventApproval: an approval was created or decided.
	EventApproval = "approval"
	// EventDropped: the subscriber fell behind and is dropped; the stream
	// ends after it. Reconnect and list what you missed.
	EventDropped = "dropped"
	// EventReported travels between replicas only (EventRelay), never on
	// a client's stream: a task's end was reported to the model on one
	// replica (Notice carries the task id), so the others drop their copy
	// of its notice.
	EventReported = "reported"
	// EventHandover travels between replicas only: a replica shutting
	// down watched background tasks of the session; the others watch them
	// from now on, so their ends still have notices.
	EventHandover = "handover"
	// EventSession: the session's state changed: State says to what
	// (suspended, resumed, suspend-failed, resume-failed, deleted) and
	// Message why, with the snapshot's id, size and age.
	EventSession = "session"
)

// Event is one item of a tenant's event stream.
type Event struct {
	Type     string             `json:"type"`
	Tenant   string             `json:"tenant"`
	Session  string             `json:"session,omitempty"`
	Notice   *tools.Notice      `json:"notice,omitempty"`
	Approval *approval.Approval `json:"approval,omitempty"`
	State    string             `json:"state,omitempty"`
	Message  string             `json:"message,omitempty"`
	Time     time.Time          `json:"time"`
}

// EventRelay carries events between the server processes (replicas) of one
// release, so a client's event stream on one replica hears what happened
// on another. Only completion notices (EventNotice), the word that a
// task's end was reported to the model (EventReported) and a shutting
// down replica's handing over of the tasks it watched (EventHandover)
// and sessions' state changes (EventSession: the leader suspends sessions
// other replicas' clients watch) travel through it:
// approvals reach every replica through their store (kube/approvals), and
// "dropped" is a stream's own. On Kubernetes it is kube/events (Event objects in the
// sessions namespace); a single process needs none.
//
// Delivery is at most once per replica and best effort: a relay that
// cannot publish logs and drops, never blocks a notice (the event stream
// is a wake-up, the model still gets the task's end from bash_output).
type EventRelay interface {
	// Publish hands an event this process caused to the other replicas.
	// It must not block.
	Publish(Event)
	// Subscribe calls fn with every event another replica published, in
	// the order it hears them, until cancel is called. fn must not block.
	Subscribe(fn func(Event)) (cancel func())
}
