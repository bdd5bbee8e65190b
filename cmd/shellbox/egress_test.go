package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/shellbox/shellbox/config"
)

func TestEgressConfig(t *testing.T) {
	isolate(t)
	f := filepath.Join(t.TempDir(), "shellbox.yaml")
	os.WriteFile(f, []byte("egress:\n  blocked: [127.0.0.0/8]\n  grantBlocked: [10.0.0.0/33]\n"), 0o644)
	if _, err := config.Load(nil, f); err == nil || !strings.Contains(err.Error(), `config: egress: grantBlocked: entry 0: "10.0.0.0/33" is not an address range`) {
		t.Errorf("bad range: %v", err)
	}
	os.WriteFile(f, []byte("egress:\n  blocked: []\n  grantBlocked: [192.0.2.1]\n"), 0o644)
	cfg, err := config.Load(nil, f)
	if err != nil {
		t.Fatal(err)
	}
	ec := egressConfig(cfg.Egress)
	if len(ec.Blocked) != 0 || len(ec.GrantBlocked) != 1 || ec.GrantBlocked[0] != "192.0.2.1" {
		t.Errorf("configured ranges not applied: %+v", ec)
	}
}
