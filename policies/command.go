package policies

import (
	"errors"
	"fmt"
	"path"
	"slices"
	"strings"
	"sync"

	"github.com/shellbox/shellbox/internal/clip"
	"github.com/shellbox/shellbox/policies/glob"
	"github.com/shellbox/shellbox/policies/pwsh"
	"mvdan.cc/sh/v3/syntax"
)

// simpleCommand is one command a call would run, as rules see it: every
// simple command of pipelines, lists, subshells, functions and substitutions,
// and the commands that wrappers (bash -c, eval, env, xargs, find -exec,
// sudo, ...) run.
type simpleCommand struct {
	// Argv holds the words with quotes and escapes removed. A word that is
	// not a literal ($x, $(...)) is kept as written.
	Argv []string
	// Dynamic reports that the command name is not a literal: a substitution,
	// a variable, a glob, or a shell reading a script rules cannot see. A
	// static policy cannot tell what runs; the tenant's unparseable decision
	// applies.
	Dynamic bool
	// Redirects are the targets of the command's file redirections.
	Redirects []string
	// Text is the command as written (clipped), for explanations.
	Text string
	// Via names the wrapper that runs it ("bash -c", "sudo", ...), "" at
	// the top level; the innermost one when wrappers nest.
	Via string
	// why says what makes a Dynamic command unreadable, when it is not its
	// name.
	why string
	// Wrapper reports that the command only runs other commands (env, sudo,
	// bash -c, ...): those are rule-checked on their own, so a wrapper that
	// no rule matches does not take the default.
	Wrapper bool
	// opaque says why the command runs code it does not show (a script
	// file, an interpreter's program, a Makefile): a rule that names the
	// command decides; if none does, the policy's opaque decision applies
	// (and the default, when it is stricter).
	opaque string

	name string // basename of Argv[0]; for pwsh, the command it resolves to
	// pwsh: a command of a pwsh script: its name matches rules
	// case-insensitively (fold is name folded).
	pwsh bool
	fold string
}

// Bounds of the analysis. A command beyond them is unparseable.
const (
	maxCommandBytes  = 256 << 10
	maxNesting       = 256      // ( { $( ` unclosed at once
	maxOperators     = 20000    // | ; & < > and newlines
	maxPipes         = 2000     // | and & (pipelines and lists nest in the parser)
	maxInnerBytes    = 64 << 10 // a script a wrapper runs (eval chains re-parse)
	maxSimpleCmds    = 2000
	maxWrapperDepth  = 4
	maxTextBytes     = 200
	maxRedirectBytes = 4 << 10
)

var errTooComplex = errors.New("too complex to analyse")

var (
	parsers      = sync.Pool{New: func() any { return syntax.NewParser(syntax.Variant(syntax.LangBash)) }}
	posixParsers = sync.Pool{New: func() any { return syntax.NewParser(syntax.Variant(syntax.LangPOSIX)) }}
)

// dialect is the grammar of the shell that runs a script. The call itself
// runs in bash; a script handed to sh or dash is read with the POSIX
// grammar, where ((…)) is two subshells and $'…' is a $ and a quoted string.
// /bin/sh may be dash or bash, so a script for sh is read with both and
// must be readable in both.
type dialect uint8

const (
	bashOnly  dialect = iota
	posixToo          // sh: either grammar may apply
	posixOnly         // dash, ash, posh
)

// shellDialect is the dialect of the scripts the wrapper name runs: bash
// runs its own (eval, trap, source, ...); dash, ash and posh are POSIX
// shells; anything else may hand its script to /bin/sh.
func shellDialect(name string) dialect {
	switch name {
	case "bash", "rbash", "bash5", "eval", "trap", "source", ".", "alias", "mapfile", "readarray", "complete", "compgen":
		return bashOnly
	case "dash", "ash", "posh":
		return posixOnly
	}
	return posixToo
}

