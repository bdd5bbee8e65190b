package secrets

import (
	"bytes"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/hkdf"
	"crypto/rand"
	"crypto/sha256"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"math/big"
	"time"
)

// Replicas of a release must agree on what a sandbox sees of the egress:
// a placeholder one replica gave a session must be recognized by the
// relay of another, and a leaf another replica shows the sandbox's
// clients must chain to the CA certificate the sandbox was given. Files
// on each replica's disk (NewCAs) cannot promise that; one key shared by
// every replica (a Kubernetes Secret the chart makes) can: NewDerivedCAs
// derives everything from it with HKDF-SHA256, and writes nothing.
//
//   - the placeholder key: HKDF(key, "shellbox placeholder key");
//   - a tenant's CA key: the P-256 scalar HKDF(key, "shellbox egress CA key
//     <i> <tenant>"), for the first i whose output is a valid scalar;
//   - its certificate: subject, serial (HKDF), validity (from
//     derivedCAEpoch, caLife long) and key identifier fixed by the key and
//     tenant, so every replica's is the same certificate but for its
//     signature's random bytes, and a leaf any replica signs verifies
//     against any replica's copy.
//
// A new key is a new placeholder for every session and a new CA for every
// tenant (sandboxes made before trust the old one: recreate them), as a
// new caDir is.

// MinDerivedKey is the shortest key NewDerivedCAs takes.
const MinDerivedKey = 32

// derivedCAEpoch is the derived CAs' NotBefore: one instant for every
// replica, whenever each starts.
var derivedCAEpoch = time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC)

// NewDerivedCAs returns CAs derived from key (at least MinDerivedKey
// bytes; see above).
func NewDerivedCAs(key []byte) (*CAs, error) {
	if len(key) < MinDerivedKey {
		return nil, fmt.Errorf("egress key: %d bytes, want at least %d", len(key), MinDerivedKey)
	}
	return &CAs{root: append([]byte(nil), key...), cas: map[string]*CA{}}, nil
}

// LoadDerivedCAs is NewDerivedCAs of the key in path (at most 64 KiB;
// trailing white space, a final newline say, is not part of the key).
func LoadDerivedCAs(path string) (*CAs, error) {
	b, err := readBounded(path)
	if err != nil {
		return nil, err
	}
	cas, err := NewDerivedCAs(bytes.TrimRight(b, " \t\r\n"))
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return cas, nil
}

func derive(root []byte, info string, n int) ([]byte, error) {
	return hkdf.Key(sha256.New, root, nil, info, n)
}

// derivedCA is tenant's CA derived from root.
func derivedCA(root []byte, tenant string) (*CA, error) {
	var key *ecdsa.PrivateKey
	for i := 0; key == nil; i++ {
		if i == 64 { // each try fails with probability < 2^-32
			return nil, fmt.Errorf("egress CA of %s: no valid key derived", tenant)
		}
		b, err := derive(root, fmt.Sprintf("shellbox egress CA key %d %s", i, tenant), 32)
		if err != nil {
			return nil, fmt.Errorf("egress CA of %s: %w", tenant, err)
		}
		key, _ = ecdsa.ParseRawPrivateKey(elliptic.P256(), b)
	}
	sb, err := derive(root, "shellbox egress CA serial "+tenant, 16)
	if err != nil {
		return nil, fmt.Errorf("egress CA of %s: %w", tenant, err)
	}
	sb[0] &= 0x7f
	sb[0] |= 0x40 // positive, and never zero
	tmpl := &x509.Certificate{
		SerialNumber:          new(big.Int).SetBytes(sb),
		Subject:               pkix.Name{CommonName: "shellbox egress CA " + tenant, Organization: []string{"shellbox"}},
		NotBefore:             derivedCAEpoch,
		NotAfter:              derivedCAEpoch.Add(caLife),
		IsCA:                  true,
		BasicConstraintsValid: true,
		MaxPathLenZero:        true,
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageCRLSign,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return nil, fmt.Errorf("egress CA of %s: %w", tenant, err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, fmt.Errorf("egress CA of %s: %w", tenant, err)
	}
	return newCA(cert, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), key), nil
}
