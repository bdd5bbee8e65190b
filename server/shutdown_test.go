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
