package secrets

import (
	"crypto/x509"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func TestCA(t *testing.T) {
	dir := t.TempDir()
	cas := NewCAs(filepath.Join(dir, "ca"))
	ca, err := cas.For("acme")
	if err != nil {
		t.Fatal(err)
	}
	fi, err := os.Stat(filepath.Join(dir, "ca", "acme.pem"))
	if err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("CA file: %v %v", fi, err)
	}
	// The sandbox's copy is the certificate alone.
	if pem := string(ca.CertPEM()); strings.Contains(pem, "PRIVATE") || !strings.HasPrefix(pem, "-----BEGIN CERTIFICATE-----") {
		t.Errorf("CertPEM: %s", pem)
	}
	// A leaf verifies against the CA for its host only, as a server auth.
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(ca.CertPEM())
	c, err := ca.Leaf("api.github.com")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.Leaf.Verify(x509.VerifyOptions{DNSName: "api.github.com", Roots: pool}); err != nil {
		t.Errorf("verify: %v", err)
	}
	if _, err := c.Leaf.Verify(x509.VerifyOptions{DNSName: "github.com", Roots: pool}); err == nil {
		t.Error("a leaf verified for another host")
	}
	if again, _ := ca.Leaf("api.github.com"); again != c {
		t.Error("leaf not cached")
	}
	// Reloaded (another process, a restart): the same CA; another
	// tenant's is another, and does not verify this one's leaves.
	ca2, err := LoadOrCreateCA(filepath.Join(dir, "ca", "acme.pem"), "acme")
	if err != nil || string(ca2.CertPEM()) != string(ca.CertPEM()) {
		t.Fatalf("reload: %v", err)
	}
	other, err := cas.For("other")
	if err != nil {
		t.Fatal(err)
	}
	otherPool := x509.NewCertPool()
	otherPool.AppendCertsFromPEM(other.CertPEM())
	if _, err := c.Leaf.Verify(x509.VerifyOptions{DNSName: "api.github.com", Roots: otherPool}); err == nil {
		t.Error("another tenant's CA verifies this tenant's leaf")
	}
	if _, err := cas.For("../x"); err == nil {
		t.Error("a tenant with a path")
	}

	// A leaf near its end is minted again.
	ca.now = func() time.Time { return time.Now().Add(leafLife - leafRenew/2) }
	if renewed, _ := ca.Leaf("api.github.com"); renewed == c {
		t.Error("an expiring leaf was kept")
	}
	ca.now = time.Now

	// The cache is bounded.
	for i := range MaxLeaves + 10 {
		if _, err := ca.Leaf(fmt.Sprintf("h%d.example", i)); err != nil {
			t.Fatal(err)
		}
	}
	if ca.lru.Len() != MaxLeaves || len(ca.leaves) != MaxLeaves {
		t.Errorf("cache holds %d/%d leaves", ca.lru.Len(), len(ca.leaves))
	}

	// Damaged files are refused, naming the file.
	bad := filepath.Join(dir, "bad.pem")
	os.WriteFile(bad, ca.CertPEM(), 0o600)
	if _, err := LoadOrCreateCA(bad, "bad"); err == nil || !strings.Contains(err.Error(), bad) {
		t.Errorf("no key: %v", err)
	}
	b, _ := os.ReadFile(filepath.Join(dir, "ca", "acme.pem"))
	o, _ := os.ReadFile(filepath.Join(dir, "ca", "other.pem"))
	mixed := filepath.Join(dir, "mixed.pem")
	os.WriteFile(mixed, append(b[:strings.Index(string(b), "-----BEGIN PRIVATE")], o[strings.Index(string(o), "-----BEGIN PRIVATE"):]...), 0o600)
	if _, err := LoadOrCreateCA(mixed, "mixed"); err == nil || !strings.Contains(err.Error(), "not the certificate's") {
		t.Errorf("another CA's key: %v", err)
	}

	k1, err := cas.PlaceholderKey()
	if err != nil || len(k1) != 32 {
		t.Fatal(err)
	}
	if k2, _ := NewCAs(filepath.Join(dir, "ca")).PlaceholderKey(); string(k2) != string(k1) {
		t.Error("placeholder key not kept")
	}
}

func BenchmarkLeafCached(b *testing.B) {
	ca, err := LoadOrCreateCA(filepath.Join(b.TempDir(), "ca.pem"), "bench")
	if err != nil {
		b.Fatal(err)
	}
	ca.Leaf("h.example")
	for b.Loop() {
		ca.Leaf("h.example")
	}
}

func BenchmarkLeafMint(b *testing.B) {
	ca, err := LoadOrCreateCA(filepath.Join(b.TempDir(), "ca.pem"), "bench")
	if err != nil {
		b.Fatal(err)
	}
	for b.Loop() {
		ca.mint("h.example", time.Now())
	}
}
