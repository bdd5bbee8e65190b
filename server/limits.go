package server

import (
	"fmt"
	"net/http"
	"strings"

	"golang.org/x/time/rate"
)

// tenantLimits are one tenant's live limiters.
type tenantLimits struct {
	name  string
	cfg   TenantConfig
	calls chan struct{} // semaphore: tool calls in flight
	rate  *rate.Limiter
}

func newTenantLimits(name string, cfg TenantConfig) *tenantLimits {
	return &tenantLimits{
		name:  name,
		cfg:   cfg,
		calls: make(chan struct{}, cfg.MaxConcurrentCalls),
		rate:  rate.NewLimiter(rate.Limit(cfg.RatePerSecond), cfg.Burst),
	}
}

// acquire takes a tool-call slot without waiting, or says which limit stops
// the call. release must be called once for every successful acquire.
func (l *tenantLimits) acquire() error {
	select {
	case l.calls <- struct{}{}:
		return nil
	default:
		return fmt.Errorf("tenant %s has %d tool calls in flight, the limit (server::tenants::%s::maxConcurrentCalls)",
			l.name, l.cfg.MaxConcurrentCalls, l.name)
	}
}

func (l *tenantLimits) release() { <-l.calls }

// rateLimit answers 429 when the tenant's request rate exceeds its limit.
// A session's DELETE is never refused (it takes a token when there is one):
// a client that gives up on a refused DELETE, or dies, leaves the session's
// sandbox, workspace and mounts running until the idle reaper, which is
// what a client over its rate least needs (measured: a soak whose clients
// retried 429s at once left 12-28 deleted sessions' sandboxes behind). A
// DELETE does no more than remove what the tenant has: one removal at a
// time per session, an engine lookup for a session it does not have.
func (s *Server) rateLimit(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		tl := s.limits[tenantOf(r.Context())]
		if tl != nil && !tl.rate.Allow() && !sessionDelete(r) {
			w.Header().Set("Retry-After", "1")
			s.countError("rate_limited")
			writeError(w, http.StatusTooManyRequests, "rate_limited",
				fmt.Sprintf("tenant %s exceeds its rate limit of %g requests per second (burst %d) (server::tenants::%s::ratePerSecond, burst)",
					tl.name, tl.cfg.RatePerSecond, tl.cfg.Burst, tl.name))
			return
		}
		next.ServeHTTP(w, r)
	})
}

// sessionDelete reports whether r is DELETE /v1/sessions/{id}.
func sessionDelete(r *http.Request) bool {
	id, ok := strings.CutPrefix(r.URL.Path, "/v1/sessions/")
	return r.Method == http.MethodDelete && ok && id != "" && !strings.Contains(id, "/")
}

// limitBody bounds every request body; reading past the bound fails, and
// readBody turns that into 413. A file upload streams under the tenant
// policy's cap instead (FileTransfer).
func (s *Server) limitBody(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if isFileUpload(r) {
			next.ServeHTTP(w, r)
			return
		}
		if r.ContentLength > s.cfg.MaxBodyBytes {
			s.countError("body_too_large")
			writeError(w, http.StatusRequestEntityTooLarge, "body_too_large", s.bodyTooLarge())
			return
		}
		r.Body = http.MaxBytesReader(w, r.Body, s.cfg.MaxBodyBytes)
		next.ServeHTTP(w, r)
	})
}

func (s *Server) bodyTooLarge() string {
	return fmt.Sprintf("request body exceeds the limit of %d bytes (server::maxBodyBytes)", s.cfg.MaxBodyBytes)
}

// requireJSON answers 415 for a body that is not declared JSON.
func requireJSON(w http.ResponseWriter, r *http.Request) bool {
	ct := r.Header.Get("Content-Type")
	if ct == "" && r.ContentLength == 0 {
		return true
	}
	mt, _, _ := strings.Cut(ct, ";")
	if strings.EqualFold(strings.TrimSpace(mt), "application/json") {
		return true
	}
	writeError(w, http.StatusUnsupportedMediaType, "unsupported_media_type",
		fmt.Sprintf("Content-Type %q is not supported: send application/json", clip(ct, 64)))
	return false
}
