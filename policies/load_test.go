package policies

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

const goodPolicy = `# a small policy
version: 1
default: allow
unparseable: deny
askTimeout: 2m
tools:
  pwsh: true
  background: false
sandbox:
  images: [img:a, img:b]
  defaultImage: img:b
  runtime: runsc
  cpus: 0.5
  memory: 2GiB
  pids: 1024
  disk: 256MiB
  tmp: 64MiB
  network:
    allow: ["mirror.internal:443"]
  mounts:
    - {source: /srv/cache, target: /cache}
  user: {uid: 2000, gid: 2000}
  pool: {size: 3}
limits:
  defaultTimeout: 30s
  maxTimeout: 5m
  tailBytes: 20000
  spillLimit: 64MiB
  spillBytes: 128MiB
  backgroundTasks: 2
  sessions: 3
  idleTTL: 10m
  suspendedTTL: 72h
  snapshotEvery: 15m
rules:
  - name: no-rm
    decision: deny
    reason: deleting files is not allowed
    match:
      command: [rm]
escalations:
  default: deny
  rules:
    - name: net
      permissions: [network]
      decision: ask
`

func writePolicy(t *testing.T, dir, tenant, src string) string {
	t.Helper()
	f := filepath.Join(dir, tenant+".yaml")
	if err := os.WriteFile(f, []byte(src), 0o644); err != nil {
		t.Fatal(err)
	}
	return f
}

func TestLoadFileGood(t *testing.T) {
	f := writePolicy(t, t.TempDir(), "acme", goodPolicy)
	p, err := LoadFile(f)
	if err != nil {
		t.Fatal(err)
	}
	checks := []struct {
		name      string
		got, want any
	}{
		{"tenant", p.Tenant, "acme"},
		{"default", p.Default, Allow},
		{"unparseable", p.Unparseable, Deny},
		{"askTimeout", p.AskTimeout, 2 * time.Minute},
		{"tools", p.Tools, Tools{Bash: true, Pwsh: true, Background: false}},
		{"defaultImage", p.DefaultImage, "img:b"},
		{"runtime", p.Runtime, "runsc"},
		{"cpus", p.CPUs, 0.5},
		{"memory", p.MemoryBytes, int64(2 << 30)},
		{"pids", p.PidsLimit, int64(1024)},
		{"disk", p.DiskBytes, int64(256 << 20)},
		{"tmp", p.TmpBytes, int64(64 << 20)},
		{"network", strings.Join(p.Network.Allow, ","), "mirror.internal:443"},
		{"mount", p.Mounts[0], Mount{Source: "/srv/cache", Target: "/cache", ReadOnly: true}},
		{"user", p.User, User{UID: 2000, GID: 2000}},
		{"pool", p.PoolSize, 3},
		{"defaultTimeout", p.Limits.DefaultTimeout, 30 * time.Second},
		{"maxTimeout", p.Limits.MaxTimeout, 5 * time.Minute},
		{"grace (default)", p.Limits.Grace, 2 * time.Second},
		{"tailBytes", p.Limits.TailBytes, 20000},
		{"spillLimit", p.Limits.SpillLimit, int64(64 << 20)},
		{"spillBytes", p.SpillBytes, int64(128 << 20)},
		{"backgroundTasks", p.MaxBackgroundTasks, 2},
		{"sessions", p.MaxSessions, 3},
		{"idleTTL", p.IdleTTL, 10 * time.Minute},
		{"suspendedTTL", p.SuspendedTTL, 72 * time.Hour},
		{"snapshotEvery", p.SnapshotEvery, 15 * time.Minute},
		{"rules", strings.Join(p.Rules(), ","), "no-rm"},
	}
	for _, c := range checks {
		if c.got != c.want {
			t.Errorf("%s = %v, want %v", c.name, c.got, c.want)
		}
	}
}

func TestLoadFileEmptyIsStrictDefault(t *testing.T) {
	p, err := Parse("x/t1.yaml", nil)
	if err != nil {
		t.Fatal(err)
	}
	if p.Default != Ask || p.Unparseable != Ask || p.Opaque != Ask || !p.Tools.Bash || p.Tools.Pwsh || !p.Tools.Background {
		t.Errorf("empty policy = %+v", p)
	}
}

