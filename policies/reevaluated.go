package policies

import (
	"fmt"
	"maps"
	"slices"
	"strings"

	"mvdan.cc/sh/v3/syntax"

	"github.com/shellbox/shellbox/internal/clip"
)

// Strings bash evaluates later, and variables that change what later
// commands run. A reader sees a command once; bash reads some strings
// again: array subscripts in arithmetic and in names (printf -v, read,
// test -v, declare, unset, ${!x}), prompt strings (${x@P}, PS4 under set
// -x), PROMPT_COMMAND, and the command strings of variables that programs
// run (GIT_PAGER, EDITOR, ...). A literal one is parsed as a script; one
// that is not a literal is dynamic.

func (a *analyzer) dynamicf(src string, n syntax.Node, via, why string) error {
	t := clip.To(strings.TrimSpace(src), maxTextBytes)
	if n != nil {
		t = text(src, n)
	}
	return a.add(simpleCommand{Dynamic: true, Text: t, Via: via, why: why})
}

// laterString: a literal word that holds a subscript with an expansion
// (x='a[$(rm x)]', printf -v 'a[$(rm x)]', read 'a[`rm x`]') runs that
// expansion when bash evaluates it as a name or in arithmetic: its
// substitutions are parsed as commands.
func (a *analyzer) laterString(src string, w *syntax.Word, depth int) error {
	maybe := false
	for _, p := range w.Parts {
		switch p := p.(type) {
		case *syntax.Lit:
			maybe = maybe || strings.IndexByte(p.Value, '[') >= 0
		case *syntax.SglQuoted:
			maybe = maybe || strings.IndexByte(p.Value, '[') >= 0
		case *syntax.DblQuoted:
			maybe = true
		}
	}
	if !maybe {
		return nil
	}
	v, lit := wordValue(src, w)
	if !lit || !evaluatesLater(v) {
		return nil
	}
	if depth+1 > maxWrapperDepth {
		return a.dynamicf(src, w, "", fmt.Sprintf("strings evaluated later nest deeper than %d levels", maxWrapperDepth))
	}
	// The subscript is expanded as a double-quoted string is: a here-document
	// body expands the same way.
	const eof = "SHELLBOX_LATER_EOF"
	if strings.Contains(v, eof) {
		return a.dynamicf(src, w, "", "a string bash evaluates later cannot be read")
	}
	return a.script(": <<"+eof+"\n"+v+"\n"+eof+"\n", depth+1, "a subscript bash evaluates later")
}

// evaluatesLater: s holds a [ followed by an expansion.
func evaluatesLater(s string) bool {
	i := strings.IndexByte(s, '[')
	if i < 0 {
		return false
	}
	rest := s[i:]
	return strings.Contains(rest, "$(") || strings.Contains(rest, "`") || strings.Contains(rest, "${") ||
		strings.Contains(rest, "$[")
}

// paramExp: ${x@P} expands x's value as a prompt (command substitutions
// included); ${!x} takes the name to expand from x's value (a subscript in
// it is evaluated). Neither value is known.
func (a *analyzer) paramExp(src string, pe *syntax.ParamExp, via string) error {
	if pe.Exp != nil && pe.Exp.Op == syntax.OtherParamOps && pe.Exp.Word != nil {
		if v, _ := wordValue(src, pe.Exp.Word); strings.Contains(v, "P") {
			return a.dynamicf(src, pe, via, "${…@P} expands a value as a prompt, running its command substitutions")
		}
	}
	if pe.Excl && pe.Names == 0 {
		if w, ok := pe.Index.(*syntax.Word); ok {
			if v, lit := wordValue(src, w); lit && (v == "@" || v == "*") {
				return nil // ${!a[@]}: the keys
			}
		}
		return a.dynamicf(src, pe, via, "${!name} expands a variable named by a value the reader does not know")
	}
	return nil
}

