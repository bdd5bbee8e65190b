package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/cookiejar"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/shellbox/shellbox/server"
)

// TestServeConsole: server.operatorTokens logs an operator into the
// console of `shellbox serve`, which tails audit.file.
func TestServeConsole(t *testing.T) {
	isolateLocal(t)
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "acme.yaml"), []byte(servePolicy), 0o644); err != nil {
		t.Fatal(err)
	}
	audit := filepath.Join(t.TempDir(), "audit.log")
	f := filepath.Join(t.TempDir(), "shellbox.yaml")
	cfg := fmt.Sprintf("policies:\n  dir: %s\naudit:\n  file: %s\nserver:\n  operatorTokens: [%q]\n  tenants:\n    acme:\n      tokens: [%q]\n",
		dir, audit, server.HashToken("op-token"), server.HashToken("acme-token"))
	if err := os.WriteFile(f, []byte(cfg), 0o644); err != nil {
		t.Fatal(err)
	}
	s := startServe(t, f)
	req, _ := http.NewRequest("POST", s.url+"/v1/sessions/s1/tools/bash", strings.NewReader(`{"command":"echo audited","description":"t"}`))
	req.Header.Set("Authorization", "Bearer acme-token")
	req.Header.Set("Content-Type", "application/json")
	if resp, err := http.DefaultClient.Do(req); err != nil || resp.StatusCode != 200 {
		t.Fatalf("call: %v %v", resp, err)
	}
	jar, _ := cookiejar.New(nil)
	hc := &http.Client{Jar: jar}
	resp, err := hc.Post(s.url+"/ui/api/login", "application/json", bytes.NewReader([]byte(`{"token":"op-token"}`)))
	if err != nil || resp.StatusCode != 200 {
		t.Fatalf("operator login: %v %v", resp, err)
	}
	var me struct {
		Operator bool
		Tenants  []string
	}
	json.NewDecoder(resp.Body).Decode(&me)
	resp.Body.Close()
	if !me.Operator || len(me.Tenants) != 1 || me.Tenants[0] != "acme" {
		t.Errorf("operator login: %+v", me)
	}
	resp, err = hc.Get(s.url + "/ui/api/audit")
	if err != nil {
		t.Fatal(err)
	}
	var body struct{ Records []server.AuditRecord }
	json.NewDecoder(resp.Body).Decode(&body)
	resp.Body.Close()
	if resp.StatusCode != 200 || len(body.Records) != 1 || body.Records[0].Command != "echo audited" || body.Records[0].Decision != "allow" {
		t.Errorf("audit: %d %+v", resp.StatusCode, body)
	}
	s.stop()
}
