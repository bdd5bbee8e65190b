package policies

import (
	"errors"
	"reflect"
	"strings"
	"testing"
)

// pwshPolicy is the policy of the pwsh decision table: default allow,
// unparseable ask, rules naming cmdlets and native commands.
const pwshPolicy = `default: allow
unparseable: ask
tools: {pwsh: true}
rules:
  - name: no-delete
    decision: deny
    reason: deleting files is not allowed
    match: {command: [rm, rmdir, Remove-Item, Clear-Content]}
  - name: no-env-files
    decision: deny
    match: {command: [Get-Content], args: ["*.env"]}
  - name: no-secrets
    decision: deny
    match: {argsRegex: ['(^|/)\.ssh/']}
  - name: no-system-writes
    decision: deny
    match: {redirect: ["/etc/*"]}
  - name: no-stop
    decision: deny
    match: {command: ["Stop-*"]}
  - name: web
    decision: ask
    match: {command: [Invoke-WebRequest, Invoke-RestMethod, curl, wget]}
  - name: push
    decision: ask
    match: {prefix: ["git push"]}
  - name: no-psdrive
    decision: deny
    match: {tool: [pwsh], command: [New-PSDrive]}
    examples:
      match: ["ndr w -PSProvider FileSystem -Root /", "new-psdrive w", "iex 'New-PSDrive w'"]
      not_match: ["Get-PSDrive", "Write-Output New-PSDrive"]
tests:
  - {command: "ri x", tool: pwsh, decision: deny}
  - {command: "Get-Date", tool: pwsh, decision: allow}
  - {command: "iex $x", tool: pwsh, decision: ask}
`