// assign: a variable assigned anywhere (not only in front of a command)
// changes what later commands run when it is one of sensitiveVars.
func (a *analyzer) assign(src string, as *syntax.Assign, depth int, via string) error {
	for _, e := range a.exempted {
		if e == as {
			return nil
		}
	}
	name := ""
	var value *syntax.Word
	switch {
	case as.Name != nil:
		name, value = as.Name.Value, as.Value
		if as.Naked {
			return nil // export PATH: no new value
		}
	case as.Value != nil:
		// declare 'NAME=VALUE' or declare "$x": bash splits it itself.
		v, lit := wordValue(src, as.Value)
		if !lit {
			// local "x=$1": a literal name, then a value.
			n, ok := literalName(src, as.Value)
			if !ok {
				return a.dynamicf(src, as, via, "declares a variable whose name is not a literal; bash evaluates its subscript")
			}
			if err := a.setAtRuntime(src, n, as); err != nil {
				return err
			}
			return a.varSet(src, as, n, "", false, depth, via)
		}
		if strings.HasPrefix(v, "-") || strings.HasPrefix(v, "+") {
			return nil // an option
		}
		n, val, ok := strings.Cut(v, "=")
		if !ok {
			return nil
		}
		n = strings.TrimSuffix(n, "+")
		if i := strings.IndexByte(n, '['); i >= 0 {
			n = n[:i]
		}
		return a.varSet(src, as, n, val, true, depth, via)
	}
	if name == "" {
		return nil
	}
	if as.Array != nil {
		for _, el := range as.Array.Elems {
			if el.Value == nil {
				continue
			}
			if _, lit := wordValue(src, el.Value); !lit && !numeric(el.Value) {
				if err := a.setAtRuntime(src, name, as); err != nil {
					return err
				}
				break
			}
		}
		if sensitiveVar(name) != 0 {
			for _, el := range as.Array.Elems {
				if el.Value == nil {
					continue
				}
				v, lit := wordValue(src, el.Value)
				if err := a.varSet(src, as, name, v, lit, depth, via); err != nil {
					return err
				}
			}
		}
		return nil
	}
	v, lit := "", true
	if value != nil {
		v, lit = wordValue(src, value)
		lit = lit && !expandsTilde(value, true, 0)
		if !lit && !numeric(value) {
			if err := a.setAtRuntime(src, name, as); err != nil {
				return err
			}
		}
	}
	return a.varSet(src, as, name, v, lit, depth, via)
}

// The kinds of sensitive variables.
const (
	varHijack  = 1 + iota // changes which program runs or what it loads: dynamic
	varCommand            // its value is a command something runs: parsed
	varPrompt             // a prompt string: dynamic if it expands anything
	varShell              // a shell's path: known shells only
	varFlags              // tool flags: dynamic if they name a program (GOFLAGS=-toolexec=...)
)

// sensitiveVar says how assigning name changes what later commands run.
func sensitiveVar(name string) int {
	switch name {
	case "PATH", "BASH_ENV", "ENV", "IFS", "BASH_CMDS", "SHELLOPTS", "BASHOPTS", "BASH_LOADABLES_PATH", "GCONV_PATH",
		"TAR_OPTIONS", "PYTHONSTARTUP", "PYTHONPATH", "PYTHONHOME", "PYTHONINSPECT", "PYTHONUSERBASE", "PERL5OPT",
		"PERL5LIB", "PERLLIB", "PERL5DB", "RUBYOPT", "RUBYLIB", "NODE_OPTIONS", "NODE_PATH", "JAVA_TOOL_OPTIONS",
		"_JAVA_OPTIONS", "JDK_JAVA_OPTIONS", "EXINIT", "VIMINIT", "LESS", "MORE", "LESSKEY", "LESSKEYIN",
		"LESSKEY_CONTENT", "ZDOTDIR", "MAKEFLAGS", "GNUMAKEFLAGS", "MFLAGS", "XARGS_OPTS", "SYSTEMD_PAGER",
		"BASH_XTRACEFD", "HOSTALIASES", "OPENSSL_CONF", "GIT_CONFIG_PARAMETERS", "GIT_EXEC_PATH", "GIT_CONFIG",
		"GIT_CONFIG_GLOBAL", "GIT_CONFIG_SYSTEM", "GIT_CONFIG_COUNT", "GIT_TEMPLATE_DIR":
		return varHijack
	case "PROMPT_COMMAND", "GIT_PAGER", "GIT_EDITOR", "GIT_SSH_COMMAND", "GIT_SSH", "GIT_SEQUENCE_EDITOR",
		"GIT_EXTERNAL_DIFF", "GIT_ASKPASS", "GIT_PROXY_COMMAND", "PAGER", "MANPAGER", "EDITOR", "VISUAL",
		"SUDO_EDITOR", "SSH_ASKPASS", "SUDO_ASKPASS", "BROWSER", "FCEDIT", "LESSOPEN", "LESSCLOSE", "RSYNC_RSH",
		"CVS_RSH", "RSH", "TAR_COMPRESS_PROGRAM", "MANPL", "PSQL_PAGER", "BASH_ALIASES", "CC", "CXX", "CPP", "LD",
		"AR", "FC", "HOSTCC", "RUSTC_WRAPPER", "RUSTC", "CARGO_BUILD_RUSTC_WRAPPER", "GIT_SEQUENCE_EDITOR_CMD",
		"SELECTED_EDITOR":
		return varCommand
	case "GOFLAGS":
		return varFlags
	case "PS0", "PS1", "PS2", "PS3", "PS4":
		return varPrompt
	case "SHELL", "CONFIG_SHELL", "BASH":
		return varShell
	}
	switch {
	case strings.HasPrefix(name, "LD_"), strings.HasPrefix(name, "BASH_FUNC_"),
		strings.HasPrefix(name, "GIT_CONFIG_KEY_"), strings.HasPrefix(name, "GIT_CONFIG_VALUE_"):
		return varHijack
	}
	return 0
}

