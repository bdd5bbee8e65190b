// Package layering holds the import table of the whole module and the test
// that checks every package against it. It has no code of its own.
//
// The table (layers, below) is the house plan: a package sits on one layer
// and may import only packages on lower layers, plus the packages its layer
// names as allowed beside it. Every package sits on one side of the sandbox
// wall: agent (runs inside the sandbox), wall (the protocol both sides
// speak; it imports neither side), host (the server side) or shared (leaves
// both sides use). A side may import only itself and the sides listed in
// sides. Test rigs (packages only tests import) may import anything below
// them; no non-test package may import a rig. README.md's "Layers" diagram is
// rendered from the table: `go test ./internal/layering -update` rewrites it.
package layering

import (
	"flag"
	"fmt"
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"testing"
)

const module = "github.com/shellbox/shellbox"

var update = flag.Bool("update", false, "rewrite README.md's layer diagram from the table")

// A layer is one row of the table, top (index 0) to bottom.
type layer struct {
	// name and doc are the diagram's words for the row.
	name, doc string
	// side is where its code runs: agent, wall, host or shared.
	side string
	// pkgs are its packages, relative to the module; a trailing "/..."
	// takes the folder and everything below it.
	pkgs []string
	// beside are packages of the same layer its packages may import
	// (each "a b": a may import b).
	beside []string
	// forbid are packages (patterns) that neither its packages nor
	// anything they import, directly or not, may import, though they are
	// below.
	forbid []string
	// rig marks packages that only tests import.
	rig bool
}

// sides says which sides each side may import besides itself.
var sides = map[string][]string{
	"agent":  {"wall", "shared"},
	"wall":   {"shared"},
	"host":   {"wall", "shared"},
	"shared": {},
}

// layers is the table. Keep README.md in step: go test -update.
var layers = []layer{
	{name: "tests", doc: "test rigs and suites: only tests import them; they may import anything", side: "host", rig: true,
		pkgs: []string{"executor/executortest", "executor/local/localtest", "executor/sandboxed/sandboxedtest", "executor/sandboxed/conformance/...",
			"executor/sandboxed/hostile", "executor/sandboxed/kubeconformance", "sandbox/sandboxtest", "sandbox/enginetest",
			"sandbox/docker/dockertest", "sandbox/containerd/containerdtest", "sandbox/snapshot/snapshottest", "kube/kubetest", "server/servertest",
			"secrets/origintest",
			"deploy/...", "docs", "internal/layering", "test/..."}},
	{name: "cmd", doc: "the CLI and server binary: wiring only; config/ owns every setting", side: "host",
		pkgs: []string{"cmd/shellbox", "config"}, beside: []string{"cmd/shellbox config"}},
	{name: "client", doc: "the REST/MCP client of a shellbox server", side: "host", pkgs: []string{"server/client"},
		forbid: []string{"agentapi/..."}},
	{name: "session", doc: "per-tenant executors, the spec builder, the one owner of a session's connection; implements server.Backend", side: "host",
		pkgs: []string{"session", "session/sandboxconn"}, beside: []string{"session session/sandboxconn"}},
	{name: "server", doc: "auth → tenant, MCP + REST + events + metrics, the console; calls the session layer through server.Backend", side: "host",
		pkgs: []string{"server"}, forbid: []string{"agentapi/..."}},
	{name: "cluster", doc: "a release's replicas on Kubernetes: approvals and events as cluster objects", side: "host",
		pkgs: []string{"kube/approvals", "kube/events"}},
	{name: "events", doc: "what flows on a tenant's event stream", side: "host", pkgs: []string{"eventstream"}},
	{name: "policies", doc: "the permissions seam (tools.Gate): allow / ask / deny, limits, audit; never imports sandbox/", side: "host",
		pkgs:   []string{"policies", "policies/pwsh", "policies/glob"},
		beside: []string{"policies policies/pwsh", "policies policies/glob", "policies/pwsh policies/glob"}},
	{name: "tools", doc: "model-facing tools: schema, validation, result text (pure)", side: "host", pkgs: []string{"tools"},
		forbid: []string{"executor/sandboxed", "executor/local", "sandbox/...", "kube/...", "agentapi/...", "images"}},
	{name: "executors", doc: "the BashExecutor over a session's sandbox, handed its connection", side: "host",
		pkgs: []string{"executor/sandboxed"}, forbid: []string{"sandbox/...", "kube/..."}},
	{name: "runtimes", doc: "Docker, containerd and Kubernetes sandboxes; host dirs and tenants' cgroups; the egress relay", side: "host",
		pkgs: []string{"sandbox/docker", "sandbox/containerd", "sandbox/hostdir", "sandbox/hostcgroup", "sandbox/egress", "kube"},
		beside: []string{"sandbox/docker sandbox/hostdir", "sandbox/containerd sandbox/hostdir",
			"sandbox/docker sandbox/hostcgroup", "sandbox/containerd sandbox/hostcgroup"}},
	{name: "snapshots", doc: "suspended sessions' snapshots: the SnapshotStore seam, a host directory or an S3-compatible store", side: "host",
		pkgs: []string{"sandbox/snapshot"}},
	{name: "sandbox", doc: "one sandbox per session: Spec, the Runtime seam, the Manager", side: "host", pkgs: []string{"sandbox"}},
	{name: "images", doc: "sandbox images built without a registry", side: "host", pkgs: []string{"images"}},
	{name: "secrets", doc: "credentials resolved in the server only: secret stores, placeholders, header injection, the egress CA", side: "host",
		pkgs: []string{"secrets"}},
	{name: "usage", doc: "what sessions used, from their cgroups: sampler, meter, daily limits, the usage store", side: "host",
		pkgs: []string{"usage"}},
	{name: "agent", doc: "PID 1 in every sandbox: flags and wiring", side: "agent", pkgs: []string{"cmd/shellbox-agent"}},
	{name: "inside", doc: "everything that runs inside the sandbox: supervisor, PID 1's hooks into the runner (tags, OOM, reaping), protocol server, egress proxy, exec guard, landlock, seccomp", side: "agent",
		pkgs: []string{"agent/..."}, beside: []string{"agent agent/...", "agent/execguard agent/notrace"}},
	{name: "wall", doc: "the agent protocol, its client and endpoint, the workspace's snapshot stream; imports neither side", side: "wall",
		pkgs: []string{"agentapi/..."}, beside: []string{"agentapi agentapi/egresswire", "agentapi/workspace agentapi"}},
	{name: "runner", doc: "the command runner: host processes (backend local) and the agent's commands; PID 1 plugs in through local.PID1", side: "shared",
		pkgs: []string{"executor/local"}},
	{name: "seam", doc: "the BashExecutor seam, bounded output and spill, file transfer", side: "shared",
		pkgs:   []string{"executor", "executor/output", "executor/files"},
		beside: []string{"executor/output executor", "executor/files executor"}},
	{name: "leaves", doc: "standard library only: shared rules, error classes, the approval, /proc/self/mountinfo, terminal-safe text, media-type lists", side: "shared",
		pkgs: []string{"confine", "errdefs", "approval", "internal/..."}},
}

