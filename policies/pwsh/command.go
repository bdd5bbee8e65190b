package pwsh

import (
	"slices"
	"strings"
	"unicode"

	"github.com/shellbox/shellbox/internal/clip"
	"github.com/shellbox/shellbox/policies/glob"
)

// What a pwsh command runs: its name resolved (aliases, paths, the Get-
// fallback), and the commands that PowerShell's wrappers run
// (Invoke-Expression, Start-Process, Switch-Process/exec, Set-Alias's
// target). What a program runs (env, sudo, bash -c, pwsh -c, ...) is the
// caller's to read: those commands are Program.

// pwshResolved is one command a name may run.
type pwshResolved struct {
	name  string // the command, spelled as PowerShell spells it when known
	argv0 string // what Args[0] becomes (the alias target as written)
	note  string // for explanations: "alias of Remove-Item"
	// ruleOnly: only a rule naming it decides (a Get- fallback); no rule
	// matching it does not take the default.
	ruleOnly bool
}

// resolve lists what the command name may run. A built-in alias runs its
// cmdlet; an alias the script defines runs its targets (all of them, as the
// order of definitions is not followed) or, where the definition does not
// apply, the name itself; a path is never an alias.
func (p *parser) resolve(name string) []pwshResolved {
	one := func(n string) pwshResolved {
		b, isPath := Base(n)
		if !isPath {
			if t, ok := AliasTarget(b); ok {
				return pwshResolved{name: canonical(t), argv0: t, note: "alias of " + t}
			}
		}
		return pwshResolved{name: canonical(b), argv0: n}
	}
	out := make([]pwshResolved, 0, 2)
	addOne := func(r pwshResolved) {
		for _, o := range out {
			if o.name == r.name || Fold(o.name) == Fold(r.name) {
				return
			}
		}
		out = append(out, r)
	}
	if _, isPath := Base(name); !isPath && len(p.sess.aliases[Fold(name)]) > 0 {
		for _, t := range p.aliasTargets(name) {
			r := one(t)
			r.note = "alias of " + t
			addOne(r)
		}
	}
	r := one(name)
	if base, isPath := Base(name); isPath && strings.Contains(name, `\`) {
		// Module\name may name an alias too; the file it may also be is
		// the name's last part.
		if t, ok := AliasTarget(base); ok {
			addOne(pwshResolved{name: canonical(t), argv0: t, note: "alias of " + t})
		}
	}
	addOne(r)
	if _, isPath := Base(name); !isPath && r.note == "" {
		if g, ok := pwshGetFallback[Fold("get-"+name)]; ok {
			addOne(pwshResolved{name: g, argv0: g, note: "or " + g, ruleOnly: true})
		}
	}
	return out
}

// aliasTargets follows the script's aliases of aliases (bounded) to the
// commands name may run.
func (p *parser) aliasTargets(name string) []string {
	var out []string
	seen := map[string]bool{}
	var walk func(n string, depth int)
	walk = func(n string, depth int) {
		for _, t := range p.sess.aliases[Fold(n)] {
			k := Fold(t)
			if seen[k] {
				continue
			}
			seen[k] = true
			if _, more := p.sess.aliases[k]; more && depth < 4 {
				walk(t, depth+1)
			}
			out = append(out, t)
		}
	}
	walk(name, 0)
	return out
}

// pwshPattern: the name has wildcard characters (a lookup by pattern is
// not the name it reads as).
func pwshPattern(name string) bool {
	if name == "?" {
		return false
	}
	return glob.IsPattern(name)
}

// emit adds the simple commands of c.
func (p *parser) emit(c *pwCmd) {
	text := clip.To(strings.TrimSpace(p.src[c.start:c.end]), maxTextBytes)
	base := Command{Redirects: c.redirs, Text: text, Via: p.via}
	if c.blockOnly {
		if len(c.redirs) > 0 {
			base.Wrapper = true
			p.add(base)
		}
		return
	}
	if !c.nameLit || c.name == "" || strings.ContainsRune(c.name, '$') || pwshPattern(c.name) ||
		strings.IndexFunc(c.name, unicode.IsControl) >= 0 {
		base.Dynamic = true
		base.Args = append([]string{c.name}, c.words...)
		c.lits[0] = c.nameLit
		base.Literal = c.lits
		p.add(base)
		return
	}
	// One Literal for every resolution: a name that resolves is a literal.
	c.lits[0] = true
	base.Literal = c.lits
	for _, r := range p.resolve(c.name) {
		sc := base
		sc.Args = append([]string{r.argv0}, c.words...)
		sc.Name = r.name
		sc.Wrapper = r.ruleOnly
		if r.note != "" {
			note := clip.To(r.note, 60) // an alias target the script defines is any length
			sc.Text = clip.To(text, maxTextBytes-len(note)-3) + " (" + note + ")"
		}
		p.run(sc, c)
		if p.err != nil {
			return
		}
	}
}

// run adds sc (a resolution of c) and what it runs.
func (p *parser) run(sc Command, c *pwCmd) {
	switch Fold(sc.Name) {
	case "invoke-expression":
		p.invokeExpression(sc, c)
	case "invoke-command":
		for _, e := range c.elems {
			for _, v := range e.vals {
				if v.block {
					sc.Wrapper = true // the block's commands decide
				}
			}
		}
		p.add(sc)
	case "start-process":
		p.startProcess(sc, c)
	case "switch-process":
		p.switchProcess(sc, c)
	case "set-alias", "new-alias":
		p.setAlias(sc, c)
	case "new-object":
		p.newObject(sc, c)
	case "add-type":
		p.dynamic(sc, "Add-Type compiles and loads code rules cannot see")
	case "invoke-history":
		p.dynamic(sc, "Invoke-History runs a command of the session's history, which rules cannot see")
	case "import-alias":
		p.dynamic(sc, "Import-Alias defines aliases from a file rules cannot see")
	default:
		if p.writesCommandDrive(sc, c) {
			p.dynamic(sc, "writing to the alias: or function: drive defines a command rules cannot see")
			return
		}
		if n := Fold(sc.Name); n != "get-variable" && slices.ContainsFunc(c.words, func(w string) bool {
			return strings.Contains(Fold(w), "psnativecommandargumentpassing")
		}) && (strings.HasSuffix(n, "-variable") || strings.HasSuffix(n, "-item")) {
			p.dynamic(sc, "setting $PSNativeCommandArgumentPassing changes the arguments native commands get")
			return
		}
		// A native command, a cmdlet, or a function: the caller knows the
		// programs that run others (env, sudo, bash -c, xargs, pwsh -c, ...).
		sc.Program = true
		p.add(sc)
	}
}

// dynamic adds sc as a command rules cannot read.
func (p *parser) dynamic(sc Command, why string) {
	sc.Dynamic, sc.Why = true, why
	p.add(sc)
}

// wrapperDynamic adds sc as a wrapper and, for what it runs, a command
// rules cannot read.
func (p *parser) wrapperDynamic(sc Command, why string) {
	sc.Wrapper = true
	p.add(sc)
	p.add(Command{Dynamic: true, Text: sc.Text, Via: sc.Via, Why: why})
}

// writesCommandDrive: the command writes to the alias: or function: drive
// (New-Item alias:x -Value Remove-Item, Set-Item function:f 'ri x'); a
// reading cmdlet (Get-*, Test-Path) does not.
func (p *parser) writesCommandDrive(sc Command, c *pwCmd) bool {
	n := Fold(sc.Name)
	if strings.HasPrefix(n, "get-") || n == "test-path" {
		return false
	}
	for _, w := range c.words {
		w = Fold(w)
		if i := strings.Index(w, ":"); i > 0 && strings.HasPrefix(w, "-") {
			w = w[i+1:] // -Path:alias:x
		}
		w = strings.TrimPrefix(w, `microsoft.powershell.core\`)
		if strings.HasPrefix(w, "alias:") || strings.HasPrefix(w, "function:") {
			return true
		}
	}
	return false
}

// Parameter binding, for the cmdlets whose arguments say what they run.

type pwParam struct {
	names []string // folded: the name, then its aliases
	sw    bool     // a switch: takes no value (unless -Name:value)
	pos   int      // position, -1 for none
}

var pwshCommonParams = []pwParam{
	{[]string{"verbose", "vb"}, true, -1}, {[]string{"debug", "db"}, true, -1},
	{[]string{"erroraction", "ea"}, false, -1}, {[]string{"warningaction", "wa"}, false, -1},
	{[]string{"informationaction", "infa"}, false, -1}, {[]string{"progressaction", "proga"}, false, -1},
	{[]string{"errorvariable", "ev"}, false, -1}, {[]string{"warningvariable", "wv"}, false, -1},
	{[]string{"informationvariable", "iv"}, false, -1}, {[]string{"outvariable", "ov"}, false, -1},
	{[]string{"outbuffer", "ob"}, false, -1}, {[]string{"pipelinevariable", "pv"}, false, -1},
}

// pwshShouldProcessParams are the common parameters of cmdlets that support
// ShouldProcess (Start-Process, Set-Alias, New-Alias; not Invoke-Expression,
// where -c is -Command).
var pwshShouldProcessParams = []pwParam{{[]string{"whatif", "wi"}, true, -1}, {[]string{"confirm", "cf"}, true, -1}}

// bindParams binds a command's elements to params (and the common
// parameters) as PowerShell does: a parameter by its name, an alias, or an
// unambiguous prefix; the other values by position. ok is false when it
// cannot (an unknown or ambiguous parameter, a missing value, a splat, too
// many values): PowerShell would refuse the call, or rules could not tell
// what runs.
func bindParams(elems []pwElem, params []pwParam) (map[string]pwElem, bool) {
	all := append(append([]pwParam(nil), params...), pwshCommonParams...)
	out := map[string]pwElem{}
	var positional []pwElem
	for i := 0; i < len(elems); i++ {
		e := elems[i]
		if e.end {
			continue
		}
		if e.param == "" {
			for _, v := range e.vals {
				if v.splat {
					return nil, false
				}
			}
			positional = append(positional, e)
			continue
		}
		prm, ok := matchParam(all, e.param)
		if !ok {
			return nil, false
		}
		if prm.sw {
			if e.colon && i+1 < len(elems) && elems[i+1].param == "" {
				i++
			}
			out[prm.names[0]] = pwElem{}
			continue
		}
		if i+1 >= len(elems) || elems[i+1].param != "" {
			return nil, false
		}
		i++
		out[prm.names[0]] = elems[i]
	}
	for pos := 0; len(positional) > 0; pos++ {
		found := false
		for _, prm := range params {
			if prm.pos != pos {
				continue
			}
			found = true
			if _, bound := out[prm.names[0]]; !bound {
				out[prm.names[0]] = positional[0]
				positional = positional[1:]
			}
		}
		if !found {
			return nil, false
		}
	}
	return out, true
}

func matchParam(params []pwParam, name string) (pwParam, bool) {
	var match *pwParam
	for i := range params {
		for _, n := range params[i].names {
			if n == name {
				return params[i], true
			}
			if strings.HasPrefix(n, name) {
				if match != nil && match != &params[i] {
					return pwParam{}, false // ambiguous
				}
				match = &params[i]
			}
		}
	}
	if match == nil {
		return pwParam{}, false
	}
	return *match, true
}

// literal is the value of e when it is one literal word.
func (e pwElem) literal() (string, bool) {
	if len(e.vals) != 1 || !e.vals[0].lit || e.vals[0].block || e.vals[0].splat {
		return "", false
	}
	return e.vals[0].val, true
}

var iexParams = []pwParam{{[]string{"command"}, false, 0}}

// invokeExpression: Invoke-Expression 'literal' runs the string as pwsh in
// this session; anything else (a variable, a string with $ in it, the
// pipeline's input) is dynamic.
func (p *parser) invokeExpression(sc Command, c *pwCmd) {
	b, ok := bindParams(c.elems, iexParams)
	if !ok {
		p.wrapperDynamic(sc, "Invoke-Expression with arguments rules cannot bind runs a command rules cannot see")
		return
	}
	cmd, has := b["command"]
	if !has {
		p.wrapperDynamic(sc, "Invoke-Expression runs its pipeline input, which rules cannot see")
		return
	}
	script, lit := cmd.literal()
	if !lit {
		p.wrapperDynamic(sc, "Invoke-Expression runs a string that is not a literal")
		return
	}
	sc.Wrapper = true
	p.add(sc)
	p.wrapScript(script, "Invoke-Expression", c.start)
}

var startProcessParams = []pwParam{
	{[]string{"filepath", "pspath", "path"}, false, 0}, {[]string{"argumentlist", "args"}, false, 1},
	{[]string{"credential", "runas"}, false, -1}, {[]string{"workingdirectory"}, false, -1},
	{[]string{"loaduserprofile", "lup"}, true, -1}, {[]string{"nonewwindow", "nnw"}, true, -1},
	{[]string{"passthru"}, true, -1}, {[]string{"redirectstandarderror", "rse"}, false, -1},
	{[]string{"redirectstandardinput", "rsi"}, false, -1}, {[]string{"redirectstandardoutput", "rso"}, false, -1},
	{[]string{"verb"}, false, -1}, {[]string{"windowstyle"}, false, -1}, {[]string{"wait"}, true, -1},
	{[]string{"usenewenvironment"}, true, -1}, {[]string{"environment"}, false, -1},
	pwshShouldProcessParams[0], pwshShouldProcessParams[1],
}

// startProcess: Start-Process FILE [ARGS] runs FILE (a program or a
// script) with ARGS joined by spaces and split again as .NET splits a
// command line (ProcessStartInfo.Arguments).
func (p *parser) startProcess(sc Command, c *pwCmd) {
	b, ok := bindParams(c.elems, startProcessParams)
	if !ok {
		p.wrapperDynamic(sc, "Start-Process with arguments rules cannot bind runs a program rules cannot see")
		return
	}
	file, lit := b["filepath"].literal()
	if !lit {
		p.wrapperDynamic(sc, "Start-Process runs a program given by a value that is not a literal")
		return
	}
	sc.Wrapper = true
	p.add(sc)
	argv, lits := []string{file}, []bool{true}
	if al, has := b["argumentlist"]; has {
		parts, allLit := []string{}, true
		for _, v := range al.vals {
			parts = append(parts, v.val)
			allLit = allLit && v.lit && !v.block && !v.splat
		}
		if allLit {
			for _, w := range splitDotnetArgs(strings.Join(parts, " ")) {
				argv, lits = append(argv, w), append(lits, true)
			}
		} else {
			for _, v := range al.vals {
				argv, lits = append(argv, v.val), append(lits, false)
			}
		}
	}
	p.native(argv, lits, "Start-Process", c.start)
}

// switchProcess: Switch-Process (and pwsh's exec function) replaces pwsh
// with the program its words name.
func (p *parser) switchProcess(sc Command, c *pwCmd) {
	sc.Wrapper = true
	p.add(sc)
	var argv []string
	var lits []bool
	for i, e := range c.elems {
		if i == 0 && e.param != "" && strings.HasPrefix("withcommand", e.param) {
			continue
		}
		if e.param != "" {
			argv, lits = append(argv, "-"+e.param), append(lits, true)
			continue
		}
		for _, v := range e.vals {
			argv, lits = append(argv, v.val), append(lits, v.lit && !v.splat)
		}
	}
	if len(argv) == 0 {
		return
	}
	p.native(argv, lits, "exec", c.start)
}

// native adds the program argv that a pwsh wrapper runs (a Native
// command: the caller reads what it runs in turn).
func (p *parser) native(argv []string, lits []bool, via string, start int) {
	if p.depth+1 > maxWrapperDepth {
		p.dynamicf(start, "wrappers nest deeper than %d levels", maxWrapperDepth)
		return
	}
	isc := Command{Args: argv, Literal: lits, Text: clip.To(strings.Join(argv, " "), maxTextBytes), Via: via,
		Depth: p.depth + 1, Native: true}
	if !lits[0] || glob.IsPattern(argv[0]) {
		isc.Dynamic = true
		p.add(isc)
		return
	}
	isc.Program = true
	p.add(isc)
}

var aliasParams = []pwParam{
	{[]string{"name"}, false, 0}, {[]string{"value"}, false, 1}, {[]string{"description"}, false, -1},
	{[]string{"option"}, false, -1}, {[]string{"passthru"}, true, -1}, {[]string{"scope"}, false, -1},
	{[]string{"force"}, true, -1}, pwshShouldProcessParams[0], pwshShouldProcessParams[1],
}

// setAlias: Set-Alias/New-Alias NAME VALUE. The definition is a command of
// its own (it takes the default), and what the alias will run is matched
// too: a rule naming Remove-Item sees `Set-Alias x Remove-Item`. Later uses
// of NAME resolve to VALUE.
func (p *parser) setAlias(sc Command, c *pwCmd) {
	p.add(sc)
	b, ok := bindParams(c.elems, aliasParams)
	if !ok {
		p.dynamic(sc, "an alias definition with arguments rules cannot bind")
		return
	}
	target, lit := b["value"].literal()
	if !lit || target == "" || pwshPattern(target) {
		p.dynamic(sc, "an alias to a command that is not a literal")
		return
	}
	tb, isPath := Base(target)
	name := canonical(tb)
	if !isPath {
		if t, ok := AliasTarget(tb); ok {
			name = canonical(t)
		}
	}
	p.add(Command{Args: []string{target}, Literal: []bool{true}, Name: name, Text: clip.To(sc.Text, maxTextBytes-30) + " (alias target " + clip.To(target, 20) + ")",
		Via: sc.Via, Wrapper: true})
	if n, lit := b["name"].literal(); lit && n != "" {
		if err := p.sess.define(n, target); err != nil {
			p.fail(err)
		}
	}
}

var newObjectParams = []pwParam{
	{[]string{"typename"}, false, 0}, {[]string{"argumentlist", "args"}, false, 1},
	{[]string{"property"}, false, -1}, {[]string{"comobject", "com"}, false, -1}, {[]string{"strict"}, true, -1},
}

// newObject: New-Object of a type that runs code (or any COM object) is
// dynamic, like calling the type's members.
func (p *parser) newObject(sc Command, c *pwCmd) {
	b, ok := bindParams(c.elems, newObjectParams)
	switch {
	case !ok:
		p.dynamic(sc, "New-Object with arguments rules cannot bind")
	case b["comobject"].vals != nil:
		p.dynamic(sc, "New-Object -ComObject runs code rules cannot see")
	default:
		t, lit := b["typename"].literal()
		switch {
		case !lit:
			p.dynamic(sc, "New-Object of a type that is not a literal")
		case p.dynamicType(t):
			p.dynamic(sc, "New-Object "+clip.To(t, 80)+" runs or loads code rules cannot see")
		default:
			p.add(sc)
		}
	}
}

// splitDotnetArgs splits a command line as .NET does on Unix
// (Process.ParseArgumentsIntoList): whitespace separates arguments, double
// quotes group, a doubled quote inside quotes is a quote, and backslashes
// escape a quote (2n+1 backslashes before a quote: n and a quote).
func splitDotnetArgs(s string) []string {
	var out []string
	i := 0
	for i < len(s) {
		for i < len(s) && unicode.IsSpace(rune(s[i])) {
			i++
		}
		if i == len(s) {
			break
		}
		var b strings.Builder
		inQuotes := false
		for i < len(s) {
			c := s[i]
			switch {
			case c == '\\':
				n := 0
				for i < len(s) && s[i] == '\\' {
					n++
					i++
				}
				if i < len(s) && s[i] == '"' {
					b.WriteString(strings.Repeat(`\`, n/2))
					if n%2 == 1 {
						b.WriteByte('"')
						i++
					}
				} else {
					b.WriteString(strings.Repeat(`\`, n))
				}
				continue
			case c == '"':
				if inQuotes && i+1 < len(s) && s[i+1] == '"' {
					b.WriteByte('"')
					i += 2
					continue
				}
				inQuotes = !inQuotes
				i++
				continue
			case !inQuotes && unicode.IsSpace(rune(c)):
			default:
				b.WriteByte(c)
				i++
				continue
			}
			break
		}
		out = append(out, b.String())
	}
	return out
}
