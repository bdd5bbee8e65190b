// Package mediatype reads HTTP media-type lists. Both the agent protocol
// (agentapi) and the server's REST API ask whether a Content-Type or Accept
// header names a type; each keeps its own names for the types themselves.
package mediatype

import (
	"mime"
	"strings"
)

// Includes reports whether v, a Content-Type or Accept value (a
// comma-separated list), names the media type mt, whatever its parameters.
// A part that does not parse names nothing.
func Includes(v, mt string) bool {
	for _, part := range strings.Split(v, ",") {
		if t, _, err := mime.ParseMediaType(strings.TrimSpace(part)); err == nil && t == mt {
			return true
		}
	}
	return false
}