// analyze parses a bash command into its simple commands. An error means the
// command cannot be read statically (the unparseable decision applies).
func analyze(command string) (cmds []simpleCommand, err error) {
	if len(command) > maxCommandBytes {
		return nil, fmt.Errorf("%w: longer than %d bytes", errTooComplex, maxCommandBytes)
	}
	if err := checkShape(command); err != nil {
		return nil, err
	}
	a := &analyzer{cmds: make([]simpleCommand, 0, 4)}
	if words, ok := plainWords(command); ok {
		// A plain word list needs no parser (which allocates its nodes in
		// batches, and costs most of a decision); FuzzDecide checks that
		// both paths agree.
		lits := make([]bool, len(words))
		for i := range lits {
			lits[i] = true
		}
		sc := simpleCommand{Argv: words, Text: clip.To(strings.TrimSpace(command), maxTextBytes)}
		if err := a.namesSet(command, words, lits, nil, ""); err != nil {
			return nil, err
		}
		if err := a.wrapped(sc, lits, nil, command, 0); err != nil {
			return nil, err
		}
		if err := a.finish(command); err != nil {
			return nil, err
		}
		return a.cmds, nil
	}
	if err := a.script(command, 0, ""); err != nil {
		return nil, err
	}
	if err := a.finish(command); err != nil {
		return nil, err
	}
	return a.cmds, nil
}

// checkShape bounds the parser's work before it starts: its cost grows
// with nesting and with the number of operators, and a decision must stay
// cheap whatever a model sends. The count ignores quoting, so it
// over-estimates; a command past the bounds is unparseable (asks).
func checkShape(command string) error {
	depth, maxDepth, ops, pipes := 0, 0, 0, 0
	for i := 0; i < len(command); i++ {
		switch command[i] {
		case '(', '{', '`':
			depth++
			maxDepth = max(maxDepth, depth)
		case ')', '}':
			depth = max(depth-1, 0)
		case '|', '&':
			pipes++
			ops++
		case ';', '\n', '<', '>':
			ops++
		}
	}
	switch {
	case maxDepth > maxNesting:
		return fmt.Errorf("%w: nested more than %d deep", errTooComplex, maxNesting)
	case pipes > maxPipes:
		return fmt.Errorf("%w: more than %d | and &", errTooComplex, maxPipes)
	case ops > maxOperators:
		return fmt.Errorf("%w: more than %d operators and lines", errTooComplex, maxOperators)
	}
	return nil
}

// plainWords splits command into words if it is one simple command of
// plain words: only characters the shell gives no meaning to (no quotes,
// escapes, expansions, globs, operators, comments or newlines), not an
// assignment, not a reserved word or declaration.
func plainWords(command string) ([]string, bool) {
	if len(command) > 4096 {
		return nil, false
	}
	for i := 0; i < len(command); i++ {
		c := command[i]
		switch {
		case c >= 'a' && c <= 'z', c >= 'A' && c <= 'Z', c >= '0' && c <= '9':
		case c == ' ', c == '\t':
		case strings.IndexByte("-_./,:=+@%", c) >= 0:
		default:
			return nil, false
		}
	}
	words := strings.Fields(command)
	if len(words) == 0 || strings.Contains(words[0], "=") {
		return nil, false
	}
	switch words[0] {
	case "if", "then", "else", "elif", "fi", "do", "done", "case", "esac", "while", "until", "for", "in",
		"function", "select", "time", "coproc", "declare", "local", "export", "readonly", "typeset", "nameref", "let":
		return nil, false
	}
	return words, true
}

// analyzeParsed is analyze without the plain-words fast path, for tests.
func analyzeParsed(command string) ([]simpleCommand, error) {
	a := &analyzer{}
	if err := a.script(command, 0, ""); err != nil {
		return nil, err
	}
	if err := a.finish(command); err != nil {
		return nil, err
	}
	return a.cmds, nil
}

type analyzer struct {
	cmds       []simpleCommand
	exempted   []*syntax.Assign // prefix assignments known to be harmless (IFS= read)
	pwshBudget pwsh.Budget      // the work of the pwsh readings of one analysis
	// arith holds the names bash evaluates as arithmetic anywhere in the
	// command, runtime the names given a value built at run time (with the
	// text that sets it): one in both is dynamic (finish).
	arith, runtime map[string]string
}

