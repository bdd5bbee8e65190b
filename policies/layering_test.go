package policies

import (
	"os/exec"
	"strings"
	"testing"
)

// policies yields plain settings that the session layer maps onto a
// sandbox spec: neither it nor anything it imports may import a package of
// sandbox/ (the rules both check live in confine, a leaf).
func TestNoSandboxImport(t *testing.T) {
	gobin, err := exec.LookPath("go")
	if err != nil {
		t.Fatalf("the go command is needed to list the imports: %v", err)
	}
	const sandboxPkg = "github.com/shellbox/shellbox/sandbox"
	out, err := exec.Command(gobin, "list", "-deps", "github.com/shellbox/shellbox/policies/...").CombinedOutput()
	if err != nil {
		t.Fatalf("go list: %v\n%s", err, out)
	}
	deps := strings.Fields(string(out))
	if len(deps) == 0 {
		t.Fatal("go list printed no packages")
	}
	for _, d := range deps {
		if d == sandboxPkg || strings.HasPrefix(d, sandboxPkg+"/") {
			t.Errorf("policies depends on %s", d)
		}
	}
}
