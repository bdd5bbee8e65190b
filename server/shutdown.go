package server

import (
	"context"
	"net/http"
)

// A graceful shutdown behind a load balancer (a Kubernetes Service, an
// ingress) is two steps. Retire: the server still takes every call, but
// /readyz fails and each answer closes its connection ("Connection:
// close"), so a client holding a keep-alive connection to this process
// reconnects, through the balancer, to another one after its next call;
// none of its calls is refused. Then Drain (with http.Server.Shutdown):
// new calls are refused, calls in flight finish. Closing idle keep-alive
// connections at once instead (what Shutdown does) races a client sending
// its next request on one: that request fails, and a POST is not retried.

// Retire makes /readyz fail and every answer from now on close its
// connection; calls are still served. Drain retires too.
func (s *Server) Retire() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.retiring = true
}

func (s *Server) isRetiring() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.retiring || s.draining
}

// closeWhenRetiring closes each connection after its answer once the
// server retires (net/http honours a handler's "Connection: close").
// It also marks each request with whether it arrived before Drain began
// (beginCall serves those).
func (s *Server) closeWhenRetiring(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if s.isRetiring() {
			w.Header().Set("Connection", "close")
		}
		r = r.WithContext(context.WithValue(r.Context(), admittedKey{}, !s.isDraining()))
		next.ServeHTTP(w, r)
	})
}
