//go:build !linux

package termsafe

import "os"

// IsTerminal reports whether f is a terminal: on this system it cannot
// tell, and answers true for standard output and standard error, so that
// they are escaped.
func IsTerminal(f *os.File) bool { return f == os.Stdout || f == os.Stderr }
