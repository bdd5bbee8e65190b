package images

import (
	"bytes"
	"context"
	"os/exec"
	"strings"
	"testing"
)

// runLogged keeps a tool's whole output in the log and prints one line per
// phase, warnings whole, and the last lines in the error of a failure.
func TestRunLoggedSummarizes(t *testing.T) {
	script := `for p in a b c; do echo "I: Retrieving $p 1.0"; echo "I: Validating $p 1.0"; done
for p in a b c; do echo "I: Extracting $p"; done
echo "W: something odd"
echo "I: Base system installed successfully."`
	var out, log bytes.Buffer
	p := newProgress(&out)
	if err := p.runLogged(context.Background(), "debootstrap", &log, exec.Command("bash", "-c", script)); err != nil {
		t.Fatal(err)
	}
	if got := strings.Count(log.String(), "\n"); got != 11 {
		t.Errorf("log has %d lines, want 11:\n%s", got, log.String())
	}
	lines := strings.Split(strings.TrimSpace(out.String()), "\n")
	if len(lines) != 5 {
		t.Fatalf("printed %d lines, want 5 (one per phase, the warning):\n%s", len(lines), out.String())
	}
	for i, want := range []string{"debootstrap: Retrieving a 1.0", "debootstrap: Validating a 1.0", "debootstrap: Extracting a", "debootstrap: W: something odd", "debootstrap: Base system installed"} {
		if !strings.Contains(lines[i], want) || !strings.Contains(lines[i], "s]") {
			t.Errorf("line %d = %q, want it to contain %q and the elapsed time", i, lines[i], want)
		}
	}

	out.Reset()
	log.Reset()
	err := p.runLogged(context.Background(), "debootstrap", &log, exec.Command("bash", "-c", `echo "I: Retrieving x"; echo "E: no route to mirror"; exit 1`))
	if err == nil || !strings.Contains(err.Error(), "E: no route to mirror") {
		t.Errorf("error %v, want it to carry the last lines", err)
	}
	if !strings.Contains(out.String(), "E: no route to mirror") {
		t.Errorf("the error line was not printed:\n%s", out.String())
	}
}
