package secrets

import (
	"container/list"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"fmt"
	"math/big"
	"os"
	"path/filepath"
	"sync"
	"time"
)

// Bounds and lifetimes of a CA's leaves.
const (
	// MaxLeaves bounds the leaf certificates a CA keeps minted (one per
	// host a credential names; the least recently used goes first).
	MaxLeaves = 1024
	// leafLife is a leaf's validity; one with less than leafRenew left is
	// minted again.
	leafLife  = 24 * time.Hour
	leafRenew = time.Hour
	caLife    = 10 * 365 * 24 * time.Hour
	// maxKeyFile bounds what is read of a CA or key file.
	maxKeyFile = 64 << 10
)

// CA is a tenant's egress CA: the relay presents leaves it signs to the
// sandbox's clients when it terminates their TLS. Its key never leaves the
// server (a file of mode 0600 on one host); the sandbox gets the
// certificate (CertPEM) to trust. Safe for concurrent use.
type CA struct {
	cert    *x509.Certificate
	certPEM []byte
	key     *ecdsa.PrivateKey
	now     func() time.Time

	mu     sync.Mutex
	leaves map[string]*list.Element // host → element of lru (a *leaf)
	lru    *list.List
}

type leaf struct {
	host string
	cert *tls.Certificate
}

// LoadOrCreateCA reads the CA at path (a PEM certificate and PKCS#8
// key), creating it for tenant first if there is none. Two servers
// creating it at once agree on one (the file is linked into place, never
// overwritten).
func LoadOrCreateCA(path, tenant string) (*CA, error) {
	b, err := readBounded(path)
	if errors.Is(err, os.ErrNotExist) {
		if err := createCA(path, tenant); err != nil {
			return nil, err
		}
		b, err = readBounded(path)
	}
	if err != nil {
		return nil, fmt.Errorf("egress CA of %s: %w", tenant, err)
	}
	var ca CA
	for rest := b; ; {
		var blk *pem.Block
		blk, rest = pem.Decode(rest)
		if blk == nil {
			break
		}
		switch blk.Type {
		case "CERTIFICATE":
			if ca.cert, err = x509.ParseCertificate(blk.Bytes); err != nil {
				return nil, fmt.Errorf("egress CA %s: %w", path, err)
			}
			ca.certPEM = pem.EncodeToMemory(blk)
		case "PRIVATE KEY":
			k, err := x509.ParsePKCS8PrivateKey(blk.Bytes)
			if err != nil {
				return nil, fmt.Errorf("egress CA %s: key: %w", path, err)
			}
			ek, ok := k.(*ecdsa.PrivateKey)
			if !ok {
				return nil, fmt.Errorf("egress CA %s: key: want ECDSA, got %T", path, k)
			}
			ca.key = ek
		}
	}
	if ca.cert == nil || ca.key == nil || !ca.cert.IsCA {
		return nil, fmt.Errorf("egress CA %s: want a CA certificate and its PKCS#8 key", path)
	}
	if !ca.key.PublicKey.Equal(ca.cert.PublicKey) {
		return nil, fmt.Errorf("egress CA %s: the key is not the certificate's", path)
	}
	return newCA(ca.cert, ca.certPEM, ca.key), nil
}

// newCA is the CA of cert (PEM: certPEM) and its key.
func newCA(cert *x509.Certificate, certPEM []byte, key *ecdsa.PrivateKey) *CA {
	return &CA{cert: cert, certPEM: certPEM, key: key, now: time.Now, leaves: map[string]*list.Element{}, lru: list.New()}
}

func createCA(path, tenant string) error {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return err
	}
	now := time.Now()
	tmpl := &x509.Certificate{
		SerialNumber:          serial(),
		Subject:               pkix.Name{CommonName: "shellbox egress CA " + tenant, Organization: []string{"shellbox"}},
		NotBefore:             now.Add(-time.Hour),
		NotAfter:              now.Add(caLife),
		IsCA:                  true,
		BasicConstraintsValid: true,
		MaxPathLenZero:        true,
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageCRLSign,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return err
	}
	kder, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		return err
	}
	out := append(pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: kder})...)
	return writeOnce(path, out)
}

// writeOnce writes b to path (mode 0600, its directory 0700) unless a
// file is there already, which then wins.
func writeOnce(path string, b []byte) error {
	dir := filepath.Dir(path)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return err
	}
	f, err := os.CreateTemp(dir, ".new-*")
	if err != nil {
		return err
	}
	defer os.Remove(f.Name())
	if _, err := f.Write(b); err != nil {
		f.Close()
		return err
	}
	if err := f.Sync(); err != nil {
		f.Close()
		return err
	}
	if err := f.Close(); err != nil {
		return err
	}
	if err := os.Link(f.Name(), path); err != nil && !errors.Is(err, os.ErrExist) {
		return err
	}
	return nil
}