func (a *analyzer) add(sc simpleCommand) error {
	if len(a.cmds) >= maxSimpleCmds {
		return fmt.Errorf("%w: more than %d simple commands", errTooComplex, maxSimpleCmds)
	}
	if len(sc.Argv) > 0 && sc.name == "" {
		sc.name = path.Base(sc.Argv[0])
	}
	if sc.pwsh {
		sc.fold = pwshFold(sc.name)
	}
	a.cmds = append(a.cmds, sc)
	return nil
}

// script parses src as bash does and adds its simple commands.
func (a *analyzer) script(src string, depth int, via string) error {
	return a.scriptAs(src, depth, via, bashOnly)
}

// scriptAs parses src in the grammar of d (both, for posixToo: a command
// either reading finds is added once) and adds its simple commands. A
// script that one grammar it may be read in cannot parse is unparseable.
func (a *analyzer) scriptAs(src string, depth int, via string, d dialect) error {
	start := len(a.cmds)
	if d != posixOnly {
		if err := a.parsed(src, depth, via, &parsers); err != nil {
			return err
		}
	}
	if d == bashOnly {
		return nil
	}
	from := len(a.cmds)
	if err := a.parsed(src, depth, via, &posixParsers); err != nil {
		return err
	}
	if d == posixOnly {
		return nil
	}
	// The bash reading's commands are the script's from start (its
	// wrappers' inner commands included); bounded by maxSimpleCmds.
	kept := a.cmds[:from]
	for i := from; i < len(a.cmds); i++ {
		if !slices.ContainsFunc(a.cmds[start:from], a.cmds[i].same) {
			kept = append(kept, a.cmds[i])
		}
	}
	a.cmds = kept
	return nil
}

// same reports whether sc and o are one simple command, for scriptAs's
// merge of two readings.
func (sc *simpleCommand) same(o simpleCommand) bool {
	return sc.Text == o.Text && sc.Via == o.Via && sc.why == o.why && sc.Dynamic == o.Dynamic &&
		sc.opaque == o.opaque && sc.Wrapper == o.Wrapper && slices.Equal(sc.Argv, o.Argv) &&
		slices.Equal(sc.Redirects, o.Redirects)
}

// parsed parses src with a parser from pool and adds its simple commands.
func (a *analyzer) parsed(src string, depth int, via string, pool *sync.Pool) (err error) {
	if depth > 0 {
		if len(src) > maxInnerBytes {
			return fmt.Errorf("%s: %w: a script longer than %d bytes", via, errTooComplex, maxInnerBytes)
		}
		if err := checkShape(src); err != nil {
			return fmt.Errorf("%s: %w", via, err)
		}
	}
	p := pool.Get().(*syntax.Parser)
	f, err := p.Parse(strings.NewReader(src), "")
	// A parser that failed may hold state from the half-parsed input; only
	// clean ones are reused.
	if err == nil {
		pool.Put(p)
	}
	if err != nil {
		if depth > 0 {
			return fmt.Errorf("%s: %w", via, err)
		}
		return err
	}
	var werr error
	syntax.Walk(f, func(n syntax.Node) bool {
		if werr != nil {
			return false
		}
		switch n := n.(type) {
		case *syntax.Stmt:
			werr = a.stmt(src, n, depth, via)
		case *syntax.Word:
			werr = a.laterString(src, n, depth)
		case *syntax.ParamExp:
			werr = a.paramExp(src, n, via)
			if werr == nil && n.Index != nil {
				werr = a.evaluated(src, n.Index)
			}
			if werr == nil && n.Slice != nil && n.Slice.Offset != nil {
				werr = a.evaluated(src, n.Slice.Offset)
			}
			if werr == nil && n.Slice != nil && n.Slice.Length != nil {
				werr = a.evaluated(src, n.Slice.Length)
			}
		case *syntax.Assign:
			werr = a.assign(src, n, depth, via)
			if werr == nil && n.Index != nil {
				werr = a.evaluated(src, n.Index)
			}
		case *syntax.DeclClause:
			werr = a.declClause(src, n, via)
		case *syntax.LetClause:
			werr = a.letClause(src, n, via)
			for _, e := range n.Exprs {
				if werr == nil {
					werr = a.evaluated(src, e)
				}
			}
		case *syntax.WordIter:
			if n.Name != nil {
				werr = a.setsName(n.Name.Value, n, via)
				for _, w := range n.Items {
					if _, lit := wordValue(src, w); !lit && werr == nil {
						werr = a.setAtRuntime(src, n.Name.Value, n)
					}
				}
			}
		case *syntax.ArithmCmd, *syntax.ArithmExp, *syntax.CStyleLoop:
			werr = a.evaluated(src, n)
		case *syntax.BinaryTest:
			if n.Op >= syntax.TsEql && n.Op <= syntax.TsGtr { // -eq -ne -le -ge -lt -gt
				if werr = a.evaluated(src, n.X); werr == nil {
					werr = a.evaluated(src, n.Y)
				}
			}
		case *syntax.UnaryTest:
			if n.Op == syntax.TsVarSet {
				if w, ok := n.X.(*syntax.Word); ok {
					if _, lit := wordValue(src, w); !lit {
						werr = a.dynamicf(src, n, via, "`-v` is given a name that is not a literal; bash evaluates its subscript")
					}
				}
			}
		}
		return werr == nil
	})
	return werr
}

