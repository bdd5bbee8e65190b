package server

import (
	"bufio"
	"bytes"
	"container/list"
	"crypto/sha256"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"sync"
	"time"
)

// Idempotency keys (the IETF httpapi "Idempotency-Key" header field). A
// POST that carries one runs once per key: a repeat of it (same tenant,
// key, method, path, query, session headers and body) waits for the first
// to finish and gets its answer again, marked with the header
// Idempotent-Replayed: true, without running anything. The Go client sends
// a fresh key with every POST, which also makes net/http's transport retry
// the request on a new connection when a kept-alive one was closed under
// it (a server shutting down closes its idle connections at the instant a
// request may go out on one): that retry is safe because of this.
//
// The keys live in this process: a repeat that reaches another replica runs
// again. The retry above never does harm there, since a request a closing
// server dropped never ran; a replica that dies while running a call takes
// its key with it, and the client's retry, if any, runs the call anew.
//
// Bounds: idemMaxEntries keys, a quarter of them and of the bytes per
// tenant (one tenant cannot push the others' keys out), each kept idemTTL
// after it was made (a key whose call still runs is never dropped: a new
// key is refused with 503 instead); an answer is kept up to idemMaxBody
// bytes and all of them up to idemMaxTotal (past that the oldest answers
// are dropped, their keys kept). A repeat of a call whose answer was not
// kept (too large, dropped, or cut because its client went away) gets 409
// and a message saying which; 429 and 503 answers (a call refused before
// it ran: limits, draining) are not kept, so a repeat runs.
const (
	IdempotencyHeader = "Idempotency-Key"
	idemReplayHeader  = "Idempotent-Replayed"
	idemMaxKey        = 255
	idemMaxEntries    = 4096
	idemTTL           = 10 * time.Minute
	idemMaxBody       = 1 << 20
	idemMaxTotal      = 64 << 20
)

// idemStore holds the keys of recent POSTs and their answers.
type idemStore struct {
	mu      sync.Mutex
	entries map[string]*list.Element // tenant\x00key → *idemEntry
	order   *list.List               // oldest first
	total   int                      // bytes of kept bodies
	tenants map[string]*idemTenant
	now     func() time.Time

	// The bounds (the idem* constants; tests shrink them).
	maxEntries, maxBody, maxTotal int
	ttl                           time.Duration
}

// idemTenant is one tenant's share of the store.
type idemTenant struct{ entries, bytes int }

type idemEntry struct {
	key         string
	tenant      string
	fingerprint [sha256.Size]byte
	created     time.Time
	done        chan struct{} // closed when the first call's answer is known

	// Set before done is closed.
	status int
	header http.Header
	body   []byte
	kept   bool   // body holds the whole answer
	size   int    // the answer's size, kept or not
	why    string // why it was not kept

	// Guarded by idemStore.mu.
	counted  bool // body is in idemStore.total
	finished bool // finish ran
}

func newIdemStore() *idemStore {
	return &idemStore{entries: map[string]*list.Element{}, order: list.New(), now: time.Now, tenants: map[string]*idemTenant{},
		maxEntries: idemMaxEntries, maxBody: idemMaxBody, maxTotal: idemMaxTotal, ttl: idemTTL}
}

// errIdemFull: every key the store may hold belongs to a call still
// running.
var errIdemFull = errors.New("too many requests with an Idempotency-Key are running")

// claim returns the entry of tenant's key: a new one (first is true) the
// caller must finish, or the existing one.
func (st *idemStore) claim(tenant, key string, fp [sha256.Size]byte) (e *idemEntry, first bool, err error) {
	st.mu.Lock()
	defer st.mu.Unlock()
	now := st.now()
	st.expire(now)
	k := tenant + "\x00" + key
	if el, ok := st.entries[k]; ok {
		return el.Value.(*idemEntry), false, nil
	}
	tn := st.tenants[tenant]
	if tn == nil {
		tn = &idemTenant{}
		st.tenants[tenant] = tn
	}
	if tn.entries >= max(1, st.maxEntries/4) && !st.evictOne(tenant) {
		return nil, false, fmt.Errorf("%w: tenant %s has %d", errIdemFull, tenant, tn.entries)
	}
	if st.order.Len() >= st.maxEntries && !st.evictOne("") {
		return nil, false, fmt.Errorf("%w: %d in all", errIdemFull, st.order.Len())
	}
	e = &idemEntry{key: k, tenant: tenant, fingerprint: fp, created: now, done: make(chan struct{})}
	st.entries[k] = st.order.PushBack(e)
	tn.entries++
	return e, true, nil
}

// evictOne removes the oldest finished entry (of tenant, if not empty).
func (st *idemStore) evictOne(tenant string) bool {
	for el := st.order.Front(); el != nil; el = el.Next() {
		if e := el.Value.(*idemEntry); e.finished && (tenant == "" || e.tenant == tenant) {
			st.remove(el)
			return true
		}
	}
	return false
}

