package executortest

import (
	"embed"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
)

// goldens are embedded so the suite runs unchanged from any package's test,
// whatever its working directory.
//
//go:embed testdata
var goldens embed.FS

func init() {
	// Another package of the same test binary may already define -update;
	// then that flag is the one honoured.
	if flag.Lookup("update") == nil {
		flag.Bool("update", false, "rewrite the executortest golden files with what the executor under test does")
	}
}

func updating() bool {
	f := flag.Lookup("update")
	return f != nil && f.Value.String() == "true"
}

// goldenDir is testdata in this package's source directory, where -update
// writes.
func goldenDir() string {
	_, file, _, ok := runtime.Caller(0)
	if !ok {
		return "testdata"
	}
	return filepath.Join(filepath.Dir(file), "testdata")
}

// checkGolden compares got (a normalised text) with testdata/<name>.golden.
// A golden file holds the text followed by one newline.
func checkGolden(t *testing.T, name, got string) {
	t.Helper()
	file := name + ".golden"
	if updating() {
		if err := os.WriteFile(filepath.Join(goldenDir(), file), []byte(got+"\n"), 0o644); err != nil {
			t.Fatalf("update golden: %v", err)
		}
		return
	}
	b, err := goldens.ReadFile("testdata/" + file)
	if err != nil {
		t.Errorf("no golden file testdata/%s (create it with: go test ./executor/executortest/ -run X -update); got:\n%s", file, indent(got))
		return
	}
	want := strings.TrimSuffix(string(b), "\n")
	if got != want {
		t.Errorf("text differs from testdata/%s:\n%s", file, diff(want, got))
	}
}

// diff shows where two texts part, with some context.
func diff(want, got string) string {
	wl, gl := strings.Split(want, "\n"), strings.Split(got, "\n")
	i := 0
	for i < len(wl) && i < len(gl) && wl[i] == gl[i] {
		i++
	}
	var b strings.Builder
	from := max(0, i-3)
	for j := from; j < i; j++ {
		fmt.Fprintf(&b, "  %s\n", clip(wl[j]))
	}
	for j := i; j < len(wl) && j < i+8; j++ {
		fmt.Fprintf(&b, "- %s\n", clip(wl[j]))
	}
	for j := i; j < len(gl) && j < i+8; j++ {
		fmt.Fprintf(&b, "+ %s\n", clip(gl[j]))
	}
	fmt.Fprintf(&b, "(first difference at line %d; want %d lines, got %d)", i+1, len(wl), len(gl))
	return b.String()
}

func clip(s string) string {
	const n = 200
	if len(s) > n {
		return fmt.Sprintf("%s… (%d bytes)", s[:n], len(s))
	}
	return s
}
