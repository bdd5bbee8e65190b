package server

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
)

// idemPost sends a POST with an Idempotency-Key (none when key is empty).
func (r *rig) idemPost(path, token, key string, body []byte) (*http.Response, []byte) {
	r.t.Helper()
	req, err := http.NewRequest(http.MethodPost, r.ts.URL+path, bytes.NewReader(body))
	if err != nil {
		r.t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+token)
	req.Header.Set("Content-Type", "application/json")
	if key != "" {
		req.Header.Set(IdempotencyHeader, key)
	}
	resp, err := r.ts.Client().Do(req)
	if err != nil {
		r.t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		r.t.Fatal(err)
	}
	return resp, b
}

// countingCall is a bash call that appends a line to a file in the
// session's working directory each time it runs; runs counts the lines,
// with a call of its own in session s1.
func countingCall(t *testing.T, r *rig, sleep string) ([]byte, func() int) {
	body, _ := json.Marshal(map[string]any{"command": fmt.Sprintf("sleep %s; echo run >> runs; wc -l < runs", sleep), "description": "count a run"})
	return body, func() int {
		t.Helper()
		code, m := r.json(http.MethodPost, "/v1/sessions/s1/tools/bash", tokenAcme, map[string]any{"command": "wc -l < runs", "description": "count the runs"})
		if code != 200 {
			t.Fatalf("counting: %d %v", code, m)
		}
		var n int
		if _, err := fmt.Sscan(fmt.Sprint(m["text"]), &n); err != nil {
			t.Fatalf("counting: %v: %v", m, err)
		}
		return n
	}
}

func TestIdempotentRepeat(t *testing.T) {
	r := newRig(t, nil)
	body, runs := countingCall(t, r, "0")
	first, b1 := r.idemPost("/v1/sessions/s1/tools/bash", tokenAcme, "key-1", body)
	again, b2 := r.idemPost("/v1/sessions/s1/tools/bash", tokenAcme, "key-1", body)
	if first.StatusCode != 200 || again.StatusCode != 200 {
		t.Fatalf("statuses %d, %d: %s / %s", first.StatusCode, again.StatusCode, b1, b2)
	}
	if !bytes.Equal(b1, b2) {
		t.Fatalf("the repeat's answer differs:\n%s\n%s", b1, b2)
	}
	if first.Header.Get(idemReplayHeader) != "" || again.Header.Get(idemReplayHeader) != "true" {
		t.Fatalf("%s: first %q, repeat %q", idemReplayHeader, first.Header.Get(idemReplayHeader), again.Header.Get(idemReplayHeader))
	}
	if again.Header.Get("Content-Type") != first.Header.Get("Content-Type") {
		t.Fatalf("Content-Type %q, first %q", again.Header.Get("Content-Type"), first.Header.Get("Content-Type"))
	}
	if n := runs(); n != 1 {
		t.Fatalf("the command ran %d times", n)
	}

	// Another key, no key, and the same key of another tenant all run.
	r.idemPost("/v1/sessions/s1/tools/bash", tokenAcme, "key-2", body)
	r.idemPost("/v1/sessions/s1/tools/bash", tokenAcme, "", body)
	if n := runs(); n != 3 {
		t.Fatalf("the command ran %d times, want 3", n)
	}
	if resp, b := r.idemPost("/v1/sessions/s1/tools/bash", tokenBeta, "key-1", body); resp.StatusCode != 200 || resp.Header.Get(idemReplayHeader) != "" {
		t.Fatalf("tenant beta, acme's key: %d %s, replayed %q", resp.StatusCode, b, resp.Header.Get(idemReplayHeader))
	}
	if got := testutil.ToFloat64(r.srv.metrics.idemReplays); got != 1 {
		t.Fatalf("shellbox_idempotent_replays_total = %v, want 1", got)
	}
}