// hijacks reports whether assigning name changes which program runs, what
// it loads or what it runs later.
func hijacks(name string) bool { return sensitiveVar(name) != 0 }

// varSet decides on name=value set anywhere in the command.
func (a *analyzer) varSet(src string, n syntax.Node, name, value string, lit bool, depth int, via string) error {
	kind := sensitiveVar(name)
	switch {
	case kind == 0:
		return nil
	case kind == varHijack:
		return a.dynamicf(src, n, via, name+" is set, which changes which program a later command runs")
	case kind == varShell && lit && isShellPath(value):
		return nil
	case kind == varFlags && lit && !goFlagsRun(value):
		return nil
	case kind == varPrompt && lit:
		if !strings.ContainsAny(value, "$`") {
			return nil
		}
		// Prompt expansion is the expansion of a double-quoted string,
		// as a here-document body's.
		const eof = "SHELLBOX_PROMPT_EOF"
		if strings.Contains(value, eof) || depth+1 > maxWrapperDepth {
			break
		}
		return a.script(": <<"+eof+"\n"+value+"\n"+eof+"\n", depth+1, name)
	case kind == varCommand && lit:
		if value == "" {
			return nil
		}
		if depth+1 > maxWrapperDepth {
			return a.dynamicf(src, n, via, fmt.Sprintf("wrappers nest deeper than %d levels", maxWrapperDepth))
		}
		// Programs run these with /bin/sh -c (PROMPT_COMMAND and
		// BASH_ALIASES are bash's own).
		d := posixToo
		if name == "PROMPT_COMMAND" || name == "BASH_ALIASES" {
			d = bashOnly
		}
		return a.scriptAs(strings.TrimPrefix(value, "|"), depth+1, name, d)
	}
	return a.dynamicf(src, n, via, name+" is set to a value that a later command runs or expands")
}

// setsName: a builtin or loop that sets the variable name to a value the
// reader does not know (read PATH, for PATH in ..., printf -v PATH).
func (a *analyzer) setsName(name string, n syntax.Node, via string) error {
	if sensitiveVar(name) == 0 {
		return nil
	}
	return a.add(simpleCommand{Dynamic: true, Text: clip.To(name, maxTextBytes), Via: via,
		why: name + " is set to a value the reader does not know, which changes what a later command runs"})
}

// declClause: declare/typeset/local -n makes a name refer to another
// variable: a sensitive one, or one the reader cannot name, is dynamic.
func (a *analyzer) declClause(src string, d *syntax.DeclClause, via string) error {
	nameref, integer := false, false
	for _, as := range d.Args {
		if as.Naked && as.Name == nil && as.Value != nil {
			if v, lit := wordValue(src, as.Value); lit && strings.HasPrefix(v, "-") && strings.ContainsRune(v, 'n') {
				nameref = true
			}
			if v, lit := wordValue(src, as.Value); lit && strings.HasPrefix(v, "-") && strings.ContainsRune(v, 'i') {
				integer = true
			}
		}
	}
	if integer {
		// declare -i n: every value given to n is evaluated as arithmetic.
		for _, as := range d.Args {
			if as.Name != nil {
				if err := a.track(&a.arith, as.Name.Value, ""); err != nil {
					return err
				}
			}
		}
	}
	if !nameref {
		return nil
	}
	for _, as := range d.Args {
		if as.Name != nil && as.Value == nil && !as.Naked {
			continue
		}
		if as.Name != nil && as.Naked {
			// declare -n ref: its first assignment names the target.
			return a.dynamicf(src, as, via, "a name reference whose target a later assignment sets")
		}
		if as.Name == nil || as.Value == nil {
			continue
		}
		v, lit := wordValue(src, as.Value)
		if !lit {
			return a.dynamicf(src, as, via, "a name reference to a variable the reader cannot name")
		}
		if i := strings.IndexByte(v, '['); i >= 0 {
			v = v[:i]
		}
		if sensitiveVar(v) != 0 {
			return a.dynamicf(src, as, via, "a name reference to "+v+", which changes what later commands run")
		}
	}
	return nil
}