// expire drops the finished entries older than the TTL (the list is in
// creation order).
func (st *idemStore) expire(now time.Time) {
	for el := st.order.Front(); el != nil && now.Sub(el.Value.(*idemEntry).created) > st.ttl; {
		next := el.Next()
		if el.Value.(*idemEntry).finished {
			st.remove(el)
		}
		el = next
	}
}

func (st *idemStore) remove(el *list.Element) {
	e := el.Value.(*idemEntry)
	st.order.Remove(el)
	if cur, ok := st.entries[e.key]; ok && cur == el {
		delete(st.entries, e.key)
	}
	st.drop(e, "")
	if tn := st.tenants[e.tenant]; tn != nil {
		if tn.entries--; tn.entries <= 0 {
			delete(st.tenants, e.tenant)
		}
	}
}

// drop forgets e's kept answer (its key stays while e is listed: a repeat
// gets 409 with why).
func (st *idemStore) drop(e *idemEntry, why string) {
	if !e.counted {
		return
	}
	st.total -= len(e.body)
	if tn := st.tenants[e.tenant]; tn != nil {
		tn.bytes -= len(e.body)
	}
	e.counted = false
	if why != "" {
		e.body, e.kept, e.why = nil, false, why
	}
}

// answer is what a repeat of e replays, read under the lock (drop may
// forget the body after finish).
func (st *idemStore) answer(e *idemEntry) (status int, header http.Header, body []byte, kept bool, size int, why string) {
	st.mu.Lock()
	defer st.mu.Unlock()
	return e.status, e.header, e.body, e.kept, e.size, e.why
}

// finish records the first call's answer (rec) and wakes the waiters; an
// answer that says the call did not run (429, 503) or no answer at all
// (the handler panicked) forgets the key instead, so a repeat runs. cut:
// the client went away before the answer ended; the key is kept, the
// answer is not.
func (st *idemStore) finish(e *idemEntry, rec *idemRecorder, ok, cut bool) {
	st.mu.Lock()
	defer st.mu.Unlock()
	defer close(e.done)
	e.finished = true
	status := rec.status
	if status == 0 {
		status = http.StatusOK
	}
	el, listed := st.entries[e.key]
	listed = listed && el.Value == e
	if !ok || status == http.StatusTooManyRequests || status == http.StatusServiceUnavailable {
		if listed {
			st.remove(el)
		}
		return // e.status stays 0: waiters run their own request
	}
	e.status, e.header, e.size = status, rec.header, rec.size
	switch {
	case cut:
		e.why = "was cut: its client went away before it ended"
		return
	case rec.overflow:
		e.why = fmt.Sprintf("was larger than the %d bytes kept for repeats", st.maxBody)
		return
	}
	e.body, e.kept = rec.buf, true
	if !listed {
		return // evicted while it ran: its waiters still have the answer
	}
	e.counted = true
	st.total += len(e.body)
	tn := st.tenants[e.tenant]
	tn.bytes += len(e.body)
	// Keep the bytes bounded, the tenant's share first: drop the oldest
	// answers (their keys stay).
	const dropped = "was dropped to keep the memory of repeats bounded"
	for el := st.order.Front(); tn.bytes > st.maxTotal/4 && el != nil; el = el.Next() {
		if old := el.Value.(*idemEntry); old != e && old.counted && old.tenant == e.tenant {
			st.drop(old, dropped)
		}
	}
	for el := st.order.Front(); st.total > st.maxTotal && el != nil; el = el.Next() {
		if old := el.Value.(*idemEntry); old != e && old.counted {
			st.drop(old, dropped)
		}
	}
}

// idempotent runs a POST carrying an Idempotency-Key once per key (see the
// top of this file). It sits inside authenticate (keys are per tenant) and
// limitBody (the body it reads is bounded).
func (s *Server) idempotent(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		key, ok := r.Header[http.CanonicalHeaderKey(IdempotencyHeader)]
		if r.Method != http.MethodPost || !ok {
			next.ServeHTTP(w, r)
			return
		}
		if err := checkIdemKey(key); err != nil {
			s.countError("invalid_idempotency_key")
			writeError(w, http.StatusBadRequest, "invalid_idempotency_key", err.Error())
			return
		}
		body, err := io.ReadAll(r.Body)
		if err != nil {
			if _, tooLarge := errors.AsType[*http.MaxBytesError](err); tooLarge {
				s.countError("body_too_large")
				writeError(w, http.StatusRequestEntityTooLarge, "body_too_large", s.bodyTooLarge())
				return
			}
			writeError(w, http.StatusBadRequest, "invalid", fmt.Sprintf("reading the request body: %v", err))
			return
		}
		r.Body = io.NopCloser(bytes.NewReader(body))
		fp := idemFingerprint(r, body)
		for {
			e, first, err := s.idem.claim(tenantOf(r.Context()), key[0], fp)
			if err != nil {
				s.countError("idempotency_store_full")
				w.Header().Set("Retry-After", "1")
				writeError(w, http.StatusServiceUnavailable, "idempotency_store_full", err.Error()+"; retry later")
				return
			}
			if e.fingerprint != fp {
				s.countError("idempotency_key_reused")
				writeError(w, http.StatusUnprocessableEntity, "idempotency_key_reused", fmt.Sprintf(
					"Idempotency-Key %q was sent before with a different request (method, path, session or body): send a new key with a new request", clip(key[0], 64)))
				return
			}
			if first {
				s.runOnce(w, r, next, e)
				return
			}
			select {
			case <-e.done:
			case <-r.Context().Done():
				return // the client is gone
			}
			if st, _, _, _, _, _ := s.idem.answer(e); st == 0 {
				continue // the first did not run: this one may
			}
			s.replay(w, e, key[0])
			return
		}
	})
}