func TestIdempotentConcurrentRepeats(t *testing.T) {
	r := newRig(t, nil)
	body, runs := countingCall(t, r, "0.3")
	var wg sync.WaitGroup
	answers := make([][]byte, 5)
	for i := range answers {
		wg.Go(func() {
			resp, b := r.idemPost("/v1/sessions/s1/tools/bash", tokenAcme, "same", body)
			if resp.StatusCode != 200 {
				t.Errorf("status %d: %s", resp.StatusCode, b)
			}
			answers[i] = b
		})
	}
	wg.Wait()
	for i := range answers {
		if !bytes.Equal(answers[i], answers[0]) {
			t.Fatalf("answer %d differs:\n%s\n%s", i, answers[i], answers[0])
		}
	}
	if n := runs(); n != 1 {
		t.Fatalf("the command ran %d times", n)
	}
}

func TestIdempotentKeyReusedForAnotherRequest(t *testing.T) {
	r := newRig(t, nil)
	body, runs := countingCall(t, r, "0")
	r.idemPost("/v1/sessions/s1/tools/bash", tokenAcme, "k", body)
	for _, c := range []struct{ path, body string }{
		{"/v1/sessions/s1/tools/bash", `{"command":"echo other"}`},
		{"/v1/sessions/s2/tools/bash", string(body)},
	} {
		resp, b := r.idemPost(c.path, tokenAcme, "k", []byte(c.body))
		var m map[string]any
		_ = json.Unmarshal(b, &m)
		if resp.StatusCode != http.StatusUnprocessableEntity || errCode(m) != "idempotency_key_reused" ||
			!strings.Contains(errMsg(m), `Idempotency-Key "k" was sent before with a different request`) {
			t.Fatalf("%s: %d %s", c.path, resp.StatusCode, b)
		}
	}
	if n := runs(); n != 1 {
		t.Fatalf("the command ran %d times", n)
	}
}

func TestIdempotencyKeyInvalid(t *testing.T) {
	r := newRig(t, nil)
	for name, set := range map[string]func(http.Header){
		"empty":    func(h http.Header) { h.Set(IdempotencyHeader, "") },
		"too long": func(h http.Header) { h.Set(IdempotencyHeader, strings.Repeat("k", 256)) },
		"space":    func(h http.Header) { h.Set(IdempotencyHeader, "a b") },
		"non-ascii": func(h http.Header) {
			h.Set(IdempotencyHeader, "clé")
		},
		"two": func(h http.Header) { h.Add(IdempotencyHeader, "a"); h.Add(IdempotencyHeader, "b") },
	} {
		req, _ := http.NewRequest(http.MethodPost, r.ts.URL+"/v1/sessions/s1/tools/bash", strings.NewReader(`{"command":"true"}`))
		req.Header.Set("Authorization", "Bearer "+tokenAcme)
		req.Header.Set("Content-Type", "application/json")
		set(req.Header)
		resp, err := r.ts.Client().Do(req)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		var m map[string]any
		_ = json.Unmarshal(b, &m)
		if resp.StatusCode != 400 || errCode(m) != "invalid_idempotency_key" || !strings.Contains(errMsg(m), IdempotencyHeader) {
			t.Errorf("%s: %d %s", name, resp.StatusCode, b)
		}
	}
	// Unauthenticated requests are refused before the key is looked at.
	resp, _ := r.idemPost("/v1/sessions/s1/tools/bash", "wrong", "k", []byte(`{"command":"true"}`))
	if resp.StatusCode != http.StatusUnauthorized {
		t.Fatalf("bad token: %d", resp.StatusCode)
	}
}

func TestIdempotentBodyTooLarge(t *testing.T) {
	r := newRig(t, func(c *Config) { c.MaxBodyBytes = 64 })
	req, _ := http.NewRequest(http.MethodPost, r.ts.URL+"/v1/sessions/s1/tools/bash", io.MultiReader(strings.NewReader(strings.Repeat(" ", 100))))
	req.ContentLength = -1 // chunked: limitBody cannot refuse it up front
	req.Header.Set("Authorization", "Bearer "+tokenAcme)
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set(IdempotencyHeader, "k")
	resp, err := r.ts.Client().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusRequestEntityTooLarge || !strings.Contains(string(b), "body_too_large") {
		t.Fatalf("%d %s", resp.StatusCode, b)
	}
}