// graph maps each package (relative to the module) to the project packages
// its non-test files import, and test to those its test files import.
type graph struct {
	imports map[string][]string
	tests   map[string][]string
}

// load parses the import clauses of every Go file of the module below root.
func load(root string) (graph, error) {
	g := graph{imports: map[string][]string{}, tests: map[string][]string{}}
	fset := token.NewFileSet()
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		name := d.Name()
		if d.IsDir() {
			if p != root && (strings.HasPrefix(name, ".") || strings.HasPrefix(name, "_") || name == "testdata" || name == "vendor") {
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(name, ".go") {
			return nil
		}
		f, err := parser.ParseFile(fset, p, nil, parser.ImportsOnly)
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(root, filepath.Dir(p))
		if err != nil {
			return err
		}
		pkg := filepath.ToSlash(rel)
		into := g.imports
		if strings.HasSuffix(name, "_test.go") {
			into = g.tests
		}
		if _, ok := into[pkg]; !ok {
			into[pkg] = nil
		}
		for _, imp := range f.Imports {
			ip, err := strconv.Unquote(imp.Path.Value)
			if err != nil {
				return fmt.Errorf("%s: %w", p, err)
			}
			if ip != module && !strings.HasPrefix(ip, module+"/") {
				continue
			}
			dep := strings.TrimPrefix(strings.TrimPrefix(ip, module), "/")
			if !slices.Contains(into[pkg], dep) {
				into[pkg] = append(into[pkg], dep)
			}
		}
		return nil
	})
	return g, err
}

// match reports whether pattern (a package or "folder/...") takes pkg.
func match(pattern, pkg string) bool {
	if dir, ok := strings.CutSuffix(pattern, "/..."); ok {
		return pkg == dir || strings.HasPrefix(pkg, dir+"/")
	}
	return pattern == pkg
}

// place returns the index of pkg's layer, or -1. The most specific pattern
// wins, so "sandbox/..." can hold what "sandbox/sandboxtest" does not.
func place(table []layer, pkg string) int {
	best, bestLen := -1, -1
	for i, l := range table {
		for _, p := range l.pkgs {
			if match(p, pkg) && len(p) > bestLen {
				best, bestLen = i, len(p)
			}
		}
	}
	return best
}

