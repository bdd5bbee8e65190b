package policies

import (
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func TestAuditRotateAndRead(t *testing.T) {
	path := filepath.Join(t.TempDir(), "audit", "audit.log")
	a, err := OpenAudit(path, AuditOptions{MaxBytes: 1000, MaxFiles: 2})
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
	for _, f := range []string{path, path + ".1", path + ".2"} {
		fi, err := os.Stat(f)
		if err != nil {
			t.Fatal(err)
		}
		if fi.Size() > 1000 {
			t.Errorf("%s: %d bytes, over MaxBytes", f, fi.Size())
		}
	}
	if _, err := os.Stat(path + ".3"); err == nil {
		t.Error("more rotated files than MaxFiles")
	}
	recs, skipped, err := ReadAudit(path, 3, "acme")
	if err != nil || skipped != 0 {
		t.Fatal(err, skipped)
	}
	if len(recs) != 3 || recs[0].Time.Unix() != 34 || recs[2].Time.Unix() != 38 || recs[2].Tenant != "acme" {
		t.Errorf("tail = %+v", recs)
	}
	all, _, _ := ReadAudit(path, 1000, "")
	for i := 1; i < len(all); i++ {
		if all[i].Time.Before(all[i-1].Time) {
			t.Fatalf("records out of order at %d", i)
		}
	}
	if all[len(all)-1].Time.Unix() != 39 {
		t.Errorf("last record = %+v", all[len(all)-1])
	}
}

func TestAuditLineBounded(t *testing.T) {
	path := filepath.Join(t.TempDir(), "audit.log")
	a, err := OpenAudit(path, AuditOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	huge := strings.Repeat("é", 1<<20)
	if err := a.Write(Record{Command: huge, Reason: huge, Justification: huge, Escalation: make([]string, 1000), Tenant: huge}); err != nil {
		t.Fatal(err)
	}
	b, _ := os.ReadFile(path)
	if len(b) > maxAuditLine {
		t.Errorf("line of %d bytes", len(b))
	}
	recs, _, err := ReadAudit(path, 1, "")
	if err != nil || len(recs) != 1 {
		t.Fatal(err)
	}
}

// TestAuditLineBoundedEscaped: the bound holds for the line as JSON
// encodes it. 16 KiB of "<" once made a 99 KB line ("\u003c" each), past
// the readers' line bound, which then failed every read of the log.
func TestAuditLineBoundedEscaped(t *testing.T) {
	path := filepath.Join(t.TempDir(), "audit.log")
	a, err := OpenAudit(path, AuditOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	angle := strings.Repeat("<", 16<<10+1)
	worst := strings.Repeat("<\x01\xff\u2028\"", 1<<16)
	perms := make([]string, 100)
	for i := range perms {
		perms[i] = worst
	}
	for _, r := range []Record{
		{Tenant: "acme", Command: angle, Decision: Allow, Rule: "default"},
		{Tenant: worst, Session: worst, Tool: worst, Command: worst, Workdir: worst, Decision: Allow, Rule: worst,
			Reason: worst, SimpleCommand: worst, Escalation: perms, Justification: worst, Approval: worst, Approver: worst},
	} {
		if err := a.Write(r); err != nil {
			t.Fatal(err)
		}
	}
	b, _ := os.ReadFile(path)
	lines := strings.Split(strings.TrimSuffix(string(b), "\n"), "\n")
	if len(lines) != 2 {
		t.Fatalf("%d lines", len(lines))
	}
	for i, l := range lines {
		if len(l) >= maxAuditLine || !json.Valid([]byte(l)) {
			t.Errorf("line %d: %d bytes (bound %d), valid JSON %v", i, len(l), maxAuditLine, json.Valid([]byte(l)))
		}
	}
	recs, skipped, err := ReadAudit(path, 10, "")
	if err != nil || skipped != 0 || len(recs) != 2 {
		t.Fatalf("read back: %d records, %d skipped, %v", len(recs), skipped, err)
	}
	if want := fmt.Sprintf("…[clipped: %d bytes]", len(angle)); !strings.HasSuffix(recs[0].Command, want) || !strings.HasPrefix(recs[0].Command, "<<<<") {
		t.Errorf("command %.40q…%q, want it to end in %q", recs[0].Command, recs[0].Command[len(recs[0].Command)-30:], want)
	}
}

// TestClipJSON: a clipped string's JSON body stays within the bound for
// any mix of characters that encoding/json escapes.
func TestClipJSON(t *testing.T) {
	parts := []string{"a", "<", ">", "&", "\x00", "\n", "\b", "\f", "\t", "\r", "\x1f", "\xff", "\u2028", "\u2029", "é", "💥", `"`, `\`}
	rnd := rand.New(rand.NewPCG(1, 2))
	for range 2000 {
		var b strings.Builder
		for range rnd.IntN(600) {
			b.WriteString(parts[rnd.IntN(len(parts))])
		}
		s, n := b.String(), 40+rnd.IntN(400)
		got := clipJSON(s, n)
		enc, _ := json.Marshal(got)
		if len(enc)-2 > n {
			t.Fatalf("clipJSON(%q, %d) = %q: %d bytes encoded", s, n, got, len(enc)-2)
		}
		if whole, _ := json.Marshal(s); len(whole)-2 <= n && got != s {
			t.Fatalf("clipJSON(%q, %d) clipped a string that fits", s, n)
		}
	}
}

// TestAuditReadersSkipLongLines: a line past the readers' bound (an older
// writer's, or a garbled write) is skipped and counted, and the records
// around it still come back, from both readers.
func TestAuditReadersSkipLongLines(t *testing.T) {
	path := filepath.Join(t.TempDir(), "audit.log")
	rec := func(sec int64) string {
		b, _ := json.Marshal(Record{Time: time.Unix(sec, 0), Tenant: "acme", Command: "ls", Decision: Allow, Rule: "default"})
		return string(b) + "\n"
	}
	huge, _ := json.Marshal(Record{Time: time.Unix(2, 0), Tenant: "acme", Command: strings.Repeat("x", 100_000), Decision: Allow})
	content := rec(1) + string(huge) + "\n" + "{garbled\n" + strings.Repeat("y", 3*maxAuditLine) + "\n" + rec(3)
	if err := os.WriteFile(path, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
	recs, skipped, err := ReadAudit(path, 10, "acme")
	if err != nil || skipped != 3 || len(recs) != 2 || recs[0].Time.Unix() != 1 || recs[1].Time.Unix() != 3 {
		t.Errorf("ReadAudit: %+v, %d skipped, %v", recs, skipped, err)
	}
	recs, skipped, err = TailAudit(path, 10, "acme", 1<<20)
	if err != nil || skipped != 3 || len(recs) != 2 || recs[0].Time.Unix() != 1 || recs[1].Time.Unix() != 3 {
		t.Errorf("TailAudit: %+v, %d skipped, %v", recs, skipped, err)
	}
	// A budget that starts inside the long line.
	recs, _, err = TailAudit(path, 10, "acme", int64(2*maxAuditLine))
	if err != nil || len(recs) != 1 || recs[0].Time.Unix() != 3 {
		t.Errorf("TailAudit from inside the long line: %+v, %v", recs, err)
	}
}