// idemHandler serves h behind s.idempotent as tenant acme.
func idemHandler(t *testing.T, mut func(*idemStore), h http.HandlerFunc) (*Server, http.Handler) {
	t.Helper()
	r := newRig(t, nil)
	if mut != nil {
		mut(r.srv.idem)
	}
	return r.srv, r.srv.authenticate(r.srv.idempotent(h))
}

func idemServe(h http.Handler, key, body string) *httptest.ResponseRecorder {
	req := httptest.NewRequest(http.MethodPost, "/x", strings.NewReader(body))
	req.Header.Set("Authorization", "Bearer "+tokenAcme)
	req.Header.Set(IdempotencyHeader, key)
	w := httptest.NewRecorder()
	h.ServeHTTP(w, req)
	return w
}

func TestIdempotentRefusalsAreNotKept(t *testing.T) {
	for _, status := range []int{http.StatusTooManyRequests, http.StatusServiceUnavailable} {
		runs := 0
		_, h := idemHandler(t, nil, func(w http.ResponseWriter, r *http.Request) {
			runs++
			if runs == 1 {
				w.WriteHeader(status)
				return
			}
			fmt.Fprint(w, "ran")
		})
		idemServe(h, "k", "b")
		if w := idemServe(h, "k", "b"); w.Code != 200 || w.Body.String() != "ran" || runs != 2 {
			t.Fatalf("after a %d: %d %q, runs %d", status, w.Code, w.Body, runs)
		}
		// The answer that ran is kept.
		if w := idemServe(h, "k", "b"); w.Body.String() != "ran" || runs != 2 {
			t.Fatalf("third: %q, runs %d", w.Body, runs)
		}
	}
}

func TestIdempotentPanicForgetsKey(t *testing.T) {
	runs := 0
	_, h := idemHandler(t, nil, func(w http.ResponseWriter, r *http.Request) {
		runs++
		if runs == 1 {
			panic("boom")
		}
		fmt.Fprint(w, "ran")
	})
	func() {
		defer func() { _ = recover() }()
		idemServe(h, "k", "b")
	}()
	if w := idemServe(h, "k", "b"); w.Body.String() != "ran" || runs != 2 {
		t.Fatalf("%q, runs %d", w.Body, runs)
	}
}

func TestIdempotentLargeAnswerNotKept(t *testing.T) {
	runs := 0
	_, h := idemHandler(t, func(st *idemStore) { st.maxBody = 10 }, func(w http.ResponseWriter, r *http.Request) {
		runs++
		fmt.Fprint(w, strings.Repeat("x", 11))
	})
	if w := idemServe(h, "k", "b"); w.Body.Len() != 11 {
		t.Fatalf("first: %q", w.Body)
	}
	w := idemServe(h, "k", "b")
	if w.Code != http.StatusConflict || !strings.Contains(w.Body.String(), "idempotency_answer_not_kept") ||
		!strings.Contains(w.Body.String(), "(11 bytes) was larger than the 10 bytes kept") || runs != 1 {
		t.Fatalf("%d %s, runs %d", w.Code, w.Body, runs)
	}
}