// opaque unset is unparseable's decision; set, it is its own, allow
// included (which unparseable may never be).
func TestLoadOpaque(t *testing.T) {
	for src, want := range map[string]Decision{
		"unparseable: deny\n":                Deny,
		"unparseable: deny\nopaque: allow\n": Allow,
		"unparseable: ask\nopaque: deny\n":   Deny,
		"opaque: ask\n":                      Ask,
		"opaque:\n":                          Ask,
	} {
		p, err := Parse("x/t1.yaml", []byte(src))
		if err != nil {
			t.Fatalf("%q: %v", src, err)
		}
		if p.Opaque != want {
			t.Errorf("%q: opaque %s, want %s", src, p.Opaque, want)
		}
	}
}

// Every error names the file, the line and the key.
func TestLoadFileErrors(t *testing.T) {
	cases := []struct {
		name, src string
		want      []string
	}{
		{"unknown top key", "version: 1\ndefualt: allow\n", []string{"acme.yaml:2: defualt: unknown key (known: askTimeout, default,"}},
		{"unknown nested key", "rules:\n  - name: a\n    decision: deny\n    match:\n      comand: [rm]\n", []string{"acme.yaml:5: rules[0].match.comand: unknown key"}},
		{"wrong type", "default: allow\ntools:\n  bash: yes please\n", []string{"acme.yaml:3: tools.bash: expected true or false, got string yes please"}},
		{"int for string", "rules:\n  - name: a\n    decision: deny\n    match:\n      command: [7]\n", []string{"acme.yaml:5: rules[0].match.command[0]: expected a string, got integer 7"}},
		{"bad regex", "rules:\n  - name: a\n    decision: deny\n    match:\n      argsRegex: ['(']\n", []string{"acme.yaml:5: rules[0].match.argsRegex[0]: bad regular expression"}},
		{"bad glob", "rules:\n  - name: a\n    decision: deny\n    match:\n      args: ['[abc']\n", []string{"acme.yaml:5: rules[0].match.args[0]: bad glob"}},
		{"bad decision", "default: maybe\n", []string{`acme.yaml:1: default: "maybe" is not a decision`}},
		{"unparseable allow", "unparseable: allow\n", []string{"acme.yaml:1: unparseable: allow is not permitted"}},
		{"bad opaque", "default: allow\nopaque: maybe\n", []string{`acme.yaml:2: opaque: "maybe" is not a decision (allow, ask or deny)`}},
		{"opaque not a string", "opaque: 1\n", []string{"acme.yaml:1: opaque: expected a string, got integer 1"}},
		{"opaque list", "opaque: [allow]\n", []string{"acme.yaml:1: opaque: expected a string, got a list"}},
		{"timeouts conflict", "limits:\n  defaultTimeout: 10m\n  maxTimeout: 1m\n", []string{"acme.yaml:3: limits.maxTimeout: maxTimeout (1m0s) is below defaultTimeout (10m0s)"}},
		{"image conflict", "sandbox:\n  images: [a]\n  defaultImage: b\n", []string{`acme.yaml:3: sandbox.defaultImage: "b" is not in sandbox.images`}},
		{"memory conflict", "sandbox:\n  memory: 100MiB\n  disk: 100MiB\n", []string{"acme.yaml:2: sandbox.memory: 104857600 bytes must exceed"}},
		// Fits docker's tmpfs, not kube's pod, whose spill volume is memory
		// too: every pod of it was refused, the file loaded.
		{"memory conflict on kube", "sandbox:\n  memory: 700MiB\n  disk: 512MiB\n  tmp: 128MiB\nlimits:\n  spillBytes: 64MiB\n",
			[]string{"acme.yaml:2: sandbox.memory: 734003200 bytes must exceed sandbox.disk + sandbox.tmp + limits.spillBytes (536870912 + 134217728 + 67108864 = 738197504 bytes): on kube"}},
		{"root user", "sandbox:\n  user: {uid: 0, gid: 5}\n", []string{"acme.yaml:2: sandbox.user: 0:5: commands never run as root"}},
		{"negative pool", "sandbox:\n  pool: {size: -1}\n", []string{"acme.yaml:2: sandbox.pool.size: must be between 0 and 256, got -1"}},
		{"huge pool", "sandbox:\n  pool:\n    size: 1000\n", []string{"acme.yaml:3: sandbox.pool.size: must be between 0 and 256, got 1000"}},
		{"bad size", "sandbox:\n  memory: lots\n", []string{`acme.yaml:2: sandbox.memory: "lots" is not a size`}},
		{"bad duration", "askTimeout: 5\n", []string{"acme.yaml:1: askTimeout: expected a duration such as 30s or 5m, got integer 5"}},
		{"duplicate rule", "rules:\n  - {name: a, decision: deny, match: {command: [rm]}}\n  - {name: a, decision: deny, match: {command: [rm]}}\n", []string{`acme.yaml:3: rules[1].name: rule "a" is already defined at rules[0]`}},
		{"reserved name", "rules:\n  - {name: default, decision: deny, match: {command: [rm]}}\n", []string{`acme.yaml:2: rules[0].name: "default" is reserved`}},
		{"empty match", "rules:\n  - {name: a, decision: deny}\n", []string{"acme.yaml:2: rules[0].match: a rule must match something"}},
		{"path as command", "rules:\n  - {name: a, decision: deny, match: {command: [/bin/rm]}}\n", []string{`acme.yaml:2: rules[0].match.command[0]: "/bin/rm": give a command name`}},
		{"pwsh example", "rules:\n  - name: a\n    decision: deny\n    match: {tool: [pwsh], command: [Remove-Item]}\n    examples: {match: [Get-Date, 'rm x', '\"open']}\n",
			[]string{`acme.yaml:5: rules[0].examples.match[0]: rule a does not match "Get-Date"`, `acme.yaml:5: rules[0].examples.match[1]: rule a does not match "rm x"`,
				`acme.yaml:5: rules[0].examples.match[2]: "\"open" cannot be parsed: pwsh: 1:6: missing the closing " of a string`}},
		{"duplicate key", "default: allow\ndefault: deny\n", []string{"acme.yaml:2: default: key given twice"}},
		{"yaml syntax", "rules: [\n", []string{"acme.yaml:1: invalid YAML: did not find expected node content"}},
		{"bad network", "sandbox:\n  network:\n    allow: [mirror]\n", []string{`acme.yaml:3: sandbox.network.allow[0]: "mirror" is not host:port`}},
		{"bad network port", "sandbox:\n  network:\n    allow: ['ok.example:443', 'mirror:0']\n", []string{`acme.yaml:3: sandbox.network.allow[1]: "mirror:0": port must be 1-65535 or *`}},
		{"bad network wildcard", "sandbox:\n  network:\n    allow: ['mir*ror:443']\n", []string{`acme.yaml:3: sandbox.network.allow[0]: "mir*ror:443": "mir*ror" is not a host name`}},
		{"several problems", "default: maybe\nunparseable: nope\n", []string{"acme.yaml:1: default:", "acme.yaml:2: unparseable:"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			_, err := Parse("/etc/p/acme.yaml", []byte(c.src))
			var le *LoadError
			if !errors.As(err, &le) {
				t.Fatalf("err = %v, want a *LoadError", err)
			}
			for _, w := range c.want {
				if !strings.Contains(err.Error(), "/etc/p/"+w) {
					t.Errorf("error\n%v\nlacks\n%s", err, w)
				}
			}
		})
	}
}