// stmt adds the simple command of st, if it is one, with its redirections
// and what it wraps. Walk goes on into st's children (substitutions, bodies).
func (a *analyzer) stmt(src string, st *syntax.Stmt, depth int, via string) error {
	var redirs []string
	var stdin *syntax.Redirect // where a shell without -c would read its script
	for _, r := range st.Redirs {
		switch r.Op {
		case syntax.Hdoc, syntax.DashHdoc, syntax.WordHdoc:
			stdin = r
			continue
		case syntax.RdrIn:
			stdin = r
		case syntax.DplIn, syntax.DplOut:
			if r.Word != nil {
				if v, lit := wordValue(src, r.Word); lit && (v == "-" || isDigits(v)) {
					continue
				}
			}
		}
		if r.Word != nil {
			v, _ := wordValue(src, r.Word)
			redirs = append(redirs, clip.To(v, maxRedirectBytes))
		}
	}
	call, ok := st.Cmd.(*syntax.CallExpr)
	if !ok || len(call.Args) == 0 {
		if len(redirs) > 0 {
			// A redirection on its own (> file) or on a compound command:
			// only redirect rules can match it.
			return a.add(simpleCommand{Redirects: redirs, Text: text(src, st), Via: via, Wrapper: true})
		}
		return nil
	}
	sc := simpleCommand{Redirects: redirs, Text: text(src, call), Via: via}
	lits := make([]bool, len(call.Args))
	for i, w := range call.Args {
		v, lit := wordValue(src, w)
		sc.Argv = append(sc.Argv, v)
		lits[i] = lit && !expandsBraces(w) && !expandsTilde(w, false, 0)
		if at := assignLike(w); i > 0 && at >= 0 {
			lits[i] = lits[i] && !expandsTilde(w, true, at)
		}
	}
	if !lits[0] && expandsTilde(call.Args[0], false, 0) {
		// ~/bin/rm: the directory is unknown, the name is not.
		if v, lit := wordValue(src, call.Args[0]); lit && !expandsBraces(call.Args[0]) {
			if name, ok := tildeName(v); ok {
				sc.name, lits[0] = name, true
			} else {
				sc.why = fmt.Sprintf("the command name `%s` is a tilde expansion, which an earlier statement may set", clip.To(v, 80))
			}
		}
	}
	sc.Dynamic = !lits[0] || isPattern(call.Args[0])
	if !sc.Dynamic {
		if err := a.namesSet(src, sc.Argv, lits, call, via); err != nil {
			return err
		}
	}
	for _, as := range call.Assigns {
		// A command run with its lookup or loader changed is not the command
		// its name says.
		if as.Name == nil || sensitiveVar(as.Name.Value) == 0 {
			continue
		}
		if as.Name.Value == "IFS" && !sc.Dynamic && lits[0] && splitsOnly(sc.Argv[0]) {
			// IFS= read -r line: IFS only tells read how to split.
			a.exempt(as)
			continue
		}
		if sensitiveVar(as.Name.Value) == varHijack {
			sc.Dynamic = true
			sc.why = fmt.Sprintf("%s assigned in front of a command changes which program runs", as.Name.Value)
		}
	}
	if sc.Dynamic {
		return a.add(sc)
	}
	return a.wrapped(sc, lits, stdin, src, depth)
}