// pwshCases are pwsh commands and their decisions under pwshPolicy. The
// evasions are the point: a rule naming Remove-Item must see every way of
// running it, and a command a static policy cannot read is never allowed.
var pwshCases = []struct {
	cmd  string
	want Decision
	rule string // "" = don't care
}{
	// Plain commands, and text that only looks like one.
	{"Get-ChildItem", Allow, "default"},
	{"Get-ChildItem -Recurse -Filter *.cs | Select-String TODO | Select-Object -First 10", Allow, "default"},
	{"Write-Output 'ri x'", Allow, "default"},
	{`Write-Output "ri x"`, Allow, "default"},
	{"echo rm", Allow, "default"},
	{"# ri x", Allow, "default"},
	{"Get-Date # ; ri x", Allow, "default"},
	{"Get-Date <# ri x #>", Allow, "default"},
	{"Write-Output '<# ri x #>'", Allow, "default"},
	{"Write-Output 'no $(ri x) here'", Allow, "default"},
	{"$x = Get-ChildItem | Where-Object Length -gt 1kb; $x.Count", Allow, "default"},
	{`1..3 | % { "item $_" }`, Allow, "default"},
	{"git status", Allow, "default"},
	{"git push origin main", Ask, "push"},
	{"[System.IO.File]::Delete('/x')", Allow, "default"}, // .NET calls are not commands (README)

	// Remove-Item, however it is named.
	{"Remove-Item x", Deny, "no-delete"},
	{"ri -r -fo /", Deny, "no-delete"},
	{"REMOVE-ITEM x", Deny, "no-delete"},
	{"del x", Deny, "no-delete"},
	{"erase x", Deny, "no-delete"},
	{"rd x", Deny, "no-delete"},
	{"Remove-Item –Recurse x", Deny, "no-delete"}, // an en dash
	{"& 'Remove-Item' x", Deny, "no-delete"},
	{"& ‘Remove-Item’ x", Deny, "no-delete"}, // smart quotes
	{`& "ri" x`, Deny, "no-delete"},
	{"Microsoft.PowerShell.Management\\Remove-Item x", Deny, "no-delete"},
	{"Remove-'Item' x", Deny, "no-delete"},
	{"rı x", Deny, "no-delete"}, // a dotless ı: .NET folds names by upper case
	{"Remove-ıtem x", Deny, "no-delete"},
	{"ıex 'rm -rf /'", Deny, "no-delete"},
	{"$ExecutıonContext.ınvokeCommand", Ask, "dynamic"},
	{"[System.Dıagnostics.Process]::Start('rm')", Ask, "dynamic"},
	{"<# x #>ri x", Deny, "no-delete"},

	// Native rm.
	{"rm -rf /", Deny, "no-delete"},
	{"/bin/rm -rf /", Deny, "no-delete"},
	{"r`m x", Deny, "no-delete"},
	{".'/bin/rm' x", Deny, "no-delete"},
	{"r'm' x", Deny, "no-delete"},
	{"rm --% -rf /", Deny, "no-delete"},
	{"git --% log && ri x", Deny, "no-delete"},
	{`git --% log "a|b" | ri`, Deny, "no-delete"},
	{"env rm x", Deny, "no-delete"},
	{"exec rm -rf /", Deny, "no-delete"},

	// Names rules cannot read.
	{`& ("Remove"+"-Item") x`, Ask, "dynamic"},
	{"& $x", Ask, "dynamic"},
	{". $script", Ask, "dynamic"},
	{"& (Get-Command ri) x", Ask, "dynamic"},
	{"$ExecutionContext.InvokeCommand.InvokeScript('ri x')", Ask, "dynamic"},
	{"r?m x", Ask, "dynamic"},
	{"Invoke-History 1", Ask, "dynamic"},

	// Wrappers.
	{"iex 'rm -rf /'", Deny, "no-delete"},
	{"iex 'Get-Date'", Allow, "default"},
	{"iex $x", Ask, "dynamic"},
	{`Invoke-Expression "Remove-Item x"`, Deny, "no-delete"},
	{"iex -c 'ri x'", Deny, "no-delete"},
	{"Invoke-Expression -Command:'ri x'", Deny, "no-delete"},
	{"iex -Foo 'ri x'", Ask, "dynamic"},
	{`Invoke-Expression "Remove-Item $x"`, Ask, "dynamic"},
	{"'ri x' | iex", Ask, "dynamic"},
	{"iex @'\nri x\n'@", Deny, "no-delete"},
	{`iex "iex 'ri x'"`, Deny, "no-delete"},
	{"gci | % { ri $_ }", Deny, "no-delete"},
	{"gci | ForEach-Object -Parallel { ri $_ }", Deny, "no-delete"},
	{"Invoke-Command -ScriptBlock { ri x }", Deny, "no-delete"},
	{"icm { Get-Date }", Allow, "default"},
	{"Start-Job { ri x }", Deny, "no-delete"},
	{"& { rm x }", Deny, "no-delete"},
	{"$sb = { ri x }", Deny, "no-delete"}, // blocks count whether or not they run
	{"Start-Process rm -ArgumentList '-rf','/'", Deny, "no-delete"},
	{`saps bash -ArgumentList '-c "rm -rf /"'`, Deny, "no-delete"},
	{"Start-Process pwsh -ArgumentList '-c','ri x'", Deny, "no-delete"},
	{"Start-Process $exe", Ask, "dynamic"},
	{`pwsh -c "ri x"`, Deny, "no-delete"},
	{"pwsh -NoProfile -Command Remove-Item x", Deny, "no-delete"},
	{"pwsh -EncodedCommand cgBtACAAeAA=", Ask, "dynamic"},
	{"pwsh -File ./build.ps1", Allow, "default"},
	{"bash -c 'rm -rf /'", Deny, "no-delete"},
	{`sh -c "echo hi"`, Allow, "default"},
	{"[scriptblock]::Create('ri x').Invoke()", Deny, "no-delete"},
	{"[scriptblock]::Create($s).Invoke()", Ask, "dynamic"},
	{"[System.Diagnostics.Process]::Start('rm', '-rf /')", Ask, "dynamic"},
	{"using namespace System.Diagnostics\n[Process]::Start('rm')", Ask, "dynamic"},
	{"using namespace System.Diagnostics; New-Object ProcessStartInfo", Ask, "dynamic"},
	{"Microsoft.PowerShell.Management\\ri x", Deny, "no-delete"},
	{"Add-Type -TypeDefinition $code", Ask, "dynamic"},
	{"New-Object -ComObject WScript.Shell", Ask, "dynamic"},

	// Subexpressions, groups, strings.
	{"$(ri x)", Deny, "no-delete"},
	{`"$(ri x)"`, Deny, "no-delete"},
	{`Write-Output "a $(ri x) b"`, Deny, "no-delete"},
	{"Write-Output a$(ri x)b", Deny, "no-delete"},
	{"@(ri x)", Deny, "no-delete"},
	{"(ri x)", Deny, "no-delete"},
	{"$null = ri x", Deny, "no-delete"},
	{"[void](ri x)", Deny, "no-delete"},
	{"@{ a = (ri x) }", Deny, "no-delete"},
	{"@\"\n$(ri x)\n\"@", Deny, "no-delete"},

	// Control flow, functions, classes.
	{"if ($true) { ri x }", Deny, "no-delete"},
	{"if (ri x) { }", Deny, "no-delete"},
	{"foreach ($f in ls) { ri $f }", Deny, "no-delete"},
	{"switch ($x) { 1 { ri x } default { 'y' } }", Deny, "no-delete"},
	{"try { Get-Date } catch { ri x } finally { }", Deny, "no-delete"},
	{"while ($true) { ri x }", Deny, "no-delete"},
	{"do { ri x } until ($true)", Deny, "no-delete"},
	{"function Get-ChildItem { ri -Recurse / }; Get-ChildItem", Deny, "no-delete"},
	{"function f { Remove-Item $args }", Deny, "no-delete"},
	{"class C { [void] M() { Remove-Item x } }", Deny, "no-delete"},
	{"Get-Date && ri x", Deny, "no-delete"},
	{"Get-Date || ri x", Deny, "no-delete"},
	{"ri x &", Deny, "no-delete"},
	{"Get-ChildItem\n| Remove-Item", Deny, "no-delete"},

	// Aliases the script defines.
	{"Set-Alias x Remove-Item; x y", Deny, "no-delete"},
	{"x y; Set-Alias x Remove-Item", Deny, "no-delete"},
	{"sal x ri", Deny, "no-delete"},
	{"New-Alias -Name x -Value Remove-Item", Deny, "no-delete"},
	{"Set-Alias x iex; x 'ri y'", Deny, "no-delete"},
	{"Set-Alias x $cmd", Ask, "dynamic"},
	{"Set-Alias x /" + strings.Repeat("d/", 150) + "rm; x y", Deny, "no-delete"},
	{"using module ./m.psm1; Get-Date", Allow, "default"},
	{"Set-Item alias:x Remove-Item", Ask, "dynamic"},
	{"$function:f = 'ri x'", Ask, "dynamic"},
	{"$PSNativeCommandArgumentPassing = 'Legacy'; bash -c 'echo hi'", Ask, "dynamic"},
	{"${global:PSNativeCommandArgumentPassing} = 'Legacy'", Ask, "dynamic"},
	{"Set-Variable PSNativeCommandArgumentPassing Legacy", Ask, "dynamic"},
	{"Get-Variable PSNativeCommandArgumentPassing", Allow, "default"},

	// Arguments, redirections, globs, prefixes.
	{"Get-Content ~/.ssh/id_rsa", Deny, "no-secrets"},
	{"Get-Content prod.env", Deny, "no-env-files"},
	{"gc prod.env", Deny, "no-env-files"},
	{"content prod.env", Deny, "no-env-files"}, // Get- is tried when nothing else resolves
	{"Get-Date > /etc/passwd", Deny, "no-system-writes"},
	{"Get-Date *> /etc/x", Deny, "no-system-writes"},
	{`"x" > /etc/x`, Deny, "no-system-writes"},
	{"Get-Date 2>&1", Allow, "default"},
	{"Stop-Process -Id 1", Deny, "no-stop"},
	{"spps 1", Deny, "no-stop"},
	{"stop-process 1", Deny, "no-stop"},
	{"iwr https://example.com", Ask, "web"},
	{"curl https://example.com", Ask, "web"},
	{"ndr w -PSProvider FileSystem -Root /", Deny, "no-psdrive"},

	// What cannot be parsed.
	{`"unterminated`, Ask, "unparseable"},
	{"Get-Date; <# open", Ask, "unparseable"},
	{"ri (", Ask, "unparseable"},
	{"Get-Date < in.txt", Ask, "unparseable"},
	{"workflow w { }", Ask, "unparseable"},
	{"[/bin/rm] x", Ask, "unparseable"},
}

