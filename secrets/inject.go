package secrets

import (
	"encoding/base64"
	"fmt"
	"net/http"
	"strings"
)

// Credential is one credential of a policy, bound to a session: what the
// relay needs to inject it into a request to one of its hosts.
type Credential struct {
	// Name is the policy's name for it (audit, errors).
	Name string
	// Header, if set (canonical form), is set to Value on every request.
	Header string
	// Value is the header value, with its secret references.
	Value Template
	// Placeholder, if set, is the session's placeholder: wherever a
	// request header carries it (also inside Basic credentials, as git
	// sends a URL's userinfo), it is replaced by Value.
	Placeholder string
}

// Injector rewrites the requests of one connection to one of its
// credentials' hosts. The caller has matched the host; an Injector never
// looks at it.
type Injector struct {
	creds []Credential
	src   Source
}

// NewInjector returns the Injector of creds (those whose hosts include the
// connection's) over src.
func NewInjector(src Source, creds []Credential) *Injector {
	return &Injector{creds: creds, src: src}
}

// Injected is what Rewrite did to one request: the names of the
// credentials it used, and the values it sent (for Scrub; never to be
// logged).
type Injected struct {
	Names  []string
	values []string
}

// Rewrite injects the credentials into h: first each placeholder is
// replaced wherever it appears, then each Header is set. An error (a
// secret not set) names the credential and the secret; h may then be half
// rewritten and must not be sent.
func (in *Injector) Rewrite(h http.Header) (Injected, error) {
	var done Injected
	for _, c := range in.creds {
		var value string
		resolve := func() error {
			if value != "" {
				return nil
			}
			v, err := c.Value.resolve(in.src)
			if err != nil {
				return fmt.Errorf("credential %s: %w", c.Name, err)
			}
			value = v
			return nil
		}
		used := false
		if c.Placeholder != "" {
			for k, vs := range h {
				for i, v := range vs {
					nv, hit, err := substitute(k, v, c.Placeholder, resolve, &value)
					if err != nil {
						return Injected{}, err
					}
					if hit {
						vs[i], used = nv, true
						done.values = append(done.values, nv)
					}
				}
			}
		}
		if c.Header != "" {
			if err := resolve(); err != nil {
				return Injected{}, err
			}
			h.Set(c.Header, value)
			used = true
			done.values = append(done.values, value)
		}
		if used {
			done.Names = append(done.Names, c.Name)
			for _, s := range c.Value.Secrets() {
				if v, err := in.src.Secret(s); err == nil {
					done.values = append(done.values, v)
				}
			}
		}
	}
	return done, nil
}

// substitute replaces ph in one header value, and inside a Basic
// credential's user:password; hit reports a replacement.
func substitute(key, v, ph string, resolve func() error, value *string) (string, bool, error) {
	if strings.Contains(v, ph) {
		if err := resolve(); err != nil {
			return "", false, err
		}
		return strings.ReplaceAll(v, ph, *value), true, nil
	}
	if key != "Authorization" {
		return v, false, nil
	}
	scheme, enc, ok := strings.Cut(v, " ")
	if !ok || !strings.EqualFold(scheme, "basic") || len(enc) > 4*MaxValueBytes {
		return v, false, nil
	}
	raw, err := base64.StdEncoding.DecodeString(strings.TrimSpace(enc))
	if err != nil || !strings.Contains(string(raw), ph) {
		return v, false, nil
	}
	if err := resolve(); err != nil {
		return "", false, err
	}
	return scheme + " " + base64.StdEncoding.EncodeToString([]byte(strings.ReplaceAll(string(raw), ph, *value))), true, nil
}

// Scrub replaces, in a response's header, each secret value the request
// was sent with, and each header value that carried one (a Basic
// credential is base64 of it), by "[secret]": a server that echoes a request's headers
// (a debugging endpoint, an error page) must not hand the secret to the
// sandbox. Bodies are not scrubbed (docs/security.md, Known limits).
func (d Injected) Scrub(h http.Header) {
	if len(d.values) == 0 {
		return
	}
	for _, vs := range h {
		for i, v := range vs {
			for _, s := range d.values {
				if strings.Contains(v, s) {
					v = strings.ReplaceAll(v, s, "[secret]")
				}
			}
			vs[i] = v
		}
	}
}
