package usage

import (
	"cmp"
	"slices"
	"time"

	"github.com/shellbox/shellbox/errdefs"
)

// Counters are one reading of a sandbox's cgroup.
type Counters struct {
	// CPU is the cgroup's cumulative CPU time (cpuacct.usage).
	CPU time.Duration
	// MemoryBytes is the memory in use at the reading; MemoryPeakBytes the
	// cgroup's high-water mark since the sandbox started (0 where the
	// engine does not report it).
	MemoryBytes     int64
	MemoryPeakBytes int64
}

// Figures are what one session, or a tenant, used.
type Figures struct {
	SandboxSeconds   float64 `json:"sandboxSeconds"`
	CPUSeconds       float64 `json:"cpuSeconds"`
	MemoryGiBSeconds float64 `json:"memoryGiBSeconds"`
	MemoryPeakBytes  int64   `json:"memoryPeakBytes"`
	Calls            int64   `json:"calls"`
	CallSeconds      float64 `json:"callSeconds"`
	// SuspendedSeconds is how long the session was suspended (its
	// workspace in the snapshot store, no sandbox running): not in
	// SandboxSeconds.
	SuspendedSeconds float64 `json:"suspendedSeconds"`
	// WorkspaceBytes is the session's workspace as last measured (the
	// bytes its file system holds), at WorkspaceMeasured;
	// WorkspacePeakBytes the most a measurement found. Zero where the
	// runtime cannot measure it (the local backend).
	WorkspaceBytes     int64     `json:"workspaceBytes"`
	WorkspacePeakBytes int64     `json:"workspacePeakBytes"`
	WorkspaceMeasured  time.Time `json:"workspaceMeasured,omitzero"`
	// SpillBytes are the bytes the session's foreground calls and
	// background tasks wrote to spill files (their output past the
	// in-memory bound); a background task's when its end is known.
	SpillBytes int64 `json:"spillBytes"`
	// EgressRequests counts the connections the egress relay opened to a
	// destination for the session (a blind tunnel or a terminated
	// connection, each once however many HTTP requests it carries);
	// EgressSentBytes and EgressReceivedBytes are the bytes the relay
	// sent them and received from them (TLS records as they went, where
	// it terminated TLS).
	EgressRequests      int64 `json:"egressRequests"`
	EgressSentBytes     int64 `json:"egressSentBytes"`
	EgressReceivedBytes int64 `json:"egressReceivedBytes"`
}

// add adds o to f: sums, the larger peaks, and the later workspace
// measurement.
func (f *Figures) add(o Figures) {
	f.SandboxSeconds += o.SandboxSeconds
	f.CPUSeconds += o.CPUSeconds
	f.MemoryGiBSeconds += o.MemoryGiBSeconds
	f.MemoryPeakBytes = max(f.MemoryPeakBytes, o.MemoryPeakBytes)
	f.Calls += o.Calls
	f.CallSeconds += o.CallSeconds
	f.SuspendedSeconds += o.SuspendedSeconds
	if o.WorkspaceMeasured.After(f.WorkspaceMeasured) {
		f.WorkspaceBytes, f.WorkspaceMeasured = o.WorkspaceBytes, o.WorkspaceMeasured
	}
	f.WorkspacePeakBytes = max(f.WorkspacePeakBytes, o.WorkspacePeakBytes)
	f.SpillBytes += o.SpillBytes
	f.EgressRequests += o.EgressRequests
	f.EgressSentBytes += o.EgressSentBytes
	f.EgressReceivedBytes += o.EgressReceivedBytes
}

// Sum adds a session's figures o to a tenant's f, as GET /v1/usage sums
// its tenants: the sessions' figures added up, but the peaks (the largest
// of the sessions') and the workspace, whose bytes are the sum of each
// session's last measurement, measured when the latest was.
func (f *Figures) Sum(o Figures) {
	ws, at := f.WorkspaceBytes+o.WorkspaceBytes, f.WorkspaceMeasured
	if o.WorkspaceMeasured.After(at) {
		at = o.WorkspaceMeasured
	}
	f.add(o)
	f.WorkspaceBytes, f.WorkspaceMeasured = ws, at
}