func loadPwshPolicy(t testing.TB) *Policy {
	t.Helper()
	p, err := Parse("/p/pwsh.yaml", []byte(pwshPolicy))
	if err != nil {
		t.Fatal(err)
	}
	return p
}

func TestPwshDecisions(t *testing.T) {
	p := loadPwshPolicy(t)
	if len(pwshCases) < 100 {
		t.Fatalf("only %d cases", len(pwshCases))
	}
	for _, c := range pwshCases {
		v := p.evaluate(call{tool: "pwsh", command: c.cmd})
		if v.Decision != c.want || (c.rule != "" && v.Rule != c.rule) {
			t.Errorf("%q = %s (rule %s: %s; command %q), want %s (rule %q)", c.cmd, v.Decision, v.Rule, v.Reason, v.Command, c.want, c.rule)
		}
	}
}

// A bash call that runs pwsh is read as pwsh in turn, and the other way
// round.
func TestPwshFromBash(t *testing.T) {
	p := loadPwshPolicy(t)
	for cmd, want := range map[string]Decision{
		"pwsh -c 'Remove-Item -Recurse /'":          Deny,
		"pwsh -NoProfile -Command 'Get-Date'":       Allow,
		"sudo pwsh -c 'ri x'":                       Deny,
		"pwsh -c \"bash -c 'rm x'\"":                Deny,
		"echo 'ri x' | pwsh":                        Ask,
		"pwsh <<'EOF'\nRemove-Item x\nEOF":          Deny,
		"pwsh -e cgBtACAAeAA=":                      Ask,
		"pwsh -c \"\\$(ri x)\"":                     Deny,
		"powershell -command Write-Output hi":       Allow,
		"pwsh ./script.ps1":                         Allow,
		"pwsh -NoExit -c Get-Date":                  Ask,
		"pwsh -c -":                                 Ask,
		"pwsh -c 'iex (Get-Content ./payload.txt)'": Ask,
	} {
		if v := p.evaluate(call{tool: "bash", command: cmd}); v.Decision != want {
			t.Errorf("bash %q = %s (rule %s: %s), want %s", cmd, v.Decision, v.Rule, v.Reason, want)
		}
	}
}

