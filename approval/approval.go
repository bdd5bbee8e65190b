// Package approval is the one shape of an ask held for a human decision,
// shared by the policy engine that makes and waits on it (policies), the
// stores that hold it (policies' memory store, the Kubernetes store) and
// the server that lists it, decides it and sends it as an event. It is a
// leaf: neither policies nor the server may import the other.
package approval

import (
	"fmt"
	"time"
)

// States of an Approval.
const (
	Pending  = "pending"
	Approved = "approved"
	Denied   = "denied"
	Expired  = "expired"
)

// Approval is an ask held for a human: the call, why it asks, and once
// decided, by whom and why. Its JSON is the server's API (GET
// /v1/approvals, the approval event): every field is always written.
type Approval struct {
	ID            string `json:"id"`
	Tenant        string `json:"tenant"`
	Session       string `json:"session"`
	Tool          string `json:"tool"`
	Command       string `json:"command"`
	Workdir       string `json:"workdir"`
	Rule          string `json:"rule"`
	Reason        string `json:"reason"`
	Justification string `json:"justification"`
	// Permissions are the sandbox permissions the call is granted if
	// approved; they last until the call ends, for a background call
	// until its task ends.
	Permissions []string `json:"permissions"`
	// Background: the call starts a background task, which no timeout
	// ends (bash_kill does, or its own end).
	Background bool `json:"background"`
	// TimeoutMs is a foreground call's timeout once approved, the
	// policy's default and cap applied; 0 with Background.
	TimeoutMs      int64     `json:"timeoutMs"`
	State          string    `json:"state"` // Pending, Approved, Denied or Expired
	Approver       string    `json:"approver"`
	DecisionReason string    `json:"decisionReason"`
	Created        time.Time `json:"created"`
	Deadline       time.Time `json:"deadline"`
	Decided        time.Time `json:"decided,omitzero"`
}

// Bounds of what an Approval holds of the call. An approver decides on
// the call as the model sent it, so these texts are held whole: a call
// that does not fit is not held (Whole says why, and the policy engine
// denies it with that reason), never held clipped. Every surface that
// shows an approval (REST, events, console, CLI, the Kubernetes store)
// carries these fields as they are.
const (
	// MaxCommand bounds the command in bytes (16 KiB).
	MaxCommand = 16 << 10
	// MaxWorkdir bounds the workdir in bytes (PATH_MAX).
	MaxWorkdir = 4096
	// MaxJustification bounds the model's justification in bytes.
	MaxJustification = 2 << 10
	// MaxPermissions bounds the sandbox permissions asked for;
	// MaxPermission bounds each one's name in bytes.
	MaxPermissions, MaxPermission = 16, 256
)

// Whole returns nil when a's call fits the bounds above, else an error
// naming the first field that does not, its size and the bound, e.g.
// "the command is 17117 bytes, over the 16384 an approval shows in full".
func (a Approval) Whole() error {
	over := func(what string, n, max int) error {
		return fmt.Errorf("the %s is %d bytes, over the %d an approval shows in full", what, n, max)
	}
	switch {
	case len(a.Command) > MaxCommand:
		return over("command", len(a.Command), MaxCommand)
	case len(a.Workdir) > MaxWorkdir:
		return over("workdir", len(a.Workdir), MaxWorkdir)
	case len(a.Justification) > MaxJustification:
		return over("justification", len(a.Justification), MaxJustification)
	case len(a.Permissions) > MaxPermissions:
		return fmt.Errorf("%d sandbox permissions are asked for, over the %d an approval shows in full", len(a.Permissions), MaxPermissions)
	}
	for _, p := range a.Permissions {
		if len(p) > MaxPermission {
			return over("sandbox permission name", len(p), MaxPermission)
		}
	}
	return nil
}
