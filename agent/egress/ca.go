package egress

import (
	"bytes"
	"encoding/base64"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"syscall"
)

// systemBundles are where images keep their trusted roots (Debian and
// Ubuntu, Fedora and RHEL, Alpine and others, openSUSE): the first found is
// the bundle's start, so a command trusting the egress CA keeps trusting
// what it did.
var systemBundles = []string{
	"/etc/ssl/certs/ca-certificates.crt",
	"/etc/pki/tls/certs/ca-bundle.crt",
	"/etc/ssl/cert.pem",
	"/etc/ssl/ca-bundle.pem",
}

// Bounds of the CA install: the relay's CA certificate, and the image's
// roots copied into the bundle.
const (
	maxCAHeader    = 16 << 10
	maxImageBundle = 8 << 20
	// MaxBundleBytes bounds the bundle installCA writes: the image's
	// roots, a newline, the comment line and the certificates (their PEM
	// is no longer than the header's base64 of it, plus line ends). A
	// directory that holds the bundle needs twice this while one bundle
	// replaces another (the new one is written beside the old, then
	// renamed over it): kube sizes its pods' /run/shellbox by it.
	MaxBundleBytes = maxImageBundle + maxCAHeader + 4<<10
)

// caDir makes the bundle's directory where it is missing (mode 0755), and
// takes group and other write away from it where the agent owns it: on
// Kubernetes /run/shellbox is a memory emptyDir, a tmpfs of mode 1777
// owned by root, which is the agent everywhere but in restricted pods.
// Without that a command could fill it, or put a file or directory of its
// own where the next bundle goes.
// A directory the agent does not own is left as it is: in restricted pods
// the agent is the commands' uid (no mode keeps them out), and on Docker
// and containerd the host directory bound there is the server's to set
// (0755 or tighter), where chmod would need CAP_FOWNER. Either way a
// command can only change what its own sandbox trusts: the bundle is in
// the sandbox, and the relay's CA and keys are not.
func caDir(dir string) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	fi, err := os.Stat(dir)
	if err != nil {
		return err
	}
	st, ok := fi.Sys().(*syscall.Stat_t)
	if !ok || int(st.Uid) != os.Geteuid() || fi.Mode().Perm()&0o022 == 0 {
		return nil
	}
	return os.Chmod(dir, fi.Mode().Perm()&^0o022)
}

// installCA writes the bundle at p.cfg.CAFile: the image's roots, then the
// certificate(s) of hdr (base64 of PEM, egresswire.CAHeader), atomically,
// readable by every user and writable by none but the agent. Unchanged
// content is not rewritten.
func (p *Proxy) installCA(hdr string) error {
	if p.cfg.CAFile == "" {
		return errors.New("this agent installs no CA (no CA file configured)")
	}
	if len(hdr) > maxCAHeader {
		return fmt.Errorf("CA over %d bytes", maxCAHeader)
	}
	raw, err := base64.StdEncoding.DecodeString(hdr)
	if err != nil {
		return fmt.Errorf("CA: %w", err)
	}
	// Only certificates go in: nothing else the relay (or anyone on the
	// socket) sends reaches the file.
	var certs []byte
	for rest := raw; ; {
		var b *pem.Block
		b, rest = pem.Decode(rest)
		if b == nil {
			break
		}
		if b.Type != "CERTIFICATE" {
			return fmt.Errorf("CA: a %s block; want certificates only", b.Type)
		}
		certs = append(certs, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: b.Bytes})...)
	}
	if len(certs) == 0 {
		return errors.New("CA: no certificate")
	}
	p.caMu.Lock()
	defer p.caMu.Unlock()
	if bytes.Equal(certs, p.caInstalled) {
		return nil
	}
	var bundle bytes.Buffer
	for _, sys := range p.systemBundles {
		f, err := os.Open(sys)
		if err != nil {
			continue
		}
		_, err = io.Copy(&bundle, io.LimitReader(f, maxImageBundle))
		f.Close()
		if err == nil {
			break
		}
		bundle.Reset()
	}
	if bundle.Len() > 0 && !bytes.HasSuffix(bundle.Bytes(), []byte("\n")) {
		bundle.WriteByte('\n')
	}
	bundle.WriteString("# shellbox egress CA: the relay terminates TLS for destinations given credentials\n")
	bundle.Write(certs)
	dir := filepath.Dir(p.cfg.CAFile)
	if err := caDir(dir); err != nil {
		return fmt.Errorf("CA bundle: %w", err)
	}
	tmp, err := os.CreateTemp(dir, ".egress-ca-*")
	if err != nil {
		return fmt.Errorf("CA bundle: %w", err)
	}
	defer os.Remove(tmp.Name())
	if _, err := tmp.Write(bundle.Bytes()); err != nil {
		tmp.Close()
		return fmt.Errorf("CA bundle: %w", err)
	}
	if err := tmp.Chmod(0o644); err != nil {
		tmp.Close()
		return fmt.Errorf("CA bundle: %w", err)
	}
	if err := tmp.Close(); err != nil {
		return fmt.Errorf("CA bundle: %w", err)
	}
	if err := os.Rename(tmp.Name(), p.cfg.CAFile); err != nil {
		return fmt.Errorf("CA bundle: %w", err)
	}
	p.caInstalled = certs
	return nil
}
