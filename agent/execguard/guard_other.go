//go:build !(linux && amd64)

package execguard

import (
	"fmt"
	"io"
	"runtime"
)

// Arg is the first argument that makes shellbox-agent the guard.
const Arg = "exec-guard"

// Main: the guard reads amd64 registers; elsewhere there is none.
func Main(args []string, stderr io.Writer) int {
	fmt.Fprintf(stderr, "shellbox-agent exec-guard: not supported on %s/%s\n", runtime.GOOS, runtime.GOARCH)
	return 1
}