// Rule names match pwsh commands case-insensitively; a cmdlet rule sees
// the cmdlet's aliases; a rule naming an alias sees what it runs; a rule
// naming rm sees the native rm only.
func TestPwshRuleNames(t *testing.T) {
	src := `default: allow
tools: {pwsh: true}
rules:
  - {name: by-cmdlet, decision: deny, match: {command: [remove-item]}}
  - {name: by-native, decision: ask, match: {command: [rm]}}
  - {name: by-alias, decision: deny, match: {command: [echo]}}
  - {name: by-prefix, decision: deny, match: {prefix: ["gci -Recurse"]}}
  - {name: by-glob, decision: deny, match: {command: ["set-*"]}}
  - {name: bash-only, decision: deny, match: {tool: [bash], command: [Get-Date]}}
`
	p, err := Parse("/p/names.yaml", []byte(src))
	if err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		tool, cmd string
		rule      string
	}{
		{"pwsh", "Remove-Item x", "by-cmdlet"},
		{"pwsh", "ri x", "by-cmdlet"},
		{"pwsh", "rm x", "by-native"},
		{"pwsh", "/usr/bin/rm x", "by-native"},
		{"pwsh", "RM x", "by-native"},
		{"pwsh", "echo x", "by-alias"},
		{"pwsh", "Write-Output x", "by-alias"},
		{"pwsh", "/bin/echo x", "by-alias"},
		{"pwsh", "Get-ChildItem -Recurse", "by-prefix"},
		{"pwsh", "dir -Recurse", "by-prefix"},
		{"pwsh", "gci -recurse", "default"}, // parameters match as written
		{"pwsh", "Set-Location /", "by-glob"},
		{"pwsh", "cd /", "by-glob"},
		{"bash", "Remove-Item x", "default"}, // bash names are exact
		{"bash", "RM x", "default"},
		{"bash", "rm x", "by-native"},
		{"bash", "pwsh -c 'ri x'", "by-cmdlet"},
		{"bash", "pwsh -c get-date", "bash-only"},
		{"pwsh", "get-date", "default"},
	}
	for _, c := range cases {
		if v := p.evaluate(call{tool: c.tool, command: c.cmd}); v.Rule != c.rule {
			t.Errorf("%s %q: rule %s (%s), want %s", c.tool, c.cmd, v.Rule, v.Decision, c.rule)
		}
	}
}