// check returns every rule the graph breaks, sorted.
func check(table []layer, g graph) []string {
	var bad []string
	for pkg, deps := range g.imports {
		i := place(table, pkg)
		if i < 0 {
			bad = append(bad, fmt.Sprintf("%s: in no layer of the table", pkg))
			continue
		}
		for _, dep := range deps {
			if msg := allowed(table, i, pkg, dep); msg != "" {
				bad = append(bad, fmt.Sprintf("%s imports %s: %s", pkg, dep, msg))
			}
		}
	}
	for pkg := range g.imports {
		i := place(table, pkg)
		if i < 0 {
			continue
		}
		for _, dep := range closure(g, pkg) {
			for _, f := range table[i].forbid {
				if match(f, dep) {
					bad = append(bad, fmt.Sprintf("%s depends on %s: layer %q forbids %s", pkg, dep, table[i].name, f))
				}
			}
		}
	}
	for pkg, deps := range g.tests {
		if _, ok := g.imports[pkg]; !ok && place(table, pkg) < 0 {
			bad = append(bad, fmt.Sprintf("%s (tests only): in no layer of the table", pkg))
		}
		for _, dep := range deps {
			if place(table, dep) < 0 {
				bad = append(bad, fmt.Sprintf("%s's tests import %s: in no layer of the table", pkg, dep))
			}
		}
	}
	sort.Strings(bad)
	return bad
}

// closure returns every package pkg's non-test files import, directly or
// not, sorted.
func closure(g graph, pkg string) []string {
	seen := map[string]bool{}
	var walk func(string)
	walk = func(p string) {
		for _, d := range g.imports[p] {
			if !seen[d] {
				seen[d] = true
				walk(d)
			}
		}
	}
	walk(pkg)
	out := make([]string, 0, len(seen))
	for d := range seen {
		out = append(out, d)
	}
	sort.Strings(out)
	return out
}

// allowed says why pkg (on layer i) may not import dep, or "".
func allowed(table []layer, i int, pkg, dep string) string {
	j := place(table, dep)
	switch {
	case j < 0:
		return "the imported package is in no layer of the table"
	case table[i].rig:
		return ""
	case table[j].rig:
		return fmt.Sprintf("%s is a test rig: only tests and other rigs may import it", dep)
	}
	from, to := table[i].side, table[j].side
	if from != to && !slices.Contains(sides[from], to) {
		return fmt.Sprintf("the %s side may not import the %s side", from, to)
	}
	if j == i {
		for _, b := range table[i].beside {
			a, c, _ := strings.Cut(b, " ")
			if match(a, pkg) && match(c, dep) {
				return ""
			}
		}
		return fmt.Sprintf("both are on layer %q and the table does not allow it beside", table[i].name)
	}
	if j < i {
		return fmt.Sprintf("an upward import: layer %q is above %q", table[j].name, table[i].name)
	}
	return ""
}

// sideDoc heads each side's rows in the diagram.
var sideDoc = map[string]string{
	"host":   "host: the server side",
	"agent":  "agent: runs inside the sandbox",
	"wall":   "the wall: both sides speak it",
	"shared": "shared: either side",
}

// diagram renders the table as README.md's layer diagram: a row a layer,
// top to bottom, the rigs first, a rule where the side changes.
func diagram(table []layer) string {
	var b strings.Builder
	b.WriteString("```\n")
	side := ""
	for _, l := range table {
		if !l.rig && l.side != side {
			side = l.side
			head := "── " + sideDoc[side] + " "
			b.WriteString(head + strings.Repeat("─", max(0, 78-len([]rune(head)))) + "\n")
		}
		name := l.name
		lines := append(wrap(l.pkgs), wrap(strings.Fields(l.doc))...)
		if len(l.forbid) > 0 {
			lines = append(lines, wrap(append([]string{"never, even through others:"}, l.forbid...))...)
		}
		for _, line := range lines {
			fmt.Fprintf(&b, " %-10s %s\n", name, line)
			name = ""
		}
	}
	b.WriteString("```\n")
	return b.String()
}

// wrap joins words into lines of at most 66 characters.
func wrap(words []string) []string {
	var lines []string
	line := ""
	for _, w := range words {
		switch {
		case line == "":
			line = w
		case len([]rune(line))+1+len([]rune(w)) > 66:
			lines = append(lines, line)
			line = w
		default:
			line += " " + w
		}
	}
	if line != "" {
		lines = append(lines, line)
	}
	return lines
}

const (
	beginMark = "<!-- layers: rendered by go test ./internal/layering -update -->\n"
	endMark   = "<!-- layers: end -->\n"
)

