package confine

import (
	"fmt"
	"strings"
)

// MaxIDLen bounds tenant and session ids: they become path components of
// a single-host runtime's directory and parts of container names, and the
// agent socket path must fit in a sockaddr_un (108 bytes).
const MaxIDLen = 64

// CheckID checks a tenant or session id: letters, digits and . _ @ : -
// only, starting with a letter or digit, at most MaxIDLen bytes. field
// names the id in the error ("tenant: ...").
func CheckID(field, id string) error {
	if id == "" {
		return fmt.Errorf("%s: empty", field)
	}
	if len(id) > MaxIDLen {
		return fmt.Errorf("%s: %q: longer than %d bytes", field, id, MaxIDLen)
	}
	for i, r := range id {
		switch {
		case r >= 'a' && r <= 'z', r >= 'A' && r <= 'Z', r >= '0' && r <= '9':
		case i > 0 && strings.ContainsRune("._@:-", r):
		default:
			return fmt.Errorf("%s: %q: only letters, digits and ._@:- allowed, starting with a letter or digit", field, id)
		}
	}
	return nil
}

// ValidID reports whether id is a valid tenant or session id (CheckID): the
// one rule the tools, the server and the sandboxes apply.
func ValidID(id string) bool { return CheckID("id", id) == nil }

// IDRule says what a valid id looks like, for error messages.
const IDRule = "1-64 letters, digits, '.', '_', '@', ':' or '-', starting with a letter or digit"