func readBounded(path string) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	b := make([]byte, maxKeyFile+1)
	n, err := f.Read(b)
	for err == nil && n < len(b) {
		var m int
		m, err = f.Read(b[n:])
		n += m
	}
	if n > maxKeyFile {
		return nil, fmt.Errorf("%s is over %d bytes", path, maxKeyFile)
	}
	return b[:n], nil
}

func serial() *big.Int {
	n, _ := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 127))
	return n
}

// CertPEM is the CA's certificate, for the sandbox to trust.
func (ca *CA) CertPEM() []byte { return ca.certPEM }

// Certificate is the CA's parsed certificate.
func (ca *CA) Certificate() *x509.Certificate { return ca.cert }

// Leaf returns a certificate for host signed by the CA, minted on first
// use and kept (at most MaxLeaves hosts) until it nears its end.
func (ca *CA) Leaf(host string) (*tls.Certificate, error) {
	now := ca.now()
	ca.mu.Lock()
	if e, ok := ca.leaves[host]; ok {
		l := e.Value.(*leaf)
		if now.Add(leafRenew).Before(l.cert.Leaf.NotAfter) {
			ca.lru.MoveToFront(e)
			ca.mu.Unlock()
			return l.cert, nil
		}
	}
	ca.mu.Unlock()
	// Minted outside the lock: two first requests for a host may both
	// mint, and the second replaces the first; both are valid.
	c, err := ca.mint(host, now)
	if err != nil {
		return nil, fmt.Errorf("egress CA: a certificate for %s: %w", host, err)
	}
	ca.mu.Lock()
	defer ca.mu.Unlock()
	if e, ok := ca.leaves[host]; ok {
		e.Value = &leaf{host: host, cert: c}
		ca.lru.MoveToFront(e)
		return c, nil
	}
	ca.leaves[host] = ca.lru.PushFront(&leaf{host: host, cert: c})
	for ca.lru.Len() > MaxLeaves {
		old := ca.lru.Back()
		ca.lru.Remove(old)
		delete(ca.leaves, old.Value.(*leaf).host)
	}
	return c, nil
}

func (ca *CA) mint(host string, now time.Time) (*tls.Certificate, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, err
	}
	tmpl := &x509.Certificate{
		SerialNumber: serial(),
		Subject:      pkix.Name{CommonName: host},
		DNSNames:     []string{host},
		NotBefore:    now.Add(-time.Hour),
		NotAfter:     now.Add(leafLife),
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.cert, &key.PublicKey, ca.key)
	if err != nil {
		return nil, err
	}
	parsed, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, err
	}
	return &tls.Certificate{Certificate: [][]byte{der, ca.cert.Raw}, PrivateKey: key, Leaf: parsed}, nil
}

// CAs are the tenants' CAs under a directory (dir/<tenant>.pem), loaded or
// created on first use, and the placeholder key (dir/placeholder.key); or,
// made by NewDerivedCAs, all derived from one key (derived.go).
type CAs struct {
	dir  string
	root []byte // NewDerivedCAs' key; nil: files of dir

	mu  sync.Mutex
	cas map[string]*CA
}

// NewCAs returns the CAs of dir.
func NewCAs(dir string) *CAs { return &CAs{dir: dir, cas: map[string]*CA{}} }

// For returns tenant's CA. tenant must be a checked ID (no '/').
func (c *CAs) For(tenant string) (*CA, error) {
	if tenant == "" || filepath.Base(tenant) != tenant || tenant[0] == '.' {
		return nil, fmt.Errorf("egress CA: %q is not a tenant name", tenant)
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if ca, ok := c.cas[tenant]; ok {
		return ca, nil
	}
	var ca *CA
	var err error
	if c.root != nil {
		ca, err = derivedCA(c.root, tenant)
	} else {
		ca, err = LoadOrCreateCA(filepath.Join(c.dir, tenant+".pem"), tenant)
	}
	if err != nil {
		return nil, err
	}
	c.cas[tenant] = ca
	return ca, nil
}

// PlaceholderKey reads dir/placeholder.key, creating 32 random bytes there
// first if there is none (derived CAs: derived from their key).
func (c *CAs) PlaceholderKey() ([]byte, error) {
	if c.root != nil {
		return derive(c.root, "shellbox placeholder key", 32)
	}
	p := filepath.Join(c.dir, "placeholder.key")
	b, err := readBounded(p)
	if errors.Is(err, os.ErrNotExist) {
		k := make([]byte, 32)
		rand.Read(k)
		if err := writeOnce(p, k); err != nil {
			return nil, fmt.Errorf("placeholder key: %w", err)
		}
		b, err = readBounded(p)
	}
	if err != nil {
		return nil, fmt.Errorf("placeholder key: %w", err)
	}
	if len(b) < 32 {
		return nil, fmt.Errorf("placeholder key %s: %d bytes, want at least 32", p, len(b))
	}
	return b, nil
}
