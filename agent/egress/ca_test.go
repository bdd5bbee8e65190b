package egress

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/base64"
	"encoding/pem"
	"math/big"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// testCAHeader returns a fresh self-signed CA certificate as the relay
// sends it (egresswire.CAHeader: base64 of PEM), and its PEM.
func testCAHeader(t *testing.T) (hdr string, certPEM []byte) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "test egress CA"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	certPEM = pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})
	return base64.StdEncoding.EncodeToString(certPEM), certPEM
}

// TestInstallCAMakesDir: the bundle's directory is made where it is
// missing (on Docker and containerd it is not there until the agent makes
// it), mode 0755, and the bundle in it holds the image's roots, then the
// CA, mode 0644.
func TestInstallCAMakesDir(t *testing.T) {
	root := t.TempDir()
	roots := filepath.Join(root, "image-roots.crt")
	if err := os.WriteFile(roots, []byte("IMAGE ROOTS"), 0o644); err != nil {
		t.Fatal(err)
	}
	file := filepath.Join(root, "run", "egress", "ca.pem")
	p := NewProxy(ProxyConfig{CAFile: file})
	p.systemBundles = []string{filepath.Join(root, "missing.crt"), roots}
	hdr, certPEM := testCAHeader(t)
	if err := p.installCA(hdr); err != nil {
		t.Fatal(err)
	}
	fi, err := os.Stat(filepath.Dir(file))
	if err != nil {
		t.Fatal(err)
	}
	if fi.Mode().Perm() != 0o755 {
		t.Errorf("directory mode %v, want 0755", fi.Mode().Perm())
	}
	b, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(string(b), "IMAGE ROOTS\n") || !strings.HasSuffix(string(b), string(certPEM)) {
		t.Errorf("bundle %q: want the image's roots, then the CA", b)
	}
	if fi, err := os.Stat(file); err != nil || fi.Mode().Perm() != 0o644 {
		t.Errorf("bundle mode: %v %v, want 0644", fi.Mode().Perm(), err)
	}
}

// TestInstallCATightensDir: a directory the agent owns and others may
// write (a Kubernetes memory emptyDir is 1777) loses group and other write
// before the bundle goes in, so no command can rename a file of its own
// over it; the file a command planted there first is replaced.
func TestInstallCATightensDir(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "shellbox")
	if err := os.Mkdir(dir, 0o777); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(dir, 0o777|os.ModeSticky); err != nil { // past the umask
		t.Fatal(err)
	}
	file := filepath.Join(dir, "egress-ca.pem")
	if err := os.WriteFile(file, []byte("PLANTED"), 0o666); err != nil {
		t.Fatal(err)
	}
	p := NewProxy(ProxyConfig{CAFile: file})
	p.systemBundles = nil
	hdr, certPEM := testCAHeader(t)
	if err := p.installCA(hdr); err != nil {
		t.Fatal(err)
	}
	fi, err := os.Stat(dir)
	if err != nil {
		t.Fatal(err)
	}
	if fi.Mode().Perm() != 0o755 {
		t.Errorf("directory mode %v, want 0755", fi.Mode().Perm())
	}
	b, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(string(b), "PLANTED") || !strings.HasSuffix(string(b), string(certPEM)) {
		t.Errorf("bundle %q: want the CA alone", b)
	}
}
