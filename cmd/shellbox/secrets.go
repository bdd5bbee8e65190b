package main

import (
	"crypto/x509"
	"fmt"
	"os"
	"path/filepath"

	"github.com/shellbox/shellbox/config"
	"github.com/shellbox/shellbox/secrets"
	"github.com/shellbox/shellbox/session"
)

// withSecrets gives the layer's egress what injecting policies'
// credentials takes: the secrets (secrets.dir, then SHELLBOX_SECRET_*
// variables), the tenants' CAs and the placeholder key (egress.caDir, or
// derived from egress.keyFile), and
// the roots upstreams are verified against (the system's, plus
// egress.upstreamCA).
func withSecrets(ec *session.EgressConfig, cfg config.Config) error {
	if d := cfg.Secrets.Dir; d != "" {
		if fi, err := os.Stat(d); err != nil || !fi.IsDir() {
			return fmt.Errorf("secrets.dir %s: not a directory (%v)", d, err)
		}
	}
	ec.Secrets = secrets.NewStore(cfg.Secrets.Dir, nil)
	if f := cfg.Egress.KeyFile; f != "" {
		cas, err := secrets.LoadDerivedCAs(f)
		if err != nil {
			return fmt.Errorf("egress.keyFile: %w", err)
		}
		ec.CAs = cas
	} else {
		dir := cfg.Egress.CADir
		if dir == "" {
			dir = filepath.Join(cfg.Sandbox.StateDir, "egress-ca")
		}
		ec.CAs = secrets.NewCAs(dir)
	}
	if f := cfg.Egress.UpstreamCA; f != "" {
		pem, err := os.ReadFile(f)
		if err != nil {
			return fmt.Errorf("egress.upstreamCA: %w", err)
		}
		roots, err := x509.SystemCertPool()
		if err != nil {
			roots = x509.NewCertPool()
		}
		if !roots.AppendCertsFromPEM(pem) {
			return fmt.Errorf("egress.upstreamCA %s: no PEM certificate in it", f)
		}
		ec.UpstreamRoots = roots
	}
	return nil
}