// What the analysis reads: argv with quotes removed, parameters as
// written, arrays flattened, redirection targets, and what wrappers run.
func TestPwshAnalyze(t *testing.T) {
	type sc struct {
		name  string
		argv  []string
		redir []string
		via   string
	}
	cases := []struct {
		cmd  string
		want []sc
	}{
		{"Get-ChildItem -Path 'a b',c -Recurse:$false > out.txt 2>&1", []sc{
			{"Get-ChildItem", []string{"Get-ChildItem", "-Path", "a b", "c", "-Recurse:$false"}, []string{"out.txt"}, ""}}},
		{`ri "x` + "`" + `ty" -Force`, []sc{{"Remove-Item", []string{"Remove-Item", "x\ty", "-Force"}, nil, ""}}},
		{"git commit -m 'it''s' --amend", []sc{{"git", []string{"git", "commit", "-m", "it's", "--amend"}, nil, ""}}},
		{"Start-Process -FilePath tar -ArgumentList '-xf \"a b.tar\"' -Wait", []sc{
			{"Start-Process", []string{"Start-Process", "-FilePath", "tar", "-ArgumentList", `-xf "a b.tar"`, "-Wait"}, nil, ""},
			{"tar", []string{"tar", "-xf", "a b.tar"}, nil, "Start-Process"}}},
		{"iex 'ls | sort'", []sc{
			{"Invoke-Expression", []string{"Invoke-Expression", "ls | sort"}, nil, ""},
			{"ls", []string{"ls"}, nil, "Invoke-Expression"},
			{"sort", []string{"sort"}, nil, "Invoke-Expression"}}},
		{"Get-Date `\n  -Format o", []sc{{"Get-Date", []string{"Get-Date", "-Format", "o"}, nil, ""}}},
	}
	for _, c := range cases {
		cmds, err := analyzePwsh(c.cmd)
		if err != nil {
			t.Errorf("%q: %v", c.cmd, err)
			continue
		}
		var got []sc
		for _, x := range cmds {
			got = append(got, sc{x.name, x.Argv, x.Redirects, x.Via})
		}
		if !reflect.DeepEqual(got, c.want) {
			t.Errorf("%q:\n got %q\nwant %q", c.cmd, got, c.want)
		}
	}
}

func TestPwshBounds(t *testing.T) {
	for _, cmd := range []string{
		strings.Repeat("(", maxNesting+1) + "ls" + strings.Repeat(")", maxNesting+1),
		strings.Repeat("{", maxNesting+1) + strings.Repeat("}", maxNesting+1),
		strings.Repeat(`"$(`, maxNesting+1) + strings.Repeat(`)"`, maxNesting+1),
		strings.Repeat("@{a=", maxNesting+1) + "1" + strings.Repeat("}", maxNesting+1),
		strings.Repeat("$x[", maxNesting+1) + "0" + strings.Repeat("]", maxNesting+1),
		strings.Repeat("a;", maxSimpleCmds+1),
		strings.Repeat("x", maxCommandBytes+1),
	} {
		if _, err := analyzePwsh(cmd); !errors.Is(err, errTooComplex) {
			t.Errorf("%.20q...: err = %v, want too complex", cmd, err)
		}
	}
	deep := "ri x"
	for range maxWrapperDepth + 2 {
		deep = "iex '" + strings.ReplaceAll(deep, "'", "''") + "'"
	}
	p := loadPwshPolicy(t)
	if v := p.evaluate(call{tool: "pwsh", command: deep}); v.Decision == Allow {
		t.Errorf("deeply wrapped ri = allow (%s)", v.Rule)
	}
	if _, err := analyzePwsh("Get-Date\x00"); err == nil {
		t.Error("NUL: no error")
	}
}
