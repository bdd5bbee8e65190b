package secrets

import (
	"fmt"
	"regexp"
	"slices"
	"strings"
)

// nameRE is a secret's name: what a file name in the secrets directory may
// be without quoting or hiding (no leading dot, no slash).
var nameRE = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$`)

// ValidName reports whether name can name a secret.
func ValidName(name string) bool { return nameRE.MatchString(name) }

// Template is a header value with ${secret:NAME} references, as a policy
// writes it: literal text and references, in order.
type Template struct {
	parts []part
}

type part struct {
	text   string // literal text, when secret is ""
	secret string
}

// ParseTemplate parses s. Anything but a well-formed ${secret:NAME} after
// a "${" is an error (so a typo is not sent as text), as are control
// characters (they would split the header).
func ParseTemplate(s string) (Template, error) {
	var t Template
	rest := s
	for rest != "" {
		i := strings.Index(rest, "${")
		if i < 0 {
			t.parts = append(t.parts, part{text: rest})
			break
		}
		if i > 0 {
			t.parts = append(t.parts, part{text: rest[:i]})
		}
		end := strings.IndexByte(rest[i:], '}')
		if end < 0 {
			return Template{}, fmt.Errorf("%q: ${ without a closing }", s)
		}
		ref := rest[i+2 : i+end]
		name, ok := strings.CutPrefix(ref, "secret:")
		if !ok {
			return Template{}, fmt.Errorf("%q: ${%s}: the only reference is ${secret:NAME}", s, ref)
		}
		if !ValidName(name) {
			return Template{}, fmt.Errorf("%q: %q is not a secret name (letters, digits, '.', '_', '-'; at most 128, not starting with '.' or '-')", s, name)
		}
		t.parts = append(t.parts, part{secret: name})
		rest = rest[i+end+1:]
	}
	for _, p := range t.parts {
		if strings.ContainsFunc(p.text, func(r rune) bool { return r < 0x20 && r != '\t' || r == 0x7f }) {
			return Template{}, fmt.Errorf("%q: control characters are not allowed in a header value", s)
		}
	}
	if len(t.Secrets()) == 0 {
		return Template{}, fmt.Errorf("%q references no secret (write ${secret:NAME}); a constant belongs in the client's own configuration", s)
	}
	return t, nil
}

// Secrets returns the names the template references, in order, once each.
func (t Template) Secrets() []string {
	var out []string
	for _, p := range t.parts {
		if p.secret != "" && !slices.Contains(out, p.secret) {
			out = append(out, p.secret)
		}
	}
	return out
}

// String is the template as written: references, never values.
func (t Template) String() string {
	var b strings.Builder
	for _, p := range t.parts {
		if p.secret != "" {
			b.WriteString("${secret:" + p.secret + "}")
		} else {
			b.WriteString(p.text)
		}
	}
	return b.String()
}

// IsZero reports whether t is the zero Template.
func (t Template) IsZero() bool { return len(t.parts) == 0 }

// resolve renders t with the store's values. The error names the missing
// secret, never a value.
func (t Template) resolve(s Source) (string, error) {
	var b strings.Builder
	for _, p := range t.parts {
		if p.secret == "" {
			b.WriteString(p.text)
			continue
		}
		v, err := s.Secret(p.secret)
		if err != nil {
			return "", err
		}
		b.WriteString(v)
	}
	return b.String(), nil
}

// MarshalText is String: a policy shown as JSON names its secrets.
func (t Template) MarshalText() ([]byte, error) { return []byte(t.String()), nil }