func TestLoadFileBadTenantName(t *testing.T) {
	_, err := Parse("/p/-bad.yaml", []byte("default: allow\n"))
	if err == nil || !strings.Contains(err.Error(), "the file name must be <tenant>.yaml") {
		t.Fatalf("err = %v", err)
	}
}

func TestGlobRegexp(t *testing.T) {
	cases := []struct {
		glob, s string
		want    bool
	}{
		{"*.pem", "a/b.pem", true},
		{"-rf", "-rf", true},
		{"-r?", "-rf", true},
		{"-[rf]*", "-fr", true},
		{"-[!rf]", "-r", false},
		{`\*`, "*", true},
		{`\*`, "a", false},
		{"/etc/*", "/etc/passwd", true},
		{"/etc/*", "/etcx", false},
		{"a.b", "axb", false},
	}
	for _, c := range cases {
		re, err := globRegexp(c.glob)
		if err != nil {
			t.Fatalf("%s: %v", c.glob, err)
		}
		if got := re.MatchString(c.s); got != c.want {
			t.Errorf("glob %q on %q = %v, want %v", c.glob, c.s, got, c.want)
		}
	}
}

func TestPolicySettingsHelpers(t *testing.T) {
	p, err := Parse("/p/acme.yaml", []byte(goodPolicy))
	if err != nil {
		t.Fatal(err)
	}
	if img, err := p.Image("", "fallback"); err != nil || img != "img:b" {
		t.Errorf("Image = %q, %v", img, err)
	}
	if _, err := p.Image("evil:latest", ""); err == nil || err.Error() != `image "evil:latest" is not allowed by policy acme (sandbox.images: img:a, img:b)` {
		t.Errorf("err = %v", err)
	}
	if err := p.CheckSessions(3); err == nil || err.Error() != "session limit reached: limits.sessions = 3 (policy acme)" {
		t.Errorf("err = %v", err)
	}
	if err := p.CheckBackgroundTasks(1); err != nil {
		t.Error(err)
	}
	if err := p.CheckBackgroundTasks(2); err == nil || !strings.Contains(err.Error(), "limits.backgroundTasks = 2") {
		t.Errorf("err = %v", err)
	}
	if sb := p.Sandbox(); sb != (SandboxSettings{Egress: true, Runtime: "runsc", CPUs: 0.5, MemoryBytes: 2 << 30, PidsLimit: 1024,
		DiskBytes: 256 << 20, TmpBytes: 64 << 20, SpillBytes: 128 << 20, User: User{UID: 2000, GID: 2000}}) {
		t.Errorf("Sandbox() = %+v", sb)
	}
	if err := p.CheckEgress("MIRROR.internal:443"); err != nil {
		t.Errorf("CheckEgress of the allowlisted host: %v", err)
	}
	if err := p.CheckEgress("evil.example:443"); err == nil ||
		err.Error() != `shellbox: egress to evil.example:443 is not allowed by policy acme (sandbox.network.allow: mirror.internal:443); a call may ask for more with sandbox_permissions: ["network"] and a justification` {
		t.Errorf("CheckEgress of another host: %v", err)
	}
	// No allowlist, but a call may ask for the network (escalations.default
	// is ask): the sandbox runs the proxy, which refuses all but such calls.
	asks, err := Parse("/p/beta.yaml", nil)
	if err != nil {
		t.Fatal(err)
	}
	if !asks.Sandbox().Egress {
		t.Error("no allowlist, network may be asked for: no egress proxy")
	}
	if err := asks.CheckEgress("mirror.internal:443"); err == nil ||
		err.Error() != `shellbox: egress to mirror.internal:443 is not allowed: policy beta allows no network (sandbox.network.allow is empty); a call may ask for more with sandbox_permissions: ["network"] and a justification` {
		t.Errorf("CheckEgress without an allowlist: %v", err)
	}
	// Nor may a call: no proxy at all.
	none, err := Parse("/p/gamma.yaml", []byte("escalations:\n  default: deny\n"))
	if err != nil {
		t.Fatal(err)
	}
	if none.Sandbox().Egress {
		t.Error("no network at all: an egress proxy")
	}
	if err := none.CheckEgress("mirror.internal:443"); err == nil ||
		err.Error() != "shellbox: egress to mirror.internal:443 is not allowed: policy gamma allows no network (sandbox.network.allow is empty)" {
		t.Errorf("CheckEgress without any network: %v", err)
	}
}

