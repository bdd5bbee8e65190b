package secrets

import (
	"bytes"
	"crypto/ecdsa"
	"crypto/x509"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestDerivedCAsAgreeAcrossReplicas: two servers holding the same key (two
// replicas of a release) give the same placeholders, and a leaf either one
// signs verifies against the CA certificate the other gave a sandbox; a
// tenant's CA is its own, and another key is another CA.
func TestDerivedCAsAgreeAcrossReplicas(t *testing.T) {
	key := bytes.Repeat([]byte{7}, MinDerivedKey)
	a, err := NewDerivedCAs(key)
	if err != nil {
		t.Fatal(err)
	}
	b, err := NewDerivedCAs(key)
	if err != nil {
		t.Fatal(err)
	}
	pa, err := a.PlaceholderKey()
	if err != nil {
		t.Fatal(err)
	}
	pb, _ := b.PlaceholderKey()
	if !bytes.Equal(pa, pb) || len(pa) != 32 {
		t.Fatalf("placeholder keys differ across replicas (%d, %d bytes)", len(pa), len(pb))
	}
	if NewPlaceholders(pa).For("acme", "s1", "gh") != NewPlaceholders(pb).For("acme", "s1", "gh") {
		t.Error("a placeholder differs across replicas")
	}

	caA, err := a.For("acme")
	if err != nil {
		t.Fatal(err)
	}
	caB, err := b.For("acme")
	if err != nil {
		t.Fatal(err)
	}
	for _, pair := range []struct {
		name         string
		signer, pool *CA
	}{{"a's leaf, b's CA", caA, caB}, {"b's leaf, a's CA", caB, caA}} {
		leaf, err := pair.signer.Leaf("api.example.test")
		if err != nil {
			t.Fatal(err)
		}
		roots := x509.NewCertPool()
		if !roots.AppendCertsFromPEM(pair.pool.CertPEM()) {
			t.Fatal("the CA's PEM does not parse")
		}
		if _, err := leaf.Leaf.Verify(x509.VerifyOptions{Roots: roots, DNSName: "api.example.test"}); err != nil {
			t.Errorf("%s: %v", pair.name, err)
		}
	}
	if !strings.Contains(caA.Certificate().Subject.CommonName, "acme") || !caA.Certificate().IsCA {
		t.Errorf("derived CA certificate: %v", caA.Certificate().Subject)
	}

	other, _ := a.For("globex")
	if other.Certificate().PublicKey.(*ecdsa.PublicKey).Equal(caA.Certificate().PublicKey) {
		t.Error("two tenants were derived the same CA key")
	}
	c, _ := NewDerivedCAs(bytes.Repeat([]byte{8}, MinDerivedKey))
	caC, _ := c.For("acme")
	leaf, _ := caC.Leaf("api.example.test")
	roots := x509.NewCertPool()
	roots.AppendCertsFromPEM(caA.CertPEM())
	if _, err := leaf.Leaf.Verify(x509.VerifyOptions{Roots: roots, DNSName: "api.example.test"}); err == nil {
		t.Error("a leaf of another key's CA verified")
	}
	if pc, _ := c.PlaceholderKey(); bytes.Equal(pc, pa) {
		t.Error("another key gave the same placeholder key")
	}
}

func TestDerivedCAsShortKey(t *testing.T) {
	if _, err := NewDerivedCAs(make([]byte, MinDerivedKey-1)); err == nil || !strings.Contains(err.Error(), "at least 32") {
		t.Errorf("a %d-byte key: %v", MinDerivedKey-1, err)
	}
}

// TestLoadDerivedCAs: a key file's trailing newline is not part of the key
// (an operator's `echo` and a Secret's bytes agree); a short or missing
// file is refused, naming it.
func TestLoadDerivedCAs(t *testing.T) {
	dir := t.TempDir()
	key := strings.Repeat("k", 40)
	a := filepath.Join(dir, "a")
	b := filepath.Join(dir, "b")
	os.WriteFile(a, []byte(key), 0o600)
	os.WriteFile(b, []byte(key+"\n"), 0o600)
	ca, err := LoadDerivedCAs(a)
	if err != nil {
		t.Fatal(err)
	}
	cb, err := LoadDerivedCAs(b)
	if err != nil {
		t.Fatal(err)
	}
	ka, _ := ca.PlaceholderKey()
	kb, _ := cb.PlaceholderKey()
	if !bytes.Equal(ka, kb) {
		t.Error("a trailing newline changed the derived key")
	}
	short := filepath.Join(dir, "short")
	os.WriteFile(short, []byte("too short\n"), 0o600)
	if _, err := LoadDerivedCAs(short); err == nil || !strings.Contains(err.Error(), short) {
		t.Errorf("a 9-byte key file: %v", err)
	}
	if _, err := LoadDerivedCAs(filepath.Join(dir, "none")); err == nil || !strings.Contains(err.Error(), "none") {
		t.Errorf("a missing key file: %v", err)
	}
}
