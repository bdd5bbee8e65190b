package policies

import (
	"path/filepath"
	"testing"
)

// The shipped examples load, and so prove their own examples and tests.
func TestExamplesLoad(t *testing.T) {
	good, bad, err := LoadDir("examples")
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range bad {
		t.Errorf("%v", e)
	}
	for _, tenant := range []string{"default", "ci-agent", "mirror", "pwsh-agent"} {
		if good[tenant] == nil {
			t.Errorf("examples/%s.yaml did not load", tenant)
		}
	}
}

func loadExample(t testing.TB, tenant string) *Policy {
	t.Helper()
	p, err := LoadFile(filepath.Join("examples", tenant+".yaml"))
	if err != nil {
		t.Fatal(err)
	}
	return p
}
