// Package glob says whether a command name is a pattern the shell would
// expand. Both readers of scripts (policies for bash, policies/pwsh for
// PowerShell) refuse to resolve such a name: a rule matched against the name
// as written would be bypassed by `/bin/r?` or `{rm,x}`, so the check lives
// once, here, where neither reader can drift from the other.
package glob

import "strings"

// IsPattern reports whether s is a glob or brace pattern (as bash would
// expand it), so the name is not what it reads.
func IsPattern(s string) bool {
	if strings.ContainsAny(s, "*?") {
		return true
	}
	if i := strings.IndexByte(s, '['); i >= 0 && strings.IndexByte(s[i+1:], ']') >= 0 {
		return true
	}
	return HasBrace(s)
}

// HasBrace reports whether s holds a brace expansion ({a,b} or {1..3}), as
// bash would expand it in a command's word.
func HasBrace(s string) bool {
	for i := strings.IndexByte(s, '{'); i >= 0; {
		rest := s[i+1:]
		if j := strings.IndexByte(rest, '}'); j >= 0 && (strings.Contains(rest[:j], ",") || strings.Contains(rest[:j], "..")) {
			return true
		}
		k := strings.IndexByte(rest, '{')
		if k < 0 {
			break
		}
		i += 1 + k
	}
	return false
}
