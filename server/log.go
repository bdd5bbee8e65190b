package server

import (
	"bufio"
	"context"
	"crypto/rand"
	"errors"
	"log/slog"
	"net"
	"net/http"
	"regexp"
	"sync"
	"time"
)

// logAttrs collects attributes handlers learn while serving (the tenant, a
// session) for the request's one log line.
type logAttrs struct {
	mu    sync.Mutex
	attrs []slog.Attr
}

type logKey struct{}

// setLogAttr adds an attribute to the request's log line.
func setLogAttr(ctx context.Context, key, value string) {
	if la, ok := ctx.Value(logKey{}).(*logAttrs); ok {
		la.mu.Lock()
		la.attrs = append(la.attrs, slog.String(key, value))
		la.mu.Unlock()
	}
}

var requestIDRE = regexp.MustCompile(`^[A-Za-z0-9._-]{1,64}$`)

type requestIDKey struct{}

// RequestID returns the request id of a request's context.
func RequestID(ctx context.Context) string {
	id, _ := ctx.Value(requestIDKey{}).(string)
	return id
}

// logRequests gives every request an id (the client's X-Request-Id when it is
// a sane token, else a new one), echoes it, and logs one line when the
// request ends: method, path, status, bytes, duration, tenant. Headers and
// bodies are never logged, so neither are tokens.
func (s *Server) logRequests(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		start := time.Now()
		id := r.Header.Get("X-Request-Id")
		if !requestIDRE.MatchString(id) {
			id = rand.Text()
		}
		w.Header().Set("X-Request-Id", id)
		la := &logAttrs{}
		ctx := context.WithValue(context.WithValue(r.Context(), logKey{}, la), requestIDKey{}, id)
		sw := &statusWriter{ResponseWriter: w}
		next.ServeHTTP(sw, r.WithContext(ctx))
		status := sw.status
		if status == 0 {
			status = http.StatusOK
		}
		s.metrics.httpRequest(r, status, time.Since(start))
		la.mu.Lock()
		attrs := append([]slog.Attr{
			slog.String("request_id", id),
			slog.String("method", r.Method),
			slog.String("path", r.URL.Path),
			slog.Int("status", status),
			slog.Int64("bytes", sw.bytes),
			slog.Duration("duration", time.Since(start)),
		}, la.attrs...)
		la.mu.Unlock()
		level := slog.LevelInfo
		if status >= 500 {
			level = slog.LevelError
		}
		s.log.LogAttrs(context.Background(), level, "request", attrs...)
	})
}

// statusWriter records the status and size of a response. It passes
// Flush through (SSE, MCP streams) and supports http.ResponseController.
type statusWriter struct {
	http.ResponseWriter
	status int
	bytes  int64
}

func (w *statusWriter) WriteHeader(code int) {
	if w.status == 0 {
		w.status = code
	}
	w.ResponseWriter.WriteHeader(code)
}

func (w *statusWriter) Write(b []byte) (int, error) {
	if w.status == 0 {
		w.status = http.StatusOK
	}
	n, err := w.ResponseWriter.Write(b)
	w.bytes += int64(n)
	return n, err
}

func (w *statusWriter) Flush() {
	if f, ok := w.ResponseWriter.(http.Flusher); ok {
		f.Flush()
	}
}

func (w *statusWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }

func (w *statusWriter) Hijack() (net.Conn, *bufio.ReadWriter, error) {
	if h, ok := w.ResponseWriter.(http.Hijacker); ok {
		return h.Hijack()
	}
	return nil, nil, errors.New("hijack not supported")
}