// Bucket is what one session used in one UTC hour: the unit a Store keeps.
type Bucket struct {
	Tenant  string `json:"tenant"`
	Session string `json:"session"`
	// Hour is the UTC hour the figures fall in (truncated).
	Hour time.Time `json:"hour"`
	Figures
	// Final marks the bucket written when the session's sandbox was seen
	// gone: its figures end there.
	Final bool `json:"final,omitempty"`
}

// Record is one session's use over a query's range: its buckets summed.
type Record struct {
	Tenant  string `json:"tenant"`
	Session string `json:"session"`
	// From and To are the first and the end of the last hour with use.
	From time.Time `json:"from"`
	To   time.Time `json:"to"`
	Figures
	// Final: the session's sandbox was seen gone within the range.
	Final bool `json:"final"`
}

// Filter selects buckets: those of hours overlapping [From, To), of Tenant
// ("" every tenant) and Session ("" every session).
type Filter struct {
	From, To        time.Time
	Tenant, Session string
}

func (f Filter) match(b Bucket) bool {
	return (f.Tenant == "" || b.Tenant == f.Tenant) && (f.Session == "" || b.Session == f.Session) &&
		b.Hour.Before(f.To) && b.Hour.Add(time.Hour).After(f.From)
}

// MaxRecords bounds the sessions one query sums (a record each): past it
// the query is refused, to be narrowed by time, tenant or session.
const MaxRecords = 100_000

// summary sums buckets into a record per tenant and session as they come.
type summary struct {
	idx map[[2]string]int
	out []Record
}

func (s *summary) add(b Bucket) error {
	k := [2]string{b.Tenant, b.Session}
	i, ok := s.idx[k]
	if !ok {
		if len(s.out) >= MaxRecords {
			return errdefs.Errorf(errdefs.ErrInvalid, "usage: more than %d sessions in one answer: narrow the range, or ask for one tenant or session", MaxRecords)
		}
		if s.idx == nil {
			s.idx = map[[2]string]int{}
		}
		i = len(s.out)
		s.idx[k] = i
		s.out = append(s.out, Record{Tenant: b.Tenant, Session: b.Session, From: b.Hour, To: b.Hour.Add(time.Hour)})
	}
	r := &s.out[i]
	r.Figures.add(b.Figures)
	r.Final = r.Final || b.Final
	if b.Hour.Before(r.From) {
		r.From = b.Hour
	}
	if end := b.Hour.Add(time.Hour); end.After(r.To) {
		r.To = end
	}
	return nil
}

func (s *summary) records() []Record {
	sortRecords(s.out)
	return s.out
}

func sortRecords(rs []Record) {
	slices.SortFunc(rs, func(a, b Record) int {
		return cmp.Or(cmp.Compare(a.Tenant, b.Tenant), cmp.Compare(a.Session, b.Session))
	})
}

// Point is what one tenant used in one UTC hour: a step of a tenant's
// series over time (the console's chart).
type Point struct {
	Tenant string    `json:"tenant"`
	Hour   time.Time `json:"hour"`
	Figures
}

// MaxPoints bounds the points one series query sums: past it the query is
// refused, to be narrowed by time or tenant.
const MaxPoints = 100_000

// series sums buckets into a point per tenant and hour as they come.
type series struct {
	idx map[bkey]int
	out []Point
}

func (s *series) add(b Bucket) error {
	k := bkey{tenant: b.Tenant, hour: b.Hour.UTC()}
	i, ok := s.idx[k]
	if !ok {
		if len(s.out) >= MaxPoints {
			return errdefs.Errorf(errdefs.ErrInvalid, "usage: more than %d tenant-hours in one answer: narrow the range, or ask for one tenant", MaxPoints)
		}
		if s.idx == nil {
			s.idx = map[bkey]int{}
		}
		i = len(s.out)
		s.idx[k] = i
		s.out = append(s.out, Point{Tenant: b.Tenant, Hour: k.hour})
	}
	s.out[i].Figures.add(b.Figures)
	return nil
}

func (s *series) points() []Point {
	slices.SortFunc(s.out, func(a, b Point) int {
		return cmp.Or(a.Hour.Compare(b.Hour), cmp.Compare(a.Tenant, b.Tenant))
	})
	return s.out
}