// wrapped adds sc and, if sc is a wrapper, the commands it runs.
func (a *analyzer) wrapped(sc simpleCommand, lits []bool, stdin *syntax.Redirect, src string, depth int) error {
	name := path.Base(sc.Argv[0])
	in := unwrap(name, sc.Argv, lits)
	if in.kind == notWrapper {
		return a.add(sc)
	}
	if in.kind == shellStdin || in.kind == pwshStdin {
		in = stdinScript(src, stdin, in.kind == pwshStdin)
	}
	if in.kind == opaqueCode {
		sc.opaque = in.why
		return a.add(sc)
	}
	sc.Wrapper = in.kind != runsExec && !in.acts // find -exec: find itself acts too
	if err := a.add(sc); err != nil {
		return err
	}
	via := name
	if in.via != "" {
		via = name + " " + in.via
	}
	if depth+1 > maxWrapperDepth {
		return a.add(simpleCommand{Dynamic: true, Text: sc.Text, Via: sc.Via,
			why: fmt.Sprintf("wrappers nest deeper than %d levels", maxWrapperDepth)})
	}
	switch in.kind {
	case dynamicInner:
		return a.add(simpleCommand{Dynamic: true, Text: sc.Text, Via: sc.Via, why: "`" + via + "` " + in.why})
	case runsScript:
		for _, s := range in.scripts {
			if err := a.scriptAs(s, depth+1, via, shellDialect(name)); err != nil {
				return err
			}
		}
	case runsPwsh:
		for _, s := range in.scripts {
			if err := a.pwshScript(s, depth+1, via); err != nil {
				return err
			}
		}
	case runsArgv, runsExec:
		for _, inner := range in.argvs {
			isc := simpleCommand{Argv: inner.argv, Text: clip.To(strings.Join(inner.argv, " "), maxTextBytes), Via: via}
			if !inner.lits[0] || glob.IsPattern(inner.argv[0]) {
				isc.Dynamic = true
				if err := a.add(isc); err != nil {
					return err
				}
				continue
			}
			if err := a.namesSet(src, inner.argv, inner.lits, nil, via); err != nil {
				return err
			}
			// The inner command reads the wrapper's standard input, except
			// under xargs and find, which give it none of theirs.
			innerStdin := stdin
			if in.kind == runsExec || name == "xargs" {
				innerStdin = nil
			}
			if err := a.wrapped(isc, inner.lits, innerStdin, src, depth+1); err != nil {
				return err
			}
		}
	}
	return nil
}

// stdinScript is what a shell without -c runs: a here-document or here-string
// it can read (a pwsh script if pwsh), else a script rules cannot see.
func stdinScript(src string, r *syntax.Redirect, pwsh bool) inner {
	dyn := inner{kind: dynamicInner, why: "runs a script from standard input that the command does not show"}
	if r == nil {
		return dyn
	}
	var (
		v   string
		lit bool
	)
	switch {
	case (r.Op == syntax.Hdoc || r.Op == syntax.DashHdoc) && r.Hdoc != nil:
		v, lit = hdocValue(src, r.Hdoc, quotedDelim(r.Word))
	case r.Op == syntax.WordHdoc && r.Word != nil:
		v, lit = wordValue(src, r.Word)
	}
	if !lit {
		return dyn
	}
	if pwsh {
		return inner{kind: runsPwsh, scripts: []string{v}, via: "<<"}
	}
	return inner{kind: runsScript, scripts: []string{v}, via: "<<"}
}

