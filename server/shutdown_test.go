package server

import (
	"context"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"
)

// Retire: /readyz fails, calls are still served and each answer closes its
// connection; then Drain refuses new calls.
func TestRetire(t *testing.T) {
	r := newRig(t, nil)
	call := func() (*http.Response, string) {
		t.Helper()
		req, _ := http.NewRequest("POST", r.ts.URL+"/v1/sessions/s1/tools/bash", strings.NewReader(`{"command":"echo hi","description":"hi"}`))
		req.Header.Set("Authorization", "Bearer "+tokenAcme)
		req.Header.Set("Content-Type", "application/json")
		resp, err := r.ts.Client().Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp, string(b)
	}
	if resp, b := call(); resp.StatusCode != 200 || resp.Close {
		t.Fatalf("before Retire: %d close=%v %s", resp.StatusCode, resp.Close, b)
	}
	r.srv.Retire()
	if code, b := r.do("GET", "/readyz", "", "", nil); code != 503 || !strings.Contains(string(b), "draining") {
		t.Errorf("readyz after Retire: %d %s", code, b)
	}
	for range 2 {
		// Each on a new connection: the last one was closed.
		if resp, b := call(); resp.StatusCode != 200 || !resp.Close || !strings.Contains(b, "hi") {
			t.Errorf("a call after Retire: %d close=%v %s", resp.StatusCode, resp.Close, b)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := r.srv.Drain(ctx); err != nil {
		t.Fatal(err)
	}
	if resp, b := call(); resp.StatusCode != 503 || !strings.Contains(b, "draining") {
		t.Errorf("a call after Drain: %d %s", resp.StatusCode, b)
	}
}

// A call whose request arrived before Drain began is served even when its
// handler gets to the call after (an overloaded server reading a request
// sent on a kept-alive connection during the drain delay); one that
// arrived after is refused; Drain waits for the admitted one.
func TestDrainServesAdmitted(t *testing.T) {
	r := newRig(t, nil)
	before := context.WithValue(context.Background(), admittedKey{}, true)
	r.srv.mu.Lock()
	r.srv.draining = true
	r.srv.mu.Unlock()
	if !r.srv.beginCall(before) {
		t.Fatal("a call that arrived before the drain was refused")
	}
	if r.srv.beginCall(context.Background()) {
		t.Fatal("a call that arrived during the drain was served")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	if err := r.srv.Drain(ctx); err == nil {
		t.Fatal("Drain returned while an admitted call ran")
	}
	r.srv.endCall()
	ctx2, cancel2 := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel2()
	if err := r.srv.Drain(ctx2); err != nil {
		t.Fatalf("Drain after the call ended: %v", err)
	}
}
