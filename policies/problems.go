package policies

import (
	"fmt"
	"reflect"
	"slices"
	"strings"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/shellbox/shellbox/internal/clip"
)

// Problem is one error in a policy file, located: the file, the 1-based line
// (0 when no line applies) and the key path, such as rules[2].match.args[0].
type Problem struct {
	File string `json:"file"`
	Line int    `json:"line"`
	Key  string `json:"key,omitempty"`
	Msg  string `json:"message"`
}

func (p Problem) String() string {
	var b strings.Builder
	b.WriteString(p.File)
	if p.Line > 0 {
		fmt.Fprintf(&b, ":%d", p.Line)
	}
	b.WriteString(": ")
	if p.Key != "" {
		b.WriteString(p.Key)
		b.WriteString(": ")
	}
	b.WriteString(p.Msg)
	return b.String()
}

// LoadError is a policy file that cannot be used, with every problem found
// (at most maxProblems).
type LoadError struct {
	File     string
	Problems []Problem
}

const maxProblems = 50

func (e *LoadError) Error() string {
	lines := make([]string, len(e.Problems))
	for i, p := range e.Problems {
		lines[i] = p.String()
	}
	return strings.Join(lines, "\n")
}

// located collects problems of one file and remembers the line of every key
// path, so checks after decoding can still point at the line.
type located struct {
	file     string
	lines    map[string]int
	problems []Problem
}

func (l *located) addf(key string, format string, args ...any) {
	if len(l.problems) >= maxProblems {
		return
	}
	l.problems = append(l.problems, Problem{File: l.file, Line: l.line(key), Key: key, Msg: fmt.Sprintf(format, args...)})
}

// line returns the line of key, or of its nearest ancestor that has one.
func (l *located) line(key string) int {
	for k := key; k != ""; {
		if n, ok := l.lines[k]; ok {
			return n
		}
		i := strings.LastIndexAny(k, ".[")
		if i < 0 {
			break
		}
		k = k[:i]
	}
	return 0
}

func (l *located) err() error {
	if len(l.problems) == 0 {
		return nil
	}
	return &LoadError{File: l.file, Problems: l.problems}
}

// checkNode checks a YAML node against the schema type t: every key known
// (names match as viper matches them, case-insensitively), no key twice,
// every value of the right shape and type. It records lines as it goes.
func (l *located) checkNode(n *yaml.Node, t reflect.Type, key string) {
	if n.Kind == yaml.AliasNode {
		l.addf(key, "aliases (*name) are not supported in policy files")
		return
	}
	if key != "" {
		if _, ok := l.lines[key]; !ok {
			l.lines[key] = n.Line
		}
	}
	if n.Kind == yaml.ScalarNode && n.Tag == "!!null" {
		return // an empty value leaves the default
	}
	if t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	switch {
	case t == durationType:
		if n.Kind != yaml.ScalarNode || n.Tag != "!!str" {
			l.addf(key, "expected a duration such as 30s or 5m, got %s", describe(n))
		} else if _, err := time.ParseDuration(n.Value); err != nil {
			l.addf(key, "expected a duration such as 30s or 5m, got %q", n.Value)
		}
	case t == bytesType:
		if n.Kind != yaml.ScalarNode || (n.Tag != "!!str" && n.Tag != "!!int") {
			l.addf(key, "expected a size such as 1048576 or 512MiB, got %s", describe(n))
		} else if _, err := ParseBytes(n.Value); err != nil {
			l.addf(key, "%v", err)
		}
	case t.Kind() == reflect.Struct:
		if n.Kind != yaml.MappingNode {
			l.addf(key, "expected a mapping, got %s", describe(n))
			return
		}
		seen := map[string]bool{}
		for i := 0; i+1 < len(n.Content); i += 2 {
			k, v := n.Content[i], n.Content[i+1]
			f, ok := fieldByTag(t, k.Value)
			child := join(key, k.Value)
			if !ok {
				l.lines[child] = k.Line
				l.addf(child, "unknown key (known: %s)", strings.Join(tags(t), ", "))
				continue
			}
			child = join(key, tagOf(f))
			if seen[strings.ToLower(k.Value)] {
				l.lines[child] = k.Line
				l.addf(child, "key given twice")
				continue
			}
			seen[strings.ToLower(k.Value)] = true
			l.lines[child] = k.Line
			l.checkNode(v, f.Type, child)
		}
	case t.Kind() == reflect.Map:
		// A map's keys are names the file chooses (env variables): they
		// match exactly, case included.
		if n.Kind != yaml.MappingNode {
			l.addf(key, "expected a mapping, got %s", describe(n))
			return
		}
		seen := map[string]bool{}
		for i := 0; i+1 < len(n.Content); i += 2 {
			k, v := n.Content[i], n.Content[i+1]
			child := join(key, k.Value)
			l.lines[child] = k.Line
			if k.Kind != yaml.ScalarNode || k.Tag != "!!str" {
				l.addf(child, "expected a name as key, got %s", describe(k))
				continue
			}
			if seen[k.Value] {
				l.addf(child, "key given twice")
				continue
			}
			seen[k.Value] = true
			l.checkNode(v, t.Elem(), child)
		}
	case t.Kind() == reflect.Slice:
		if n.Kind != yaml.SequenceNode {
			l.addf(key, "expected a list, got %s", describe(n))
			return
		}
		for i, c := range n.Content {
			l.checkNode(c, t.Elem(), fmt.Sprintf("%s[%d]", key, i))
		}
	case t.Kind() == reflect.String:
		if n.Kind != yaml.ScalarNode || n.Tag != "!!str" {
			l.addf(key, "expected a string, got %s (quote it)", describe(n))
		}
	case t.Kind() == reflect.Bool:
		if n.Kind != yaml.ScalarNode || n.Tag != "!!bool" {
			l.addf(key, "expected true or false, got %s", describe(n))
		}
	case t.Kind() == reflect.Int, t.Kind() == reflect.Int64:
		if n.Kind != yaml.ScalarNode || n.Tag != "!!int" {
			l.addf(key, "expected an integer, got %s", describe(n))
		}
	case t.Kind() == reflect.Float64:
		if n.Kind != yaml.ScalarNode || (n.Tag != "!!int" && n.Tag != "!!float") {
			l.addf(key, "expected a number, got %s", describe(n))
		}
	default:
		l.addf(key, "internal: no check for %s", t)
	}
}

func describe(n *yaml.Node) string {
	switch n.Kind {
	case yaml.MappingNode:
		return "a mapping"
	case yaml.SequenceNode:
		return "a list"
	case yaml.ScalarNode:
		kind := map[string]string{"!!str": "string", "!!int": "integer", "!!float": "number", "!!bool": "boolean"}[n.Tag]
		if kind == "" {
			kind = strings.TrimPrefix(n.Tag, "!!")
		}
		return fmt.Sprintf("%s %s", kind, clip.To(n.Value, 40))
	}
	return "something else"
}

func join(key, child string) string {
	if key == "" {
		return child
	}
	return key + "." + child
}

func tagOf(f reflect.StructField) string { return f.Tag.Get("mapstructure") }

func fieldByTag(t reflect.Type, name string) (reflect.StructField, bool) {
	for i := range t.NumField() {
		if f := t.Field(i); strings.EqualFold(tagOf(f), name) {
			return f, true
		}
	}
	return reflect.StructField{}, false
}

func tags(t reflect.Type) []string {
	var out []string
	for i := range t.NumField() {
		out = append(out, tagOf(t.Field(i)))
	}
	slices.Sort(out)
	return out
}