// hdocValue is a here-document body's text as the shell passes it on:
// parts other than literals make it unknowable (the shell expands them
// before running it). Unless its delimiter is quoted, the body goes through
// the shell's backslash layer first: backslash-newline is removed and \$
// \` \\ lose their backslash (bash <<EOF with r\\m inside runs r\m, which
// is rm); the parser leaves them in the literal raw.
func hdocValue(src string, w *syntax.Word, quoted bool) (string, bool) {
	var b strings.Builder
	for _, p := range w.Parts {
		l, ok := p.(*syntax.Lit)
		if !ok {
			return source(src, w), false
		}
		if quoted {
			b.WriteString(l.Value)
		} else {
			b.WriteString(unescape(l.Value, quotesInHeredoc))
		}
	}
	return b.String(), true
}

// quotedDelim reports whether a here-document's delimiter word has any
// quoting (<<'EOF', <<"EOF", <<E\OF): then its body is taken as written.
func quotedDelim(w *syntax.Word) bool {
	if w == nil {
		return false
	}
	for _, p := range w.Parts {
		l, ok := p.(*syntax.Lit)
		if !ok || strings.IndexByte(l.Value, '\\') >= 0 {
			return true
		}
	}
	return false
}

// wordValue is w with quotes and escapes removed, and whether it is a
// literal. A non-literal word is returned as written.
func wordValue(src string, w *syntax.Word) (string, bool) {
	var b strings.Builder
	for _, p := range w.Parts {
		switch p := p.(type) {
		case *syntax.Lit:
			b.WriteString(unescape(p.Value, quotesAny))
		case *syntax.SglQuoted:
			if p.Dollar {
				return source(src, w), false // $'...': ANSI-C escapes
			}
			b.WriteString(p.Value)
		case *syntax.DblQuoted:
			for _, q := range p.Parts {
				l, ok := q.(*syntax.Lit)
				if !ok {
					return source(src, w), false
				}
				b.WriteString(unescape(l.Value, quotesInDbl))
			}
		default:
			return source(src, w), false
		}
	}
	return b.String(), true
}

// Which characters a backslash quotes, by context (a backslash before
// newline is a line continuation in all three).
const (
	quotesAny       = ""       // outside quotes: every character
	quotesInDbl     = "$`\"\\" // inside double quotes
	quotesInHeredoc = "$`\\"   // in an unquoted here-document's body
)

