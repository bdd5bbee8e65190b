package policies

import (
	"bytes"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"slices"
	"strconv"
	"strings"

	"github.com/go-viper/mapstructure/v2"
	"github.com/spf13/viper"
	"go.yaml.in/yaml/v3"

	"github.com/shellbox/shellbox/confine"
)

// maxFileBytes bounds a policy file: a policy is read whole, and on every
// reload.
const maxFileBytes = 1 << 20

// TenantOf returns the tenant a policy file belongs to (its name without
// .yaml), or "" when the name is not a policy file's. Only .yaml counts, so
// one tenant cannot have two files; hidden files (editor swap files) are
// ignored.
func TenantOf(file string) string {
	base := filepath.Base(file)
	if t, ok := strings.CutSuffix(base, ".yaml"); ok && t != "" && !strings.HasPrefix(base, ".") {
		return t
	}
	return ""
}

// LoadFile reads and validates one policy file. The tenant is the file's
// name without .yaml, and must be a valid tenant id. Errors are a
// *LoadError naming the file, line and key of every problem.
func LoadFile(file string) (*Policy, error) {
	f, err := os.Open(file)
	if err != nil {
		return nil, &LoadError{File: file, Problems: []Problem{{File: file, Msg: err.Error()}}}
	}
	defer f.Close()
	src, err := io.ReadAll(io.LimitReader(f, maxFileBytes+1))
	if err != nil {
		return nil, &LoadError{File: file, Problems: []Problem{{File: file, Msg: err.Error()}}}
	}
	if len(src) > maxFileBytes {
		return nil, &LoadError{File: file, Problems: []Problem{{File: file, Msg: fmt.Sprintf("larger than %d bytes", maxFileBytes)}}}
	}
	return Parse(file, src)
}

// Parse validates the policy src read from file (which names the tenant and
// the errors).
func Parse(file string, src []byte) (p *Policy, err error) {
	// No panic may reach a caller, whatever the file holds: a bug here
	// becomes a load error and the last good policy stays in force.
	defer func() {
		if r := recover(); r != nil {
			p, err = nil, &LoadError{File: file, Problems: []Problem{{File: file, Msg: fmt.Sprintf("internal error: %v", r)}}}
		}
	}()
	return parse(file, src)
}

// parse is Parse without the recover, for the fuzzer.
func parse(file string, src []byte) (*Policy, error) {
	l := &located{file: file, lines: map[string]int{}}
	tenant := TenantOf(file)
	if err := confine.CheckID("tenant", tenant); err != nil {
		l.addf("", "the file name must be <tenant>.yaml with a valid tenant id: %v", err)
		return nil, l.err()
	}

	// Shape first, with line numbers: yaml.v3 keeps them, viper does not.
	var doc yaml.Node
	var env []envVar
	if err := yaml.Unmarshal(src, &doc); err != nil {
		l.problems = append(l.problems, yamlProblem(file, err))
		return nil, l.err()
	}
	if len(doc.Content) > 0 {
		root := doc.Content[0]
		if len(doc.Content) > 1 {
			l.addf("", "more than one YAML document")
		}
		l.checkNode(root, reflect.TypeFor[fileSchema](), "")
		env = envVars(root)
	}
	if err := l.err(); err != nil {
		return nil, err
	}

	// Then the values, through viper, strictly: no weak typing, unknown keys
	// are errors (checkNode has already named them with their lines).
	v := viper.NewWithOptions(viper.KeyDelimiter("::"))
	v.SetConfigType("yaml")
	if err := v.ReadConfig(bytes.NewReader(src)); err != nil {
		l.addf("", "%v", err)
		return nil, l.err()
	}
	var fs fileSchema
	if err := v.UnmarshalExact(&fs, func(c *mapstructure.DecoderConfig) {
		c.WeaklyTypedInput = false
		c.DecodeHook = decodeHook
	}); err != nil {
		l.addf(decodeErrorKey(err), "%v", err)
		return nil, l.err()
	}

	p := compile(l, tenant, &fs, env)
	if err := l.err(); err != nil {
		return nil, err
	}
	checkExamples(l, p, &fs)
	if err := l.err(); err != nil {
		return nil, err
	}
	return p, nil
}

var yamlLineRE = regexp.MustCompile(`line (\d+)`)

// yamlProblem locates a YAML syntax error.
func yamlProblem(file string, err error) Problem {
	msg := strings.TrimPrefix(err.Error(), "yaml: ")
	line := 0
	if m := yamlLineRE.FindStringSubmatch(msg); m != nil {
		line, _ = strconv.Atoi(m[1])
		msg = strings.TrimSpace(strings.TrimPrefix(strings.Replace(msg, m[0], "", 1), ":"))
	}
	return Problem{File: file, Line: line, Msg: "invalid YAML: " + msg}
}

var decodeKeyRE = regexp.MustCompile(`'([^']+)'`)

// decodeErrorKey extracts the key a mapstructure error names, if any.
func decodeErrorKey(err error) string {
	if m := decodeKeyRE.FindStringSubmatch(err.Error()); m != nil {
		return m[1]
	}
	return ""
}

// LoadDir loads every policy file of dir. It returns the good policies by
// tenant and the problems of the others; a directory that cannot be read is
// an error.
func LoadDir(dir string) (map[string]*Policy, []error, error) {
	files, err := policyFiles(dir)
	if err != nil {
		return nil, nil, err
	}
	good := map[string]*Policy{}
	var bad []error
	for _, f := range files {
		p, err := LoadFile(f)
		if err != nil {
			bad = append(bad, err)
			continue
		}
		good[p.Tenant] = p
	}
	return good, bad, nil
}

// policyFiles lists dir's policy files, sorted.
func policyFiles(dir string) ([]string, error) {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return nil, fmt.Errorf("policies: %w", err)
	}
	var out []string
	for _, e := range entries {
		if e.IsDir() || TenantOf(e.Name()) == "" {
			continue
		}
		out = append(out, filepath.Join(dir, e.Name()))
	}
	slices.Sort(out)
	return out, nil
}