func TestIdemStoreBounds(t *testing.T) {
	st := newIdemStore()
	st.maxEntries, st.maxTotal, st.ttl = 8, 40, time.Minute
	now := time.Unix(1000, 0)
	st.now = func() time.Time { return now }
	var fp [sha256.Size]byte
	start := func(tenant, key string) *idemEntry {
		t.Helper()
		e, first, err := st.claim(tenant, key, fp)
		if err != nil || !first {
			t.Fatalf("%s/%s: first %v, %v", tenant, key, first, err)
		}
		return e
	}
	put := func(tenant, key, body string) {
		t.Helper()
		st.finish(start(tenant, key), &idemRecorder{status: 200, buf: []byte(body)}, true, false)
	}
	has := func(tenant, key string) bool { _, ok := st.entries[tenant+"\x00"+key]; return ok }
	kept := func(tenant, key string) bool {
		el, ok := st.entries[tenant+"\x00"+key]
		return ok && el.Value.(*idemEntry).kept
	}

	// A tenant holds a quarter of the keys: its fifth pushes out its own
	// oldest, not another tenant's.
	put("b", "b1", "")
	for _, k := range []string{"a1", "a2", "a3", "a4"} {
		put("a", k, "")
	}
	put("a", "a5", "")
	if has("a", "a1") || !has("a", "a5") || !has("b", "b1") || st.tenants["a"].entries != 2 {
		t.Fatalf("after a's fifth key: a1 %v a5 %v b1 %v, a holds %d", has("a", "a1"), has("a", "a5"), has("b", "b1"), st.tenants["a"].entries)
	}

	// A key whose call still runs is never dropped: a tenant whose keys
	// all run is refused a new one.
	st = newIdemStore()
	st.maxEntries, st.maxTotal, st.ttl, st.now = 8, 40, time.Minute, func() time.Time { return now }
	for _, k := range []string{"r1", "r2"} {
		start("a", k)
	}
	if _, _, err := st.claim("a", "r3", fp); !errors.Is(err, errIdemFull) || !strings.Contains(err.Error(), "tenant a has 2") {
		t.Fatalf("a third running key: %v", err)
	}
	now = now.Add(2 * time.Minute)
	if _, _, err := st.claim("b", "b1", fp); err != nil || !has("a", "r1") {
		t.Fatalf("running keys past the TTL: %v, r1 kept %v", err, has("a", "r1"))
	}

	// Bytes: past the tenant's quarter (10) its oldest answers are dropped,
	// their keys kept (a repeat gets 409, not a second run).
	st = newIdemStore()
	st.maxEntries, st.maxTotal, st.ttl, st.now = 8, 40, time.Minute, func() time.Time { return now }
	put("a", "x1", "123456")
	put("a", "x2", "123456")
	if kept("a", "x1") || !has("a", "x1") || !kept("a", "x2") || st.total != 6 || st.tenants["a"].bytes != 6 {
		t.Fatalf("after the tenant's byte share: x1 kept %v listed %v, x2 kept %v, total %d", kept("a", "x1"), has("a", "x1"), kept("a", "x2"), st.total)
	}
	if e := st.entries["a\x00x1"].Value.(*idemEntry); !strings.Contains(e.why, "dropped to keep the memory of repeats bounded") {
		t.Fatalf("why: %q", e.why)
	}
	// The TTL drops finished keys.
	now = now.Add(2 * time.Minute)
	put("c", "c1", "")
	if len(st.entries) != 1 || st.order.Len() != 1 || st.total != 0 || len(st.tenants) != 1 {
		t.Fatalf("after the TTL: %d entries, %d listed, total %d, %d tenants", len(st.entries), st.order.Len(), st.total, len(st.tenants))
	}
}

// A first call whose client went away before its answer ended keeps its
// key (the command ran) but not the answer: a repeat gets 409 saying so.
func TestIdempotentCutAnswerNotKept(t *testing.T) {
	runs := 0
	_, h := idemHandler(t, nil, func(w http.ResponseWriter, r *http.Request) {
		runs++
		fmt.Fprint(w, "partial")
	})
	ctx, cancel := context.WithCancel(context.Background())
	req := httptest.NewRequest(http.MethodPost, "/x", strings.NewReader("b")).WithContext(ctx)
	req.Header.Set("Authorization", "Bearer "+tokenAcme)
	req.Header.Set(IdempotencyHeader, "k")
	cancel()
	h.ServeHTTP(httptest.NewRecorder(), req)
	w := idemServe(h, "k", "b")
	if w.Code != http.StatusConflict || !strings.Contains(w.Body.String(), "was cut: its client went away before it ended") || runs != 1 {
		t.Fatalf("%d %s, runs %d", w.Code, w.Body, runs)
	}
}
