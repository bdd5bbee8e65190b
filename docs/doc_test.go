package docs

import (
	"bufio"
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"sort"
	"strings"
	"testing"

	"github.com/shellbox/shellbox/config"
)

// pages are the Markdown files whose links are checked, relative to this
// directory.
func pages(t *testing.T) []string {
	t.Helper()
	files, err := filepath.Glob("*.md")
	if err != nil {
		t.Fatal(err)
	}
	files = append(files, "../README.md", "../policies/README.md", "../images/README.md", "../deploy/README.md")
	sort.Strings(files)
	return files
}

var (
	linkRE    = regexp.MustCompile(`\]\(([^)\s]+)\)`)
	fenceRE   = regexp.MustCompile("^\\s*```")
	headingRE = regexp.MustCompile(`^#{1,6}\s+(.*)$`)
)

// slug is GitHub's anchor of a heading: lower case, spaces to hyphens,
// punctuation but hyphens and underscores dropped.
func slug(heading string) string {
	heading = strings.ToLower(strings.TrimSpace(heading))
	var b strings.Builder
	for _, r := range heading {
		switch {
		case r == ' ':
			b.WriteByte('-')
		case r == '-' || r == '_' || r >= 'a' && r <= 'z' || r >= '0' && r <= '9' || r > 127:
			b.WriteRune(r)
		}
	}
	return b.String()
}

// scan returns the links outside code blocks and the anchors of a
// Markdown file.
func scan(t *testing.T, file string) (links []string, anchors map[string]bool) {
	t.Helper()
	f, err := os.Open(file)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	anchors = map[string]bool{}
	inFence := false
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 64*1024), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if fenceRE.MatchString(line) {
			inFence = !inFence
			continue
		}
		if inFence {
			continue
		}
		if m := headingRE.FindStringSubmatch(line); m != nil {
			anchors[slug(m[1])] = true
		}
		for _, m := range linkRE.FindAllStringSubmatch(line, -1) {
			links = append(links, m[1])
		}
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	return links, anchors
}

// Every relative link leads to a file or directory that exists, and a
// #fragment into a Markdown file to one of its headings.
func TestLinks(t *testing.T) {
	anchorsOf := map[string]map[string]bool{}
	anchorsFor := func(file string) map[string]bool {
		if a, ok := anchorsOf[file]; ok {
			return a
		}
		_, a := scan(t, file)
		anchorsOf[file] = a
		return a
	}
	checked := 0
	for _, page := range pages(t) {
		links, _ := scan(t, page)
		for _, l := range links {
			if strings.Contains(l, "://") || strings.HasPrefix(l, "mailto:") {
				continue
			}
			target, frag, _ := strings.Cut(l, "#")
			file := page
			if target != "" {
				file = filepath.Join(filepath.Dir(page), target)
				if _, err := os.Stat(file); err != nil {
					t.Errorf("%s: link %s: %v", page, l, err)
					continue
				}
			}
			if frag != "" && strings.HasSuffix(file, ".md") && !anchorsFor(file)[frag] {
				t.Errorf("%s: link %s: %s has no heading #%s", page, l, file, frag)
			}
			checked++
		}
	}
	if checked < 20 {
		t.Errorf("only %d links checked: is the link pattern still right?", checked)
	}
}

// testCommand is the line of file that starts with "go vet ./... &&".
func testCommand(t *testing.T, file string) string {
	t.Helper()
	data, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	var found []string
	for _, line := range strings.Split(string(data), "\n") {
		if strings.HasPrefix(strings.TrimSpace(line), "go vet ./... &&") {
			found = append(found, strings.TrimSpace(line))
		}
	}
	if len(found) != 1 {
		t.Fatalf("%s: %d test command lines (want 1): %q", file, len(found), found)
	}
	return found[0]
}

// The README's test command is exactly what CI runs.
func TestTestCommand(t *testing.T) {
	readme, ci := testCommand(t, "../README.md"), testCommand(t, "../.ci/run")
	if readme != ci {
		t.Errorf("README's test command differs from .ci/run's:\n README: %s\n CI:     %s", readme, ci)
	}
}

// configKeys walks config.Config's mapstructure tags: nested structs give
// dotted keys, a map of structs "<name>", squashed embeddings their fields.
func configKeys(prefix string, typ reflect.Type, keys map[string]bool) {
	for i := 0; i < typ.NumField(); i++ {
		f := typ.Field(i)
		tag := f.Tag.Get("mapstructure")
		name, opts, _ := strings.Cut(tag, ",")
		if opts == "squash" {
			configKeys(prefix, f.Type, keys)
			continue
		}
		if name == "" || name == "-" {
			continue
		}
		key := prefix + name
		switch {
		case f.Type.Kind() == reflect.Struct:
			configKeys(key+".", f.Type, keys)
		case f.Type.Kind() == reflect.Map && f.Type.Elem().Kind() == reflect.Struct:
			configKeys(key+".<name>.", f.Type.Elem(), keys)
		default:
			keys[key] = true
		}
	}
}

var keyCellRE = regexp.MustCompile("`([^`]+)`")

// The configuration reference documents every key of package config and
// no other.
func TestConfigurationKeys(t *testing.T) {
	want := map[string]bool{}
	configKeys("", reflect.TypeOf(config.Config{}), want)

	data, err := os.ReadFile("configuration.md")
	if err != nil {
		t.Fatal(err)
	}
	documented := map[string]bool{}
	for _, line := range strings.Split(string(data), "\n") {
		if !strings.HasPrefix(line, "| `") {
			continue
		}
		cell := strings.SplitN(line, "|", 3)[1]
		last := ""
		for _, m := range keyCellRE.FindAllStringSubmatch(cell, -1) {
			k := m[1]
			if strings.HasPrefix(k, ".") && last != "" { // `a.b.c`, `.d` is a.b.d
				k = last[:strings.LastIndex(last, ".")] + k
			}
			documented[k] = true
			last = k
		}
	}
	for k := range want {
		if !documented[k] {
			t.Errorf("configuration.md: key %s (package config) is not documented", k)
		}
	}
	for k := range documented {
		if !want[k] {
			t.Errorf("configuration.md: key %s is not one of package config's", k)
		}
	}
	if len(want) < 40 {
		t.Errorf("only %d config keys found: is the walk still right?", len(want))
	}
}
