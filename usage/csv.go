package usage

import (
	"encoding/csv"
	"errors"
	"io"
	"strconv"
	"time"
)

// CSVHeader is the header row of WriteCSV: GET /v1/usage?format=csv and
// `shellbox usage --csv`.
var CSVHeader = []string{"tenant", "session", "from", "to", "sandbox_seconds", "cpu_seconds",
	"memory_gib_seconds", "memory_peak_bytes", "calls", "call_seconds", "final", "suspended_seconds",
	"workspace_bytes", "workspace_peak_bytes", "spill_bytes", "egress_requests", "egress_sent_bytes", "egress_received_bytes"}

// WriteCSV writes records as CSV, CSVHeader first; seconds with three
// decimals, times in RFC 3339.
func WriteCSV(w io.Writer, recs []Record) error {
	cw := csv.NewWriter(w)
	_ = cw.Write(CSVHeader)
	fl := func(v float64) string { return strconv.FormatFloat(v, 'f', 3, 64) }
	i := func(v int64) string { return strconv.FormatInt(v, 10) }
	for _, r := range recs {
		_ = cw.Write([]string{r.Tenant, r.Session, r.From.Format(time.RFC3339), r.To.Format(time.RFC3339),
			fl(r.SandboxSeconds), fl(r.CPUSeconds), fl(r.MemoryGiBSeconds), strconv.FormatInt(r.MemoryPeakBytes, 10),
			strconv.FormatInt(r.Calls, 10), fl(r.CallSeconds), strconv.FormatBool(r.Final), fl(r.SuspendedSeconds),
			i(r.WorkspaceBytes), i(r.WorkspacePeakBytes), i(r.SpillBytes), i(r.EgressRequests), i(r.EgressSentBytes), i(r.EgressReceivedBytes)})
	}
	cw.Flush()
	return cw.Error()
}

// ParseTime reads a query's time: RFC 3339, or a date (midnight UTC).
func ParseTime(v string) (time.Time, error) {
	if t, err := time.Parse(time.RFC3339, v); err == nil {
		return t.UTC(), nil
	}
	if t, err := time.Parse(time.DateOnly, v); err == nil {
		return t, nil
	}
	return time.Time{}, errors.New("want an RFC 3339 time (2026-12-06T15:04:05Z) or a UTC date (2026-12-06)")
}