// A policy proves its intent at load: an example or test that fails makes
// the file fail, located.
func TestExamplesSelfTest(t *testing.T) {
	cases := []struct {
		name, src, want string
	}{
		{"match fails", `rules:
  - name: no-rm
    decision: deny
    match: {command: [rm]}
    examples:
      match: ["rm x", "shred x"]
`, `acme.yaml:6: rules[0].examples.match[1]: rule no-rm does not match "shred x"`},
		{"not_match fails", `rules:
  - name: no-rm
    decision: deny
    match: {command: [rm]}
    examples:
      not_match: ["ls", "sudo rm x"]
`, `acme.yaml:6: rules[0].examples.not_match[1]: rule no-rm matches "sudo rm x", which it should not`},
		{"unparseable example", `rules:
  - name: no-rm
    decision: deny
    match: {command: [rm]}
    examples: {match: ["rm 'x"]}
`, `acme.yaml:5: rules[0].examples.match[0]: "rm 'x" cannot be parsed`},
		{"test fails", `default: allow
rules:
  - {name: no-rm, decision: deny, match: {command: [rm]}}
tests:
  - {command: "ls", decision: allow}
  - {command: "env rm x", decision: allow}
`, `acme.yaml:6: tests[1]: "env rm x" is deny (rule no-rm: matched rule no-rm), want allow`},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			_, err := Parse("/p/acme.yaml", []byte(c.src))
			if err == nil || !strings.Contains(err.Error(), "/p/"+c.want) {
				t.Errorf("err = %v\nwant %s", err, c.want)
			}
		})
	}
}
