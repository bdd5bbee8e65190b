package secrets

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base32"
	"strings"
)

// PlaceholderPrefix starts every placeholder, so one is recognisable in a
// log or a bug report for what it is: a stand-in that opens nothing.
const PlaceholderPrefix = "sbx-ph-"

// Placeholders derives the placeholder a session's sandbox sees for a
// credential: PlaceholderPrefix and 26 characters of an HMAC-SHA256 of
// (tenant, session, credential) under a key the server keeps. It is
// random to anyone without the key, differs per session (one session's
// placeholder is worth nothing in another's requests), and needs no state:
// the relay derives the same value the command's environment got, across
// restarts of the server as long as the key stays.
type Placeholders struct {
	key []byte
}

// NewPlaceholders returns the placeholders of key (at least 32 bytes of
// randomness, e.g. KeyFile's).
func NewPlaceholders(key []byte) Placeholders { return Placeholders{key: append([]byte(nil), key...)} }

var b32 = base32.StdEncoding.WithPadding(base32.NoPadding)

// For returns the placeholder of credential in tenant's session.
func (p Placeholders) For(tenant, session, credential string) string {
	m := hmac.New(sha256.New, p.key)
	m.Write([]byte("shellbox placeholder\x00" + tenant + "\x00" + session + "\x00" + credential))
	return PlaceholderPrefix + strings.ToLower(b32.EncodeToString(m.Sum(nil))[:26])
}