// namesSet checks the variable names that builtins set or evaluate: a name
// that is not a literal is dynamic (bash evaluates its subscript); a
// sensitive one is set to a value the reader does not know.
func (a *analyzer) namesSet(src string, argv []string, lits []bool, n syntax.Node, via string) error {
	switch argv[0] {
	case "printf", "read", "getopts", "unset", "wait", "mapfile", "readarray", "test", "[", "declare", "typeset",
		"local", "export", "readonly", "let":
	default:
		return nil
	}
	if argv[0] != "test" && argv[0] != "[" {
		for k := 1; k < len(argv); k++ {
			if !lits[k] && strings.HasPrefix(argv[k], "-") {
				// printf -v"$n": an option with a name that is not a literal.
				return a.dynamicf(src, n, via, fmt.Sprintf("`%s` is given an option that is not a literal", argv[0]))
			}
		}
	}
	var names []int // indexes of the words that are names
	opt := func(flag string, from int) {
		for k := from; k+1 < len(argv); k++ {
			if argv[k] == "--" {
				return
			}
			if lits[k] && strings.HasPrefix(argv[k], "-") && strings.HasSuffix(argv[k], flag[1:]) {
				names = append(names, k+1)
			}
		}
	}
	operands := func(from int, argOpts string) {
		k := from
		for ; k < len(argv) && lits[k] && strings.HasPrefix(argv[k], "-") && argv[k] != "-"; k++ {
			if argv[k] == "--" {
				k++
				break
			}
			if last := argv[k][len(argv[k])-1]; strings.IndexByte(argOpts, last) >= 0 {
				k++
			}
		}
		for ; k < len(argv); k++ {
			names = append(names, k)
		}
	}
	switch path := argv[0]; path {
	case "printf":
		opt("-v", 1)
	case "read":
		opt("-a", 1)
		operands(1, "adinNptu")
	case "getopts":
		if len(argv) > 2 {
			names = append(names, 2)
		}
	case "unset":
		operands(1, "")
	case "wait":
		opt("-p", 1)
	case "mapfile", "readarray":
		operands(1, "dnOsuCc")
	case "test", "[":
		for k := 1; k+1 < len(argv); k++ {
			if lits[k] && argv[k] == "-v" {
				names = append(names, k+1)
			}
		}
	case "declare", "typeset", "local", "export", "readonly", "let":
		// Run as commands (builtin declare, command export): every operand.
		for k := 1; k < len(argv); k++ {
			if !lits[k] {
				return a.dynamicf(src, n, via, "`"+path+"` is given a word that is not a literal; bash evaluates it")
			}
			if path != "let" {
				nm, val, ok := strings.Cut(argv[k], "=")
				if ok {
					if err := a.varSet(src, n, nm, val, true, 0, via); err != nil {
						return err
					}
				}
			}
		}
		if path == "let" {
			return a.dynamicf(src, n, via, "`let` run as a command evaluates its arguments as arithmetic")
		}
	}
	for _, k := range names {
		if k >= len(argv) {
			continue
		}
		if !lits[k] {
			return a.dynamicf(src, n, via, fmt.Sprintf("`%s` is given a variable name that is not a literal; bash evaluates its subscript", argv[0]))
		}
		name := argv[k]
		if i := strings.IndexByte(name, '['); i >= 0 {
			name = name[:i]
		}
		if err := a.setsName(name, n, via); err != nil {
			return err
		}
		switch argv[0] {
		case "printf", "read", "mapfile", "readarray":
			// The value is what the format builds or what is read.
			if err := a.setAtRuntime(src, name, n); err != nil {
				return err
			}
		}
	}
	return nil
}

// literalName: the name of a NAME=VALUE word whose name part (up to the
// first =) is literal and holds no subscript.
func literalName(src string, w *syntax.Word) (string, bool) {
	var b strings.Builder
	add := func(s string) (string, bool, bool) {
		if n, _, ok := strings.Cut(s, "="); ok {
			b.WriteString(n)
			name := strings.TrimSuffix(b.String(), "+")
			return name, isName(name), true
		}
		b.WriteString(s)
		return "", false, false
	}
	for _, p := range w.Parts {
		var s string
		switch p := p.(type) {
		case *syntax.Lit:
			s = p.Value
		case *syntax.SglQuoted:
			if p.Dollar {
				return "", false
			}
			s = p.Value
		case *syntax.DblQuoted:
			for _, q := range p.Parts {
				l, ok := q.(*syntax.Lit)
				if !ok {
					return "", false
				}
				if n, ok, done := add(l.Value); done {
					return n, ok
				}
			}
			continue
		default:
			return "", false
		}
		if n, ok, done := add(s); done {
			return n, ok
		}
	}
	return "", false
}

