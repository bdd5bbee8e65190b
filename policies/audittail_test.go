package policies

import (
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestTailAudit: the tail read agrees with ReadAudit across rotated files,
// and reads no more than its byte budget.
func TestTailAudit(t *testing.T) {
	path := filepath.Join(t.TempDir(), "audit.log")
	a, err := OpenAudit(path, AuditOptions{MaxBytes: 1000, MaxFiles: 3})
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	for i := range 40 {
		tenant := []string{"acme", "beta"}[i%2]
		if err := a.Write(Record{Time: time.Unix(int64(i), 0), Tenant: tenant, Command: strings.Repeat("x", 50), Decision: Allow, Rule: "default"}); err != nil {
			t.Fatal(err)
		}
	}
	for _, c := range []struct {
		n      int
		tenant string
	}{{3, "acme"}, {10, ""}, {12, "beta"}, {1000, ""}} {
		want, _, _ := ReadAudit(path, c.n, c.tenant)
		got, skipped, err := TailAudit(path, c.n, c.tenant, 1<<20)
		if err != nil || skipped != 0 || len(got) != len(want) {
			t.Fatalf("n=%d tenant=%q: %d records (%v, %d skipped), ReadAudit %d", c.n, c.tenant, len(got), err, skipped, len(want))
		}
		for i := range got {
			if !got[i].Time.Equal(want[i].Time) || got[i].Tenant != want[i].Tenant {
				t.Fatalf("n=%d tenant=%q: record %d = %+v, want %+v", c.n, c.tenant, i, got[i], want[i])
			}
		}
	}
	// A cut line longer than bufio's buffer is skipped whole.
	if err := a.Write(Record{Time: time.Unix(40, 0), Tenant: "acme", Command: strings.Repeat("y", 9000), Decision: Allow, Rule: "default"}); err != nil {
		t.Fatal(err)
	}
	if err := a.Write(Record{Time: time.Unix(41, 0), Tenant: "acme", Command: "z", Decision: Allow, Rule: "default"}); err != nil {
		t.Fatal(err)
	}
	if got, skipped, err := TailAudit(path, 100, "", 5000); err != nil || skipped != 0 || len(got) != 1 || got[0].Time.Unix() != 41 {
		t.Errorf("after a long line: %+v, %d skipped, %v", got, skipped, err)
	}
	// A budget of about two lines gives the newest whole lines only.
	got, skipped, err := TailAudit(path, 100, "", 300)
	if err != nil || skipped != 0 || len(got) == 0 || len(got) > 3 || got[len(got)-1].Time.Unix() != 41 {
		t.Errorf("budget 300: %+v, %d skipped, %v", got, skipped, err)
	}
}