func (s *Server) runOnce(w http.ResponseWriter, r *http.Request, next http.Handler, e *idemEntry) {
	rec := &idemRecorder{ResponseWriter: w, max: s.idem.maxBody}
	ok := false
	defer func() { s.idem.finish(e, rec, ok, r.Context().Err() != nil) }()
	next.ServeHTTP(rec, r)
	ok = true
}

func (s *Server) replay(w http.ResponseWriter, e *idemEntry, key string) {
	s.metrics.idemReplays.Inc()
	status, header, body, kept, size, why := s.idem.answer(e)
	if !kept {
		s.countError("idempotency_answer_not_kept")
		writeError(w, http.StatusConflict, "idempotency_answer_not_kept", fmt.Sprintf(
			"the request with Idempotency-Key %q already ran (status %d); its answer (%d bytes) %s", clip(key, 64), status, size, why))
		return
	}
	h := w.Header()
	for k, v := range header {
		switch k {
		case "Connection", "Content-Length", "Date", "X-Request-Id":
			continue
		}
		h[k] = v
	}
	h.Set(idemReplayHeader, "true")
	w.WriteHeader(status)
	_, _ = w.Write(body)
}

// checkIdemKey accepts one key of 1–255 visible ASCII characters.
func checkIdemKey(vals []string) error {
	if len(vals) != 1 {
		return fmt.Errorf("send one %s header, not %d", IdempotencyHeader, len(vals))
	}
	k := vals[0]
	if k == "" || len(k) > idemMaxKey {
		return fmt.Errorf("%s must be 1 to %d characters, not %d", IdempotencyHeader, idemMaxKey, len(k))
	}
	for i := 0; i < len(k); i++ {
		if k[i] < 0x21 || k[i] > 0x7e {
			return fmt.Errorf("%s may hold visible ASCII characters only (byte %d is 0x%02x)", IdempotencyHeader, i, k[i])
		}
	}
	return nil
}

// idemFingerprint is what must match for a repeat to be the same request.
func idemFingerprint(r *http.Request, body []byte) [sha256.Size]byte {
	h := sha256.New()
	for _, s := range []string{r.Method, r.URL.RequestURI(), r.Header.Get(SessionHeader), r.Header.Get("Mcp-Session-Id"), r.Header.Get("Accept")} {
		fmt.Fprintf(h, "%d:%s", len(s), s)
	}
	h.Write(body)
	var fp [sha256.Size]byte
	copy(fp[:], h.Sum(nil))
	return fp
}

// idemRecorder passes an answer through and keeps a copy of it, up to
// max bytes. It passes Flush through (SSE, MCP streams).
type idemRecorder struct {
	http.ResponseWriter
	max      int
	status   int
	header   http.Header
	buf      []byte
	size     int
	overflow bool
}

func (w *idemRecorder) WriteHeader(code int) {
	if w.status == 0 {
		w.status = code
		w.header = w.ResponseWriter.Header().Clone()
	}
	w.ResponseWriter.WriteHeader(code)
}

func (w *idemRecorder) Write(b []byte) (int, error) {
	if w.status == 0 {
		w.WriteHeader(http.StatusOK)
	}
	w.size += len(b)
	if !w.overflow {
		if len(w.buf)+len(b) > w.max {
			w.overflow, w.buf = true, nil
		} else {
			w.buf = append(w.buf, b...)
		}
	}
	return w.ResponseWriter.Write(b)
}

func (w *idemRecorder) Flush() {
	if w.status == 0 {
		w.WriteHeader(http.StatusOK)
	}
	if f, ok := w.ResponseWriter.(http.Flusher); ok {
		f.Flush()
	}
}

func (w *idemRecorder) Unwrap() http.ResponseWriter { return w.ResponseWriter }

func (w *idemRecorder) Hijack() (net.Conn, *bufio.ReadWriter, error) {
	if h, ok := w.ResponseWriter.(http.Hijacker); ok {
		return h.Hijack()
	}
	return nil, nil, errors.New("hijack not supported")
}