// unescape removes one backslash layer from s: a backslash before newline
// goes with it, one before a character of quotable (any, with quotesAny)
// leaves that character, any other stays.
func unescape(s, quotable string) string {
	if !strings.Contains(s, `\`) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c != '\\' || i+1 == len(s) {
			b.WriteByte(c)
			continue
		}
		n := s[i+1]
		switch {
		case n == '\n':
			i++ // line continuation
		case quotable == quotesAny || strings.IndexByte(quotable, n) >= 0:
			b.WriteByte(n)
			i++
		default:
			b.WriteByte(c)
		}
	}
	return b.String()
}

// isPattern reports whether a command-name word would be expanded by the
// shell as a glob or a brace expansion, so the name is not what it reads.
// The word is judged whole, as bash expands it: its literal and quoted
// parts joined, the quoted characters inert: `{r""m,x}` and `r""{m,}` are
// brace expansions and `/bin/r""[m]` a glob, though no literal part alone
// is one.
func isPattern(w *syntax.Word) bool { return litHasAny(w, "*?[{") && glob.IsPattern(patternShape(w)) }

// expandsBraces reports whether bash brace-expands the word into other
// words: then it is not the literal its quotes and escapes removed read
// (bash -c {'rm x',} runs rm x).
func expandsBraces(w *syntax.Word) bool { return litHasAny(w, "{") && glob.HasBrace(patternShape(w)) }

// litHasAny reports whether a literal part of w holds one of chars: the
// patterns' and expansions' characters are unquoted only there.
func litHasAny(w *syntax.Word, chars string) bool {
	for _, p := range w.Parts {
		if l, ok := p.(*syntax.Lit); ok && strings.ContainsAny(l.Value, chars) {
			return true
		}
	}
	return false
}

// patternShape is w as the shell's pattern and brace expansion see it: the
// unquoted characters as written, every quoted or escaped one (and every
// expansion) replaced by an inert NUL.
func patternShape(w *syntax.Word) string {
	var b strings.Builder
	inert := func(s string) {
		for range len(s) {
			b.WriteByte(0)
		}
	}
	for _, p := range w.Parts {
		switch p := p.(type) {
		case *syntax.Lit:
			for i := 0; i < len(p.Value); i++ {
				if p.Value[i] == '\\' && i+1 < len(p.Value) {
					b.WriteByte(0)
					i++
					continue
				}
				b.WriteByte(p.Value[i])
			}
		case *syntax.SglQuoted:
			inert(p.Value)
		default:
			b.WriteByte(0)
		}
	}
	return b.String()
}

// expandsTilde reports whether bash tilde-expands w: an unquoted ~ at its
// start (~, ~/x, ~-, ~+, ~user) and, in an assignment's value (assign),
// after each unquoted : too. The expansion is $HOME, $OLDPWD, $PWD or a
// home directory, which an earlier statement may set (HOME=/usr/bin/rm;
// ~ x), so the word is not a literal. from is where the value starts (after
// NAME= in an argument bash treats as an assignment).
func expandsTilde(w *syntax.Word, assign bool, from int) bool {
	if !litHasAny(w, "~") {
		return false
	}
	shape := patternShape(w)
	stops := "/"
	if assign {
		stops = "/:"
	}
	for pos := from; pos < len(shape); {
		if shape[pos] == '~' {
			end := strings.IndexAny(shape[pos:], stops)
			if end < 0 {
				end = len(shape) - pos
			}
			if strings.IndexByte(shape[pos:pos+end], 0) < 0 {
				return true // no quoted character in the tilde prefix
			}
		}
		next := strings.IndexByte(shape[pos:], ':')
		if !assign || next < 0 {
			return false
		}
		pos += next + 1
	}
	return false
}

// assignLike is where the value of an argument word of the form NAME=...
// starts, or -1: bash (outside POSIX mode) tilde-expands such a word after
// its = and each : as an assignment (echo a=~).
func assignLike(w *syntax.Word) int {
	if len(w.Parts) == 0 {
		return -1
	}
	l, ok := w.Parts[0].(*syntax.Lit)
	if !ok {
		return -1
	}
	n, _, ok := strings.Cut(l.Value, "=")
	if !ok || !isName(strings.TrimSuffix(n, "+")) {
		return -1
	}
	return len(n) + 1
}

// tildeName is the command name of a tilde-expanded command word whose
// last path element follows the tilde prefix (~/bin/rm is an rm whatever
// HOME is); ok is false when the expansion is the name itself (~, ~-,
// ~user, ~/..).
func tildeName(v string) (string, bool) {
	i := strings.IndexByte(v, '/')
	t := strings.TrimRight(v, "/")
	if i < 0 || strings.LastIndexByte(t, '/') < i {
		return "", false
	}
	b := path.Base(t)
	return b, b != "." && b != ".."
}

func isDigits(s string) bool {
	if s == "" {
		return false
	}
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return false
		}
	}
	return true
}

// source is n as written in src.
func source(src string, n syntax.Node) string {
	s, e := int(n.Pos().Offset()), int(n.End().Offset())
	if s < 0 || e > len(src) || s > e {
		return ""
	}
	return src[s:e]
}

func text(src string, n syntax.Node) string { return clip.To(source(src, n), maxTextBytes) }