// TestImportTable checks every package of the module against the table.
func TestImportTable(t *testing.T) {
	g, err := load("../..")
	if err != nil {
		t.Fatal(err)
	}
	if len(g.imports) < 20 {
		t.Fatalf("found %d packages: is the module root ../..?", len(g.imports))
	}
	for _, msg := range check(layers, g) {
		t.Error(msg)
	}
}

// TestCheckFindsViolations runs the checker on made-up graphs: an upward
// import, a side crossing the wall, a rig imported by code and an unplaced
// package are each reported; the same graph without them is clean.
func TestCheckFindsViolations(t *testing.T) {
	table := []layer{
		{name: "top", side: "host", pkgs: []string{"cmd/..."}},
		{name: "pure", side: "host", pkgs: []string{"tools"}, forbid: []string{"agentapi"}},
		{name: "mid", side: "host", pkgs: []string{"server", "session"}, beside: []string{"session server"}},
		{name: "in", side: "agent", pkgs: []string{"agent/..."}, beside: []string{"agent agent/...", "agent/execguard agent/notrace"}},
		{name: "wall", side: "wall", pkgs: []string{"agentapi"}},
		{name: "leaf", side: "shared", pkgs: []string{"errdefs"}},
		{name: "rigs", side: "shared", pkgs: []string{"server/servertest"}, rig: true},
	}
	clean := graph{imports: map[string][]string{
		"cmd/x":             {"server", "session", "agentapi"},
		"session":           {"server", "errdefs"},
		"server":            {"agentapi", "errdefs"},
		"agent":             {"agent/egress", "agentapi"},
		"agent/egress":      {"errdefs"},
		"agentapi":          {"errdefs"},
		"errdefs":           nil,
		"tools":             {"errdefs"},
		"server/servertest": {"server"},
	}, tests: map[string][]string{"server": {"server/servertest"}}}
	if bad := check(table, clean); len(bad) != 0 {
		t.Fatalf("a clean graph: %q", bad)
	}
	cases := []struct {
		from, to, want string
	}{
		{"errdefs", "server", "the shared side may not import the host side"},
		{"session", "cmd/x", "an upward import"},
		{"server", "session", "does not allow it beside"},
		{"agent", "session", "the agent side may not import the host side"},
		{"agentapi", "agent", "the wall side may not import the agent side"},
		{"server", "agent/egress", "the host side may not import the agent side"},
		{"session", "server/servertest", "a test rig"},
		{"server", "nowhere", "in no layer"},
	}
	for _, c := range cases {
		g := graph{imports: map[string][]string{}, tests: map[string][]string{}}
		for k, v := range clean.imports {
			g.imports[k] = slices.Clone(v)
		}
		g.imports[c.from] = append(g.imports[c.from], c.to)
		var bad []string
		for _, m := range check(table, g) {
			if strings.Contains(m, " imports ") {
				bad = append(bad, m)
			}
		}
		if len(bad) != 1 || !strings.Contains(bad[0], c.from+" imports "+c.to) || !strings.Contains(bad[0], c.want) {
			t.Errorf("%s -> %s: got %q, want one violation saying %q", c.from, c.to, bad, c.want)
		}
	}
	// A forbidden package reached through others: tools may import
	// session (below it), but not what session reaches, agentapi.
	fg := graph{imports: map[string][]string{}, tests: map[string][]string{}}
	for k, v := range clean.imports {
		fg.imports[k] = slices.Clone(v)
	}
	fg.imports["tools"] = append(fg.imports["tools"], "session")
	if bad := check(table, fg); len(bad) != 1 || !strings.Contains(bad[0], "tools depends on agentapi: layer \"pure\" forbids agentapi") {
		t.Errorf("a forbidden package reached through others: got %q", bad)
	}
	g := graph{imports: map[string][]string{"stray": nil}}
	if bad := check(table, g); len(bad) != 1 || !strings.Contains(bad[0], "stray: in no layer") {
		t.Errorf("an unplaced package: got %q", bad)
	}
}

// TestReadmeDiagram checks that README.md's diagram is the table's.
func TestReadmeDiagram(t *testing.T) {
	const readme = "../../README.md"
	b, err := os.ReadFile(readme)
	if err != nil {
		t.Fatal(err)
	}
	s := string(b)
	i, j := strings.Index(s, beginMark), strings.Index(s, endMark)
	if i < 0 || j < i {
		t.Fatalf("README.md has no %q ... %q block", strings.TrimSpace(beginMark), strings.TrimSpace(endMark))
	}
	want := diagram(layers)
	got := s[i+len(beginMark) : j]
	if got == want {
		return
	}
	if *update {
		s = s[:i+len(beginMark)] + want + s[j:]
		if err := os.WriteFile(readme, []byte(s), 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	t.Errorf("README.md's layer diagram is not the table's; run go test ./internal/layering -update\ngot:\n%s\nwant:\n%s", got, want)
}
