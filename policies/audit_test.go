package policies

import (
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
