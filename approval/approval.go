// Package approval is the one shape of an ask held for a human decision,
// shared by the policy engine that makes and waits on it (policies), the
// stores that hold it (policies' memory store, the Kubernetes store) and
// the server that lists it, decides it and sends it as an event. It is a
// leaf: neither policies nor the server may import the other.
package approval

import "time"

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
	ID             string    `json:"id"`
	Tenant         string    `json:"tenant"`
	Session        string    `json:"session"`
	Tool           string    `json:"tool"`
	Command        string    `json:"command"`
	Workdir        string    `json:"workdir"`
	Rule           string    `json:"rule"`
	Reason         string    `json:"reason"`
	Justification  string    `json:"justification"`
	Permissions    []string  `json:"permissions"`
	State          string    `json:"state"` // Pending, Approved, Denied or Expired
	Approver       string    `json:"approver"`
	DecisionReason string    `json:"decisionReason"`
	Created        time.Time `json:"created"`
	Deadline       time.Time `json:"deadline"`
	Decided        time.Time `json:"decided,omitzero"`
}
