package usage

import (
	"errors"
	"os"
	"strconv"
	"testing"
)

// TestCgroupsRemembers: a sandbox's cgroup is looked up once, again after
// Forget, an error of the lookup is returned and nothing remembered, and
// the map never holds more than maxCgroups.
func TestCgroupsRemembers(t *testing.T) {
	var c Cgroups
	asked := 0
	pid := func() (int, error) { asked++; return os.Getpid(), nil }
	for range 3 {
		if _, err := c.Of("a", pid); err != nil {
			t.Fatal(err)
		}
	}
	if asked != 1 {
		t.Errorf("pid asked %d times for one sandbox, want 1", asked)
	}
	c.Forget("a")
	c.Of("a", pid)
	if asked != 2 {
		t.Errorf("after Forget: asked %d times, want 2", asked)
	}
	boom := errors.New("no such container")
	if _, err := c.Of("b", func() (int, error) { return 0, boom }); !errors.Is(err, boom) {
		t.Errorf("a failed lookup: %v", err)
	}
	if _, ok := c.m["b"]; ok {
		t.Error("a failed lookup was remembered")
	}
	for i := range maxCgroups + 5 {
		c.Of(strconv.Itoa(i), pid)
	}
	if n := len(c.m); n > maxCgroups {
		t.Errorf("%d cgroups remembered, want at most %d", n, maxCgroups)
	}
}
