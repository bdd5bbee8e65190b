// Package version names the build of a shellbox binary, the same way for
// the server and the agent.
package version

import "runtime/debug"

// Of returns set (a main package's version, set at build time with
// -ldflags "-X main.version=…") or, when it is empty, the module version
// the binary was built at, or "devel".
func Of(set string) string {
	if set != "" {
		return set
	}
	if bi, ok := debug.ReadBuildInfo(); ok && bi.Main.Version != "" && bi.Main.Version != "(devel)" {
		return bi.Main.Version
	}
	return "devel"
}
