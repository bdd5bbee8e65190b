package server

import (
	"context"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/hex"
	"fmt"
	"net/http"
	"strings"
)

// HashToken returns the form a token is stored in: "sha256:<hex>". Only
// hashes are ever configured; the tokens themselves are shown once, to the
// operator who makes them (`shellbox token`).
func HashToken(token string) string {
	sum := sha256.Sum256([]byte(token))
	return "sha256:" + hex.EncodeToString(sum[:])
}

// tokenEntry is one configured token hash and its tenant.
type tokenEntry struct {
	sum    [sha256.Size]byte
	tenant string
}

// tokens maps presented tokens to tenants.
type tokens []tokenEntry

// parseTokenHash parses "sha256:<64 hex digits>".
func parseTokenHash(s string) ([sha256.Size]byte, error) {
	var sum [sha256.Size]byte
	h, ok := strings.CutPrefix(s, "sha256:")
	if !ok {
		return sum, fmt.Errorf("token hash %q: want sha256:<64 hex digits>", clip(s, 16))
	}
	b, err := hex.DecodeString(h)
	if err != nil || len(b) != sha256.Size {
		return sum, fmt.Errorf("token hash %q: want sha256:<64 hex digits>", clip(s, 16))
	}
	copy(sum[:], b)
	return sum, nil
}

// lookup returns the tenant of token. It hashes the token and compares it
// with every configured hash in constant time, without stopping at a match,
// so timing tells nothing about which (or whether a) hash matched.
func (ts tokens) lookup(token string) (string, bool) {
	sum := sha256.Sum256([]byte(token))
	tenant, found := "", 0
	for _, e := range ts {
		if subtle.ConstantTimeCompare(sum[:], e.sum[:]) == 1 {
			tenant = e.tenant
			found = 1
		}
	}
	return tenant, found == 1
}

type tenantKey struct{}

// tenantOf returns the authenticated tenant of a request's context.
func tenantOf(ctx context.Context) string {
	t, _ := ctx.Value(tenantKey{}).(string)
	return t
}

// bearer extracts the token of an Authorization: Bearer header.
func bearer(r *http.Request) (string, bool) {
	h := r.Header.Get("Authorization")
	scheme, tok, ok := strings.Cut(h, " ")
	if !ok || !strings.EqualFold(scheme, "Bearer") {
		return "", false
	}
	tok = strings.TrimSpace(tok)
	return tok, tok != ""
}

// authenticate resolves the request's tenant or answers 401. The token is
// never logged or echoed.
func (s *Server) authenticate(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		tok, ok := bearer(r)
		if !ok {
			w.Header().Set("WWW-Authenticate", `Bearer realm="shellbox"`)
			s.countError("unauthorized")
			writeError(w, http.StatusUnauthorized, "unauthorized", "missing bearer token: send Authorization: Bearer <token>")
			return
		}
		tenant, ok := s.tokens.lookup(tok)
		if !ok {
			w.Header().Set("WWW-Authenticate", `Bearer realm="shellbox", error="invalid_token"`)
			s.countError("unauthorized")
			writeError(w, http.StatusUnauthorized, "unauthorized", "invalid bearer token")
			return
		}
		setLogAttr(r.Context(), "tenant", tenant)
		next.ServeHTTP(w, r.WithContext(context.WithValue(r.Context(), tenantKey{}, tenant)))
	})
}

func clip(s string, n int) string {
	if len(s) > n {
		return s[:n] + "…"
	}
	return s
}