func isName(s string) bool {
	if s == "" {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !(c == '_' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || i > 0 && c >= '0' && c <= '9') {
			return false
		}
	}
	return true
}

func (a *analyzer) exempt(as *syntax.Assign) { a.exempted = append(a.exempted, as) }

// splitsOnly: builtins for which IFS in front only sets how they split
// what they read.
func splitsOnly(name string) bool {
	return name == "read" || name == "mapfile" || name == "readarray"
}

// goFlagsRun: go flags that name a program the go command runs.
func goFlagsRun(s string) bool {
	return strings.Contains(s, "exec") || strings.Contains(s, "vettool")
}

// letClause: let evaluates its arguments as arithmetic after expanding them:
// an expansion's value is evaluated too (x='a[$(rm x)]'; let "$x"), so an
// argument with an expansion is dynamic.
func (a *analyzer) letClause(src string, l *syntax.LetClause, via string) error {
	dyn := false
	for _, e := range l.Exprs {
		syntax.Walk(e, func(n syntax.Node) bool {
			switch n := n.(type) {
			case *syntax.ParamExp:
				dyn = n.Dollar.IsValid() // $x, not the name a[1]
			case *syntax.ArithmExp:
				dyn = true
			}
			return !dyn
		})
	}
	if dyn {
		return a.dynamicf(src, l, via, "`let` evaluates the value of an expansion as arithmetic (its subscripts run commands)")
	}
	return nil
}

// Values evaluated later: bash evaluates a variable's value as arithmetic
// when its name (or $name) appears in (( )), $(( )), let, a C-style for,
// the integer tests of [[ ]], an indexed array's subscript or a substring's
// offset, or when it has the integer attribute (declare -i), and it does
// so recursively: a value such as 'x[$(rm y)]' runs rm. A literal value is
// read (laterString); a value built at run time (an expansion, $'…',
// printf -v, read, mapfile, a for loop over expansions) cannot be, and a
// name that has one and is evaluated is dynamic.

// maxNames bounds the names an analysis tracks.
const maxNames = 4096

// evaluated records the names that n, an arithmetic context, evaluates.
func (a *analyzer) evaluated(src string, n syntax.Node) error {
	var err error
	syntax.Walk(n, func(n syntax.Node) bool {
		if err != nil {
			return false
		}
		switch n := n.(type) {
		case *syntax.Lit:
			if isName(n.Value) {
				err = a.track(&a.arith, n.Value, "")
			}
		case *syntax.ParamExp:
			if n.Param != nil && isName(n.Param.Value) {
				err = a.track(&a.arith, n.Param.Value, "")
			}
		case *syntax.CmdSubst:
			return false // its own commands; walked as such
		}
		return err == nil
	})
	return err
}

// setAtRuntime records that name is given a value built at run time.
func (a *analyzer) setAtRuntime(src, name string, n syntax.Node) error {
	if i := strings.IndexByte(name, '['); i >= 0 {
		name = name[:i]
	}
	if !isName(name) {
		return nil
	}
	t := clip.To(name, maxTextBytes)
	if n != nil {
		t = text(src, n)
	}
	return a.track(&a.runtime, name, t)
}

func (a *analyzer) track(m *map[string]string, name, text string) error {
	if *m == nil {
		*m = make(map[string]string, 4)
	}
	if _, ok := (*m)[name]; ok {
		return nil
	}
	if len(*m) >= maxNames {
		return fmt.Errorf("%w: more than %d variable names", errTooComplex, maxNames)
	}
	(*m)[name] = text
	return nil
}

// finish adds what only the whole command shows: a name given a value
// built at run time that bash evaluates as arithmetic.
func (a *analyzer) finish(src string) error {
	for _, name := range slices.Sorted(maps.Keys(a.arith)) {
		t, ok := a.runtime[name]
		if !ok {
			continue
		}
		return a.add(simpleCommand{Dynamic: true, Text: t,
			why: name + " holds a value built at run time that bash evaluates as arithmetic (a subscript in it runs commands)"})
	}
	return nil
}

// numeric reports whether a value that is not a literal is a number all
// the same: an arithmetic expansion or a length (${#x}).
func numeric(w *syntax.Word) bool {
	if w == nil || len(w.Parts) != 1 {
		return false
	}
	switch p := w.Parts[0].(type) {
	case *syntax.ArithmExp:
		return true
	case *syntax.ParamExp:
		return p.Length && p.Exp == nil && p.Repl == nil && p.Slice == nil
	}
	return false
}
