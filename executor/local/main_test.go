package local

import (
	"flag"
	"os"
	"testing"
)

// TestMain runs more tests in parallel than there are CPUs unless -parallel
// says otherwise: most of these tests wait on sleeping processes, timeouts
// and grace periods, not on the CPU.
func TestMain(m *testing.M) {
	flag.Parse()
	set := false
	flag.Visit(func(f *flag.Flag) { set = set || f.Name == "test.parallel" })
	if !set {
		flag.Set("test.parallel", "16")
	}
	os.Exit(m.Run())
}
