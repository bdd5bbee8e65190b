package policies

import (
	"errors"
	"fmt"
	"strings"
	"unicode"
	"unicode/utf8"
)

// PowerShell analysis: a pwsh command (what `pwsh -NoProfile -NonInteractive
// -Command <command>` runs) read into the simple commands rules match, with
// the safety stance of the bash analysis: every command in pipelines,
// statement lists, blocks, subexpressions and strings is found, whether or
// not it runs; what cannot be read statically is dynamic or unparseable,
// never allowed.
//
// There is no maintained PowerShell parser in Go, so this is a bounded
// recursive-descent reader that follows PowerShell's own tokenizer
// (src/System.Management.Automation/engine/parser/tokenizer.cs and
// CharTraits.cs) where it decides what a token is: which characters end a
// bare word, how quotes (smart quotes too), backtick escapes, here-strings,
// comments and $(...) inside strings are scanned, and when a pipeline
// element is an expression rather than a command. It is permissive where
// PowerShell would report an error and nothing would run, and strict where
// a mistake could hide a command: a construct it does not know is an error
// (the unparseable decision), never skipped.

// maxPwshWork bounds the bytes read by one analysis, re-reads included: a
// $(...) in a string is read again as a script, and a script that defines
// aliases is read twice.
const maxPwshWork = 4 << 20

// maxPwshSteps bounds the turns of the reader's loops in one analysis.
const maxPwshSteps = 4 << 20

// pwshSession is the state a pwsh process shares between its scripts
// (Invoke-Expression runs in it; pwsh -Command starts a new one).
type pwshSession struct {
	// aliases are the literal alias definitions of the script (Set-Alias,
	// New-Alias): folded name → targets as written.
	aliases map[string][]string
	// namespaces are those of `using namespace`: [Process] is
	// [System.Diagnostics.Process] after `using namespace System.Diagnostics`.
	namespaces []string
}

const (
	maxPwshAliases      = 64
	maxPwshAliasTargets = 8
)

func (s *pwshSession) define(name, target string) error {
	k := pwshFold(name)
	if s.aliases == nil {
		s.aliases = map[string][]string{}
	}
	ts, ok := s.aliases[k]
	if !ok && len(s.aliases) >= maxPwshAliases {
		return fmt.Errorf("%w: more than %d aliases defined", errTooComplex, maxPwshAliases)
	}
	for _, t := range ts {
		if pwshFold(t) == pwshFold(target) {
			return nil
		}
	}
	if len(ts) >= maxPwshAliasTargets {
		return fmt.Errorf("%w: alias %s defined more than %d times", errTooComplex, clip(name, 40), maxPwshAliasTargets)
	}
	s.aliases[k] = append(ts, target)
	return nil
}

// analyzePwsh parses a pwsh command into its simple commands. An error
// means the command cannot be read statically (the unparseable decision
// applies).
func analyzePwsh(command string) ([]simpleCommand, error) {
	if len(command) > maxCommandBytes {
		return nil, fmt.Errorf("%w: longer than %d bytes", errTooComplex, maxCommandBytes)
	}
	a := &analyzer{cmds: make([]simpleCommand, 0, 4)}
	if err := a.pwshScript(command, 0, ""); err != nil {
		return nil, err
	}
	return a.cmds, nil
}

// pwshScript adds the simple commands of src, run by a pwsh process of its
// own (the pwsh tool, pwsh -Command) under depth wrappers.
func (a *analyzer) pwshScript(src string, depth int, via string) error {
	if depth > 0 && len(src) > maxInnerBytes {
		return fmt.Errorf("%s: %w: a script longer than %d bytes", via, errTooComplex, maxInnerBytes)
	}
	if strings.IndexByte(src, 0) >= 0 {
		return errors.New("pwsh: the command contains a NUL character")
	}
	sess := &pwshSession{}
	mark := len(a.cmds)
	if err := a.pwshParse(src, depth, via, sess); err != nil {
		return err
	}
	if len(sess.aliases) > 0 {
		// An alias applies wherever it is used, also before its definition
		// in the text (a function defined first, called later): read the
		// script again with every definition known.
		a.cmds = a.cmds[:mark]
		if err := a.pwshParse(src, depth, via, sess); err != nil {
			return err
		}
	}
	return nil
}

func (a *analyzer) pwshParse(src string, depth int, via string, sess *pwshSession) error {
	p := &pwshParser{a: a, sess: sess, src: src, depth: depth, via: via}
	if !p.charge(len(src)) {
		return p.err
	}
	p.stmts(0)
	if p.err != nil {
		if via != "" {
			return fmt.Errorf("%s: %w", via, p.err)
		}
		return p.err
	}
	return nil
}

// pwshParser reads one script (or the text of one $(...) in a string). On
// the first error it records it and jumps to the end of its input, so every
// loop ends.
type pwshParser struct {
	a     *analyzer
	sess  *pwshSession
	src   string
	pos   int
	nest  int // constructs open at once (bounds the recursion)
	depth int // wrappers around the script (Invoke-Expression, pwsh -c, ...)
	via   string
	err   error
}

func (p *pwshParser) charge(n int) bool {
	p.a.pwshWork += n
	if p.a.pwshWork > maxPwshWork {
		p.fail(fmt.Errorf("%w: more than %d bytes to read", errTooComplex, maxPwshWork))
		return false
	}
	return true
}

func (p *pwshParser) fail(err error) {
	if p.err == nil {
		p.err = err
	}
	p.pos = len(p.src)
}

func (p *pwshParser) failf(format string, args ...any) {
	if p.err != nil {
		return
	}
	line, col := 1, 1
	for _, r := range p.src[:min(p.pos, len(p.src))] {
		if r == '\n' {
			line, col = line+1, 1
		} else {
			col++
		}
	}
	p.fail(fmt.Errorf("pwsh: %d:%d: %s", line, col, fmt.Sprintf(format, args...)))
}

// step counts one turn of a loop of the reader against maxPwshSteps: every
// turn reads something, and this bound makes sure of it.
func (p *pwshParser) step() bool {
	p.a.pwshSteps++
	if p.a.pwshSteps > maxPwshSteps {
		p.fail(fmt.Errorf("%w: more than %d steps", errTooComplex, maxPwshSteps))
		return false
	}
	return true
}

func (p *pwshParser) enter() bool {
	if p.nest >= maxNesting {
		p.fail(fmt.Errorf("%w: nested more than %d deep", errTooComplex, maxNesting))
		return false
	}
	p.nest++
	return true
}

func (p *pwshParser) leave() { p.nest-- }

// add adds a simple command found in the script.
func (p *pwshParser) add(sc simpleCommand) {
	if p.err != nil {
		return
	}
	if err := p.a.add(sc); err != nil {
		p.fail(err)
	}
}

// dynamicf adds a command rules cannot read, spanning start to here.
func (p *pwshParser) dynamicf(start int, format string, args ...any) {
	end := max(p.pos, start)
	p.add(simpleCommand{Dynamic: true, Text: clip(strings.TrimSpace(p.src[start:min(end, len(p.src))]), maxTextBytes),
		Via: p.via, pwsh: true, why: fmt.Sprintf(format, args...)})
}

// sub reads text (the inside of a $(...) in a string or word) as
// statements of this script.
func (p *pwshParser) sub(text string) {
	if p.err != nil || !p.enter() {
		return
	}
	defer p.leave()
	c := &pwshParser{a: p.a, sess: p.sess, src: text, nest: p.nest, depth: p.depth, via: p.via}
	if !c.charge(len(text)) {
		p.fail(c.err)
		return
	}
	c.stmts(0)
	if c.err != nil {
		p.fail(c.err)
	}
}

// Characters, as PowerShell classifies them.

func (p *pwshParser) eof() bool { return p.pos >= len(p.src) }

// at is the rune at byte offset i and its size (0, 0 past the end).
func (p *pwshParser) at(i int) (rune, int) {
	if i >= len(p.src) || i < 0 {
		return 0, 0
	}
	if c := p.src[i]; c < utf8.RuneSelf {
		return rune(c), 1
	}
	return utf8.DecodeRuneInString(p.src[i:])
}

func (p *pwshParser) peek() rune { r, _ := p.at(p.pos); return r }

// peek2 is the rune after the current one.
func (p *pwshParser) peek2() rune {
	_, n := p.at(p.pos)
	r, _ := p.at(p.pos + n)
	return r
}

func (p *pwshParser) advance() {
	_, n := p.at(p.pos)
	p.pos += max(n, 1)
}

func (p *pwshParser) hasPrefix(s string) bool { return strings.HasPrefix(p.src[p.pos:], s) }

func isPwshSpace(r rune) bool {
	switch r {
	case ' ', '\t', '\v', '\f', 0xa0, 0x85:
		return true
	}
	return r > 0xff && unicode.In(r, unicode.Zs, unicode.Zl, unicode.Zp)
}

func isNewline(r rune) bool { return r == '\n' || r == '\r' }

// pwshForceStart: the character ends a bare word (ForceStartNewToken). 0
// is the end of the input.
func pwshForceStart(r rune) bool {
	switch r {
	case 0, '\n', '\r', '&', '(', ')', ',', ';', '{', '|', '}':
		return true
	}
	return isPwshSpace(r)
}

func isDash(r rune) bool { return r == '-' || r == 0x2013 || r == 0x2014 || r == 0x2015 }

func isSQ(r rune) bool { return r == '\'' || r == 0x2018 || r == 0x2019 || r == 0x201a || r == 0x201b }

func isDQ(r rune) bool { return r == '"' || r == 0x201c || r == 0x201d || r == 0x201e }

func isDigit(r rune) bool { return r >= '0' && r <= '9' }

func isIdentStart(r rune) bool {
	return r == '_' || (r < 128 && (r|0x20 >= 'a' && r|0x20 <= 'z')) || (r >= 128 && unicode.IsLetter(r))
}

func isIdentFollow(r rune) bool {
	return isIdentStart(r) || isDigit(r) || (r >= 128 && unicode.IsDigit(r))
}

// pwshVarStart: the character can follow $ in a variable name.
func pwshVarStart(r rune) bool {
	switch {
	case r < 128:
		return isIdentFollow(r) || r == '$' || r == ':' || r == '?' || r == '^'
	}
	return unicode.IsLetter(r) || unicode.IsDigit(r)
}

// skipSpace skips whitespace, line continuations and comments, and newlines
// too if nl.
func (p *pwshParser) skipSpace(nl bool) {
	for !p.eof() {
		r, n := p.at(p.pos)
		switch {
		case isPwshSpace(r):
			p.pos += n
		case isNewline(r):
			if !nl {
				return
			}
			p.pos += n
		case r == '`':
			r2, n2 := p.at(p.pos + 1)
			if !(isNewline(r2) || isPwshSpace(r2)) {
				return
			}
			p.pos += 1 + n2
			if r2 == '\r' && p.peek() == '\n' {
				p.pos++
			}
		case r == '#':
			for !p.eof() && !isNewline(p.peek()) {
				p.advance()
			}
		case r == '<' && p.peek2() == '#':
			end := strings.Index(p.src[p.pos+2:], "#>")
			if end < 0 {
				p.failf("missing #> of a <# comment")
				return
			}
			p.pos += 2 + end + 2
		default:
			return
		}
	}
}

// Statements.

// stmts reads statements up to close (')' or '}'; 0: the end of the
// input), which it leaves unread.
func (p *pwshParser) stmts(close rune) {
	for p.err == nil && p.step() {
		p.skipSpace(true)
		if p.eof() {
			if close != 0 {
				p.failf("missing closing %q", close)
			}
			return
		}
		r := p.peek()
		switch {
		case r == ';':
			p.pos++
			continue
		case r == close:
			return
		case r == ')' || r == '}' || r == ']':
			p.failf("unexpected %q", r)
			return
		}
		start := p.pos
		p.statement()
		if p.err == nil && p.pos == start {
			p.failf("unexpected %q", p.peek())
		}
	}
}

// expect reads r or fails.
func (p *pwshParser) expect(r rune, what string) {
	if p.err != nil {
		return
	}
	if p.peek() != r {
		p.failf("missing %q %s", r, what)
		return
	}
	p.advance()
}

func (p *pwshParser) statement() {
	if !p.enter() {
		return
	}
	defer p.leave()
	p.skipSpace(false)
	if p.peek() == ':' && isIdentStart(p.peek2()) { // a loop label
		p.pos++
		for isIdentFollow(p.peek()) {
			p.advance()
		}
		p.skipSpace(true)
	}
	if kw, end := p.keyword(); kw != "" && p.keywordStatement(kw, end) {
		return
	}
	p.pipelineChain()
}

// keyword is the folded word at the current position if it could be a
// keyword (a word followed by a character that ends a token), and where it
// ends.
func (p *pwshParser) keyword() (string, int) {
	if !isIdentStart(p.peek()) {
		return "", 0
	}
	i := p.pos
	for {
		r, n := p.at(i)
		if n == 0 || !isIdentFollow(r) {
			break
		}
		i += n
	}
	if r, _ := p.at(i); !pwshForceStart(r) {
		return "", 0
	}
	return pwshFold(p.src[p.pos:i]), i
}

// keywordStatement reads the statement keyword kw starts, reporting false
// when kw starts none (the word is a command).
func (p *pwshParser) keywordStatement(kw string, end int) bool {
	switch kw {
	case "if":
		p.pos = end
		p.cond()
		p.body()
		for p.err == nil && p.step() {
			save := p.pos
			p.skipSpace(true)
			switch k, e := p.keyword(); k {
			case "elseif":
				p.pos = e
				p.cond()
				p.body()
				continue
			case "else":
				p.pos = e
				p.body()
			default:
				p.pos = save
			}
			break
		}
	case "switch":
		p.pos = end
		p.switchStatement()
	case "foreach":
		p.pos = end
		p.options()
		p.skipSpace(true)
		p.expect('(', "after foreach")
		p.skipSpace(true)
		if p.peek() != '$' {
			p.failf("missing the variable of foreach")
			return true
		}
		p.pos++
		p.varName()
		p.skipSpace(true)
		if k, e := p.keyword(); k != "in" {
			p.failf("missing 'in' in foreach")
		} else {
			p.pos = e
		}
		p.stmts(')')
		p.expect(')', "of foreach")
		p.body()
	case "for", "while":
		p.pos = end
		p.cond()
		p.body()
	case "do":
		p.pos = end
		p.body()
		p.skipSpace(true)
		if k, e := p.keyword(); k == "while" || k == "until" {
			p.pos = e
			p.cond()
		} else {
			p.failf("missing while or until after do")
		}
	case "function", "filter":
		p.pos = end
		p.skipSpace(false)
		if name, _ := p.generic(); name == "" {
			p.failf("missing the name of a function")
			return true
		}
		p.skipSpace(true)
		if p.peek() == '(' {
			p.pos++
			p.paramList()
		}
		p.body()
	case "return", "throw", "exit":
		p.pos = end
		p.skipSpace(false)
		if !p.atStatementEnd() {
			p.pipelineChain()
		}
	case "break", "continue":
		p.pos = end
		p.skipSpace(false)
		if !p.atStatementEnd() {
			if isIdentStart(p.peek()) {
				p.generic() // a label
			} else {
				p.expr(false)
			}
		}
	case "trap":
		p.pos = end
		p.skipSpace(false)
		if p.peek() == '[' {
			p.typeLiteral()
		}
		p.body()
	case "try":
		p.pos = end
		p.body()
		for p.err == nil && p.step() {
			save := p.pos
			p.skipSpace(true)
			k, e := p.keyword()
			if k == "catch" {
				p.pos = e
				for p.err == nil && p.step() {
					p.skipSpace(false)
					if p.peek() != '[' {
						break
					}
					p.typeLiteral()
					p.skipSpace(true)
					if p.peek() == ',' {
						p.pos++
						p.skipSpace(true)
					}
				}
				p.body()
				continue
			}
			if k == "finally" {
				p.pos = e
				p.body()
			} else {
				p.pos = save
			}
			break
		}
	case "data":
		p.pos = end
		p.skipSpace(false)
		if isIdentStart(p.peek()) {
			p.generic()
			p.skipSpace(false)
		}
		if isDash(p.peek()) { // -SupportedCommand a, b
			p.parameter()
			for p.err == nil && p.step() {
				p.skipSpace(false)
				p.argument()
				p.skipSpace(false)
				if p.peek() != ',' {
					break
				}
				p.pos++
				p.skipSpace(true)
			}
		}
		p.body()
	case "class":
		p.pos = end
		p.classStatement()
	case "enum":
		p.pos = end
		p.enumStatement()
	case "using":
		p.pos = end
		p.usingStatement(end)
	case "param":
		p.pos = end
		p.skipSpace(true)
		p.expect('(', "after param")
		p.paramList()
	case "begin", "process", "end", "dynamicparam", "clean":
		// Named blocks of a script block; elsewhere the word is a command.
		save := p.pos
		p.pos = end
		p.skipSpace(true)
		if p.peek() != '{' {
			p.pos = save
			return false
		}
		p.block()
	case "workflow", "configuration", "parallel", "sequence", "inlinescript", "from", "define", "var",
		"else", "elseif", "catch", "finally", "until":
		p.failf("%s is not supported here", kw)
	default:
		return false
	}
	return true
}

func (p *pwshParser) atStatementEnd() bool {
	r := p.peek()
	return p.eof() || isNewline(r) || r == ';' || r == ')' || r == '}'
}

// options skips the -options of a statement (switch -regex, foreach
// -parallel).
func (p *pwshParser) options() {
	for p.err == nil && p.step() {
		p.skipSpace(false)
		if !isDash(p.peek()) {
			return
		}
		p.advance()
		for isIdentFollow(p.peek()) {
			p.advance()
		}
	}
}

// cond reads a parenthesized condition: ( statements ).
func (p *pwshParser) cond() {
	p.skipSpace(true)
	p.expect('(', "of a condition")
	if p.err != nil || !p.enter() {
		return
	}
	p.stmts(')')
	p.expect(')', "of a condition")
	p.leave()
}

// body reads a required { block }.
func (p *pwshParser) body() {
	p.skipSpace(true)
	if p.err == nil && p.peek() != '{' {
		p.failf("missing '{'")
		return
	}
	p.block()
}

func (p *pwshParser) switchStatement() {
	file := false
	for p.err == nil && p.step() {
		p.skipSpace(false)
		if !isDash(p.peek()) {
			break
		}
		el := p.parameter()
		if el.param != "" && strings.HasPrefix("file", el.param) {
			p.skipSpace(false)
			p.argument()
			file = true
		}
	}
	if !file {
		p.cond()
	}
	p.skipSpace(true)
	p.expect('{', "of switch")
	if p.err != nil || !p.enter() {
		return
	}
	defer p.leave()
	for p.err == nil && p.step() {
		p.skipSpace(true)
		switch p.peek() {
		case ';':
			p.pos++
			continue
		case '}':
			p.pos++
			return
		case '{':
			p.block()
		default:
			if p.eof() {
				p.failf("missing '}' of switch")
				return
			}
			p.argument()
		}
		p.body()
	}
}

func (p *pwshParser) classStatement() {
	p.skipSpace(false)
	if name, _ := p.generic(); name == "" {
		p.failf("missing the name of a class")
		return
	}
	p.skipSpace(true)
	if p.peek() == ':' { // base class and interfaces
		p.pos++
		for p.err == nil && p.step() {
			p.skipSpace(true)
			if p.peek() == '[' {
				p.typeLiteral()
			} else if p.typeName(true) == "" {
				return
			}
			p.skipSpace(true)
			if p.peek() != ',' {
				break
			}
			p.pos++
		}
	}
	p.skipSpace(true)
	p.expect('{', "of a class")
	if p.err != nil || !p.enter() {
		return
	}
	defer p.leave()
	for p.err == nil && p.step() {
		p.skipSpace(true)
		switch r := p.peek(); {
		case r == ';':
			p.pos++
			continue
		case r == '}':
			p.pos++
			return
		case p.eof():
			p.failf("missing '}' of a class")
			return
		}
		// Attributes, types and modifiers, then a property or a method.
		for p.err == nil && p.step() {
			if p.peek() == '[' {
				p.typeLiteral()
			} else if k, e := p.keyword(); k == "static" || k == "hidden" {
				p.pos = e
			} else {
				break
			}
			p.skipSpace(true)
		}
		switch r := p.peek(); {
		case r == '$':
			p.pos++
			p.varName()
			p.skipSpace(false)
			if p.peek() == '=' {
				p.pos++
				p.skipSpace(true)
				p.expr(false)
			}
		case isIdentStart(r):
			for isIdentFollow(p.peek()) {
				p.advance()
			}
			p.skipSpace(false)
			p.expect('(', "of a method")
			p.paramList()
			p.skipSpace(true)
			if p.peek() == ':' { // : base(...)
				p.pos++
				p.skipSpace(false)
				for isIdentFollow(p.peek()) {
					p.advance()
				}
				p.skipSpace(false)
				p.expect('(', "of a base call")
				p.callArgs()
			}
			p.body()
		default:
			p.failf("unexpected %q in a class", r)
		}
	}
}

func (p *pwshParser) enumStatement() {
	p.skipSpace(false)
	if name, _ := p.generic(); name == "" {
		p.failf("missing the name of an enum")
		return
	}
	p.skipSpace(true)
	if p.peek() == ':' {
		p.pos++
		p.skipSpace(false)
		p.typeName(true)
		p.skipSpace(true)
	}
	p.expect('{', "of an enum")
	for p.err == nil && p.step() {
		p.skipSpace(true)
		switch r := p.peek(); {
		case r == ';':
			p.pos++
		case r == '}':
			p.pos++
			return
		case r == '[':
			p.typeLiteral()
		case isIdentStart(r):
			for isIdentFollow(p.peek()) {
				p.advance()
			}
			p.skipSpace(false)
			if p.peek() == '=' {
				p.pos++
				p.skipSpace(true)
				p.expr(false)
			}
		default:
			p.failf("unexpected %q in an enum", r)
		}
	}
}

// usingStatement: using namespace is a declaration (its namespaces name
// types too); using module and using assembly load code, like Import-Module:
// a simple command `using module X` that rules (and the default) decide.
func (p *pwshParser) usingStatement(start int) {
	p.skipSpace(false)
	kind, e := p.keyword()
	if kind == "" {
		p.failf("missing the kind of a using statement")
		return
	}
	p.pos = e
	words := []string{"using", kind}
	for p.err == nil && p.step() {
		p.skipSpace(false)
		if p.atStatementEnd() || p.peek() == '|' || p.peek() == '&' {
			break
		}
		at := p.pos
		a := p.argument()
		if p.pos == at {
			p.failf("unexpected %q in a using statement", p.peek())
		}
		words = append(words, a.val)
	}
	if kind == "namespace" {
		for _, ns := range words[2:] {
			if len(p.sess.namespaces) < maxPwshAliases {
				p.sess.namespaces = append(p.sess.namespaces, ns)
			}
		}
		return
	}
	p.add(simpleCommand{Argv: words, Text: clip(strings.TrimSpace(p.src[start-len("using"):p.pos]), maxTextBytes),
		Via: p.via, pwsh: true, name: "using"})
}

// paramList reads the inside of param( ... ) or a function's ( ... ), up to
// and including the ')'.
func (p *pwshParser) paramList() {
	if p.err != nil || !p.enter() {
		return
	}
	defer p.leave()
	for p.err == nil && p.step() {
		p.skipSpace(true)
		if p.peek() == ')' {
			p.pos++
			return
		}
		for p.err == nil && p.step() && p.peek() == '[' {
			p.typeLiteral()
			p.skipSpace(true)
		}
		if p.peek() != '$' {
			p.failf("missing a parameter variable")
			return
		}
		start := p.pos
		p.pos++
		p.checkVar(p.varName(), start)
		p.skipSpace(true)
		if p.peek() == '=' {
			p.pos++
			p.skipSpace(true)
			p.expr(false)
			p.skipSpace(true)
		}
		switch p.peek() {
		case ',':
			p.pos++
		case ')':
		default:
			p.failf("unexpected %q in a parameter list", p.peek())
		}
	}
}

// Pipelines.

func (p *pwshParser) pipelineChain() {
	for p.err == nil && p.step() {
		p.pipeline()
		p.skipSpace(false)
		if p.hasPrefix("&&") || p.hasPrefix("||") {
			p.pos += 2
			p.skipSpace(true)
			continue
		}
		if p.peek() == '&' { // run in the background; the statement ends
			p.pos++
		}
		return
	}
}

func (p *pwshParser) pipeline() {
	for p.err == nil && p.step() {
		p.skipSpace(false)
		p.element()
		p.skipSpace(false)
		if p.peek() == '|' && !p.hasPrefix("||") {
			p.pos++
			p.skipSpace(true)
			continue
		}
		if isNewline(p.peek()) { // a pipe that starts the next line continues the pipeline
			save := p.pos
			p.skipSpace(true)
			if p.peek() == '|' && !p.hasPrefix("||") {
				p.pos++
				p.skipSpace(true)
				continue
			}
			p.pos = save
		}
		return
	}
}

// element reads one element of a pipeline: a command, or (first in the
// pipeline) an expression.
func (p *pwshParser) element() {
	r, r2 := p.peek(), p.peek2()
	switch {
	case p.eof() || r == '|' || r == ';' || r == ')' || r == '}' || r == ']' || r == '&' && r2 == '&' || isNewline(r):
		p.failf("missing a command")
	case r == '&':
		p.pos++
		p.command(p.pos-1, true)
	case r == '.' && (pwshForceStart(r2) || r2 == '$' || isSQ(r2) || isDQ(r2)):
		p.pos++ // dot-sourcing
		p.command(p.pos-1, true)
	case p.startsExpression():
		p.expressionElement()
	default:
		p.command(p.pos, false)
	}
}

// startsExpression: the pipeline element at the current position is an
// expression in PowerShell's reading (ExpressionRule succeeds), not a
// command.
func (p *pwshParser) startsExpression() bool {
	r, r2 := p.peek(), p.peek2()
	switch {
	case r == '$':
		return r2 == '(' || r2 == '{' || pwshVarStart(r2)
	case r == '@', isSQ(r), isDQ(r), r == '(', r == '{', r == '[', r == ',', r == '+', isDash(r):
		return true
	case r == '!':
		return !isIdentStart(r2)
	case r == '.':
		return isDigit(r2)
	case isDigit(r):
		return p.numberLength() > 0
	}
	return false
}

// numberLength is the length of the number at the current position when it
// is one PowerShell reads as a number (a strict subset of its numbers:
// decimal, real, exponent, hex, with a kb..pb multiplier) followed by a
// character that ends it; 0 otherwise (the word is a command name).
func (p *pwshParser) numberLength() int {
	s := p.src[p.pos:]
	i := 0
	digits := func(hex bool) int {
		n := 0
		for i < len(s) && (isDigit(rune(s[i])) || hex && strings.IndexByte("abcdefABCDEF", s[i]) >= 0) {
			i++
			n++
		}
		return n
	}
	if strings.HasPrefix(s, "0x") || strings.HasPrefix(s, "0X") {
		i = 2
		if digits(true) == 0 {
			return 0
		}
	} else {
		digits(false)
		if i < len(s) && s[i] == '.' && !(i+1 < len(s) && s[i+1] == '.') {
			i++
			digits(false)
		}
		if i < len(s) && (s[i] == 'e' || s[i] == 'E') {
			i++
			if i < len(s) && (s[i] == '+' || s[i] == '-') {
				i++
			}
			if digits(false) == 0 {
				return 0
			}
		}
		if i+1 < len(s) && strings.Contains("kmgtpKMGTP", s[i:i+1]) && (s[i+1] == 'b' || s[i+1] == 'B') {
			i += 2
		}
	}
	r, _ := utf8.DecodeRuneInString(s[i:])
	if i == len(s) || pwshForceStart(r) || strings.ContainsRune("!#%*+-./<=>]", r) || isDash(r) {
		return i
	}
	return 0
}

// expressionElement reads an expression that starts a pipeline, with its
// redirections.
func (p *pwshParser) expressionElement() {
	start := p.pos
	p.expr(true)
	var redirs []string
	for p.err == nil && p.step() {
		p.skipSpace(false)
		if !p.atRedirect() {
			break
		}
		redirs = p.redirect(redirs)
	}
	if len(redirs) > 0 {
		p.add(simpleCommand{Redirects: redirs, Text: clip(strings.TrimSpace(p.src[start:p.pos]), maxTextBytes),
			Via: p.via, pwsh: true, Wrapper: true})
	}
}

// Commands.

// pwElem is one element of a command after its name: a parameter, or a
// value (an array's elements together).
type pwElem struct {
	param string // a parameter's folded name, without dash or colon; "" for a value
	colon bool   // -Name: (the next value is the parameter's, even for a switch)
	end   bool   // the -- that ends the parameters
	vals  []pwArg
}

// pwArg is one command argument.
type pwArg struct {
	val   string // quotes and escapes removed; as written when not a literal
	lit   bool
	word  bool // a bare word or a quoted string (what a literal command name is)
	block bool // a script block
	splat bool // @name
	start int
	end   int
}

// pwCmd is a command as read, before its name is resolved.
type pwCmd struct {
	start, end int
	name       string
	nameLit    bool
	blockOnly  bool // & { ... }: no name; the block is read
	words      []string
	lits       []bool
	elems      []pwElem
	redirs     []string
}

func (c *pwCmd) word(w string, lit bool) {
	c.words = append(c.words, w)
	c.lits = append(c.lits, lit)
}

func (p *pwshParser) atCommandEnd() bool {
	r := p.peek()
	return p.eof() || isNewline(r) || r == ';' || r == '|' || r == '&' || r == ')' || r == '}'
}

// command reads a command that starts at start. invoked: after & or . (the
// name is an argument: a string, a word, or something that makes it
// dynamic).
func (p *pwshParser) command(start int, invoked bool) {
	c := &pwCmd{start: start}
	if invoked {
		p.skipSpace(false)
		if p.atCommandEnd() {
			p.failf("missing the command after & or .")
			return
		}
		a := p.argument()
		switch {
		case a.block:
			c.blockOnly = true
		default:
			c.name, c.nameLit = a.val, a.lit && a.word
		}
	} else {
		c.name, c.nameLit = p.generic()
	}
	c.end = p.pos
	p.commandElements(c)
	if p.err == nil {
		p.emit(c)
	}
}

func (p *pwshParser) commandElements(c *pwCmd) {
	params := true
	for p.err == nil && p.step() {
		p.skipSpace(false)
		if p.atCommandEnd() {
			return
		}
		r, r2 := p.peek(), p.peek2()
		switch {
		case p.atRedirect():
			c.redirs = p.redirect(c.redirs)
		case r == ',':
			p.failf("missing an argument before ','")
		case p.hasPrefix("--%") && pwshForceStart(p.runeAfter(3)):
			p.stopParsing(c)
		case params && isDash(r) && (isIdentStart(r2) || r2 == '?'):
			pstart := p.pos
			el := p.parameter()
			if el.param == "" { // a quote made it a word
				c.word(el.vals[0].val, el.vals[0].lit)
				c.elems = append(c.elems, el)
				break
			}
			_, dash := p.at(pstart)
			w := "-" + p.src[pstart+dash:p.pos] // as written, with an ASCII dash
			if el.colon {
				if p.pos < len(p.src) && !pwshForceStart(p.peek()) && !p.atRedirect() {
					// -Name:value in one word, as a native command gets it.
					v := p.argument()
					c.word(w+v.val, v.lit)
					c.elems = append(c.elems, el, pwElem{vals: []pwArg{v}})
					c.end = p.pos
					continue
				}
			}
			c.word(w, true)
			c.elems = append(c.elems, el)
		default:
			el := pwElem{}
			for p.err == nil && p.step() {
				a := p.argument()
				el.vals = append(el.vals, a)
				c.word(a.val, a.lit)
				save := p.pos
				p.skipSpace(false)
				if p.peek() != ',' {
					p.pos = save
					break
				}
				p.pos++
				p.skipSpace(true)
			}
			if len(el.vals) == 1 && el.vals[0].word && el.vals[0].lit && el.vals[0].val == "--" && p.src[el.vals[0].start] == '-' {
				el.end = true
				params = false
			}
			c.elems = append(c.elems, el)
		}
		c.end = p.pos
	}
}

// runeAfter is the rune n bytes ahead.
func (p *pwshParser) runeAfter(n int) rune { r, _ := p.at(p.pos + n); return r }

// stopParsing: after --% the rest of the line goes to the native command as
// written, up to a newline, or a | or && outside double quotes
// (GetVerbatimCommandArgument); the program splits it as .NET splits a
// command line.
func (p *pwshParser) stopParsing(c *pwCmd) {
	p.pos += 3
	for isPwshSpace(p.peek()) {
		p.advance()
	}
	start := p.pos
	inQuotes := false
	for !p.eof() {
		r := p.peek()
		if isNewline(r) || !inQuotes && (r == '|' || p.hasPrefix("&&")) {
			break
		}
		if isDQ(r) {
			inQuotes = !inQuotes
		}
		p.advance()
	}
	for _, w := range splitDotnetArgs(p.src[start:p.pos]) {
		c.word(w, true)
		c.elems = append(c.elems, pwElem{vals: []pwArg{{val: w, lit: true, word: true}}})
	}
}

// parameter reads -Name or -Name: (a dash followed by a letter). One with a
// quote in it is a word (pwElem with a value).
func (p *pwshParser) parameter() pwElem {
	start := p.pos
	p.advance() // the dash
	nameStart := p.pos
	for !p.eof() {
		r, n := p.at(p.pos)
		if isPwshSpace(r) || strings.ContainsRune("{}();,|&.[\n\r", r) {
			break
		}
		if r == ':' {
			name := pwshFold(p.src[nameStart:p.pos])
			p.pos += n
			return pwElem{param: name, colon: true}
		}
		if isSQ(r) || isDQ(r) {
			p.pos = start
			v, lit := p.generic()
			return pwElem{vals: []pwArg{{val: v, lit: lit, word: true, start: start, end: p.pos}}}
		}
		p.pos += n
	}
	return pwElem{param: pwshFold(p.src[nameStart:p.pos])}
}

// argument reads one command argument (command mode).
func (p *pwshParser) argument() pwArg {
	start := p.pos
	r, r2 := p.peek(), p.peek2()
	a := pwArg{start: start}
	switch {
	case (r == '$' || r == '@') && r2 == '(':
		p.pos += 2
		p.group(')')
		p.postfix(false)
	case r == '@' && r2 == '{':
		p.pos += 2
		p.hash()
		p.postfix(false)
	case r == '@' && (isSQ(r2) || isDQ(r2)):
		p.pos++
		a.val, a.lit = p.hereString()
		a.word = true
	case r == '@' && pwshVarStart(r2):
		p.pos++
		p.varName()
		a.splat = true
	case r == '@':
		p.failf("unexpected '@'")
	case r == '(':
		p.pos++
		p.group(')')
		p.postfix(false)
	case r == '{':
		p.block()
		a.block = true
	case isSQ(r) || isDQ(r):
		a.val, a.lit = p.quoted()
		a.word = true
	case r == '$' && (pwshVarStart(r2) || r2 == '{'):
		p.pos++
		name := p.varName()
		if r3 := p.peek(); !pwshForceStart(r3) && r3 != '.' && r3 != '[' && p.err == nil {
			// More of a word follows: the whole is one expandable word.
			p.pos = start
			a.val, a.lit = p.generic()
			a.word = true
			break
		}
		p.checkVar(name, start)
		p.postfix(false)
	case r == '[' && pwshForceStart(r2):
		p.failf("unexpected '['")
	default:
		a.val, a.lit = p.generic()
		a.word = true
	}
	a.end = p.pos
	if !a.lit {
		a.val = p.src[start:min(p.pos, len(p.src))]
	}
	return a
}

// generic reads a bare word: up to a character that ends a token, with
// quoted parts, backtick escapes and $ expansions inside. lit is false when
// it expands something (the word is then returned as written).
func (p *pwshParser) generic() (string, bool) {
	start := p.pos
	for !p.eof() { // the common case: plain ASCII up to the end of the word
		c := p.src[p.pos]
		if c >= utf8.RuneSelf || c == '`' || c == '\'' || c == '"' || c == '$' || pwshForceStart(rune(c)) {
			break
		}
		p.pos++
	}
	if p.eof() || pwshForceStart(p.peek()) {
		return p.src[start:p.pos], true
	}
	var b strings.Builder
	b.WriteString(p.src[start:p.pos])
	lit := true
	for !p.eof() && p.err == nil {
		r, n := p.at(p.pos)
		if pwshForceStart(r) {
			break
		}
		switch {
		case r == '`':
			p.pos += n
			if p.eof() {
				b.WriteByte('`')
				break
			}
			p.escape(&b)
		case isSQ(r):
			p.pos += n
			p.singleQuoted(&b)
		case isDQ(r):
			p.pos += n
			if !p.doubleQuoted(&b) {
				lit = false
			}
		case r == '$':
			if p.dollar(false) {
				lit = false
			} else {
				b.WriteByte('$')
				p.pos++
			}
		default:
			b.WriteString(p.src[p.pos : p.pos+n])
			p.pos += n
		}
	}
	if !lit {
		return p.src[start:p.pos], false
	}
	return b.String(), true
}

// escape reads the character after a backtick and writes what it means.
func (p *pwshParser) escape(b *strings.Builder) {
	r, n := p.at(p.pos)
	p.pos += n
	switch r {
	case '0':
		b.WriteByte(0)
	case 'a':
		b.WriteByte(7)
	case 'b':
		b.WriteByte(8)
	case 'e':
		b.WriteByte(0x1b)
	case 'f':
		b.WriteByte(0xc)
	case 'n':
		b.WriteByte('\n')
	case 'r':
		b.WriteByte('\r')
	case 't':
		b.WriteByte('\t')
	case 'v':
		b.WriteByte(0xb)
	case 'u':
		end := strings.IndexByte(p.src[p.pos:], '}')
		if p.peek() != '{' || end < 2 || end > 7 {
			p.failf("bad `u{...} escape")
			return
		}
		var v rune
		for _, h := range p.src[p.pos+1 : p.pos+end] {
			d := strings.IndexRune("0123456789abcdef", unicode.ToLower(h))
			if d < 0 {
				p.failf("bad `u{...} escape")
				return
			}
			v = v*16 + rune(d)
		}
		if v > unicode.MaxRune {
			p.failf("bad `u{...} escape")
			return
		}
		b.WriteRune(v)
		p.pos += end + 1
	default:
		b.WriteRune(r)
	}
}

// dollar reads a $(...) or a variable at a $ inside a string or word,
// reporting false (nothing read) when the $ is a plain character.
func (p *pwshParser) dollar(here bool) bool {
	switch r2 := p.peek2(); {
	case r2 == '(':
		p.pos += 2
		p.sub(p.stringSubexpression(here))
		return true
	case r2 == '{' || pwshVarStart(r2):
		p.pos++
		p.varName()
		return true
	}
	return false
}

// stringSubexpression reads the inside of a $( ... ) in a string or word as
// PowerShell does before parsing it: by counting parentheses, a doubled
// double quote (or a backtick before one) standing for one.
func (p *pwshParser) stringSubexpression(here bool) string {
	var b strings.Builder
	depth := 1
	for p.err == nil && p.step() {
		if p.eof() {
			p.failf("missing ')' of $(")
			return ""
		}
		r, n := p.at(p.pos)
		p.pos += n
		switch {
		case r == '(':
			depth++
		case r == ')':
			depth--
			if depth == 0 {
				return b.String()
			}
		case !here && (r == '`' || isDQ(r)) && isDQ(p.peek()):
			r, n = p.at(p.pos)
			p.pos += n
		}
		b.WriteRune(r)
	}
	return ""
}

func (p *pwshParser) singleQuoted(b *strings.Builder) {
	for p.err == nil && p.step() {
		if p.eof() {
			p.failf("missing the closing ' of a string")
			return
		}
		r, n := p.at(p.pos)
		p.pos += n
		if isSQ(r) {
			if !isSQ(p.peek()) {
				return
			}
			r, n = p.at(p.pos)
			p.pos += n
		}
		b.WriteRune(r)
	}
}

// doubleQuoted reads an expandable string after its opening quote; false
// when it expands something.
func (p *pwshParser) doubleQuoted(b *strings.Builder) bool {
	lit := true
	for p.err == nil && p.step() {
		if p.eof() {
			p.failf(`missing the closing " of a string`)
			return lit
		}
		r, n := p.at(p.pos)
		switch {
		case isDQ(r):
			p.pos += n
			if !isDQ(p.peek()) {
				return lit
			}
			r, n = p.at(p.pos)
			p.pos += n
			b.WriteRune(r)
		case r == '`':
			p.pos += n
			if p.eof() {
				p.failf(`missing the closing " of a string`)
				return lit
			}
			p.escape(b)
		case r == '$' && p.dollar(false):
			lit = false
		default:
			b.WriteRune(r)
			p.pos += n
		}
	}
	return lit
}

// quoted reads a string at its opening quote.
func (p *pwshParser) quoted() (string, bool) {
	start := p.pos
	r := p.peek()
	p.advance()
	var b strings.Builder
	if isSQ(r) {
		p.singleQuoted(&b)
		return b.String(), true
	}
	if !p.doubleQuoted(&b) {
		return p.src[start:min(p.pos, len(p.src))], false
	}
	return b.String(), true
}

// hereString reads @'...'@ or @"..."@ at its quote (after the @): a header
// line, then lines up to one that starts with the quote and @.
func (p *pwshParser) hereString() (string, bool) {
	start := p.pos - 1
	q := p.peek()
	expandable := isDQ(q)
	p.advance()
	for isPwshSpace(p.peek()) {
		p.advance()
	}
	switch {
	case p.hasPrefix("\r\n"):
		p.pos += 2
	case isNewline(p.peek()):
		p.pos++
	default:
		p.failf("a here-string must start a new line after its @%c", q)
		return "", false
	}
	footer := func() bool {
		r, n := p.at(p.pos)
		if (expandable && isDQ(r) || !expandable && isSQ(r)) && p.pos+n < len(p.src) && p.src[p.pos+n] == '@' {
			p.pos += n + 1
			return true
		}
		return false
	}
	var b strings.Builder
	lit := true
	if footer() {
		return "", true
	}
	for p.err == nil && p.step() {
		if p.eof() {
			p.failf("missing the end of a here-string (a line starting with %c@)", q)
			return "", false
		}
		r, n := p.at(p.pos)
		switch {
		case isNewline(r):
			keep := b.Len()
			p.pos += n
			b.WriteRune(r)
			if r == '\r' && p.peek() == '\n' {
				p.pos++
				b.WriteByte('\n')
			}
			if footer() {
				if !lit {
					return p.src[start:p.pos], false
				}
				return b.String()[:keep], true
			}
		case expandable && r == '`':
			p.pos += n
			if p.eof() {
				continue
			}
			p.escape(&b)
		case expandable && r == '$' && p.dollar(true):
			lit = false
		default:
			b.WriteRune(r)
			p.pos += n
		}
	}
	return "", false
}

// varName reads a variable's name after its $ (or the @ of a splat).
func (p *pwshParser) varName() string {
	r, n := p.at(p.pos)
	if r == '{' {
		p.pos += n
		var b strings.Builder
		for p.err == nil && p.step() {
			if p.eof() {
				p.failf("missing '}' of ${")
				return ""
			}
			r, n := p.at(p.pos)
			p.pos += n
			if r == '}' {
				break
			}
			if r == '`' && !p.eof() {
				p.escape(&b)
				continue
			}
			b.WriteRune(r)
		}
		return b.String()
	}
	start := p.pos
	if r == '$' || r == '?' || r == '^' {
		p.pos += n
		return p.src[start:p.pos]
	}
	for !p.eof() {
		r, n := p.at(p.pos)
		switch {
		case r == ':':
			if p.peek2() == ':' {
				return p.src[start:p.pos]
			}
		case r == '_' || r == '?' || isIdentFollow(r):
		default:
			return p.src[start:p.pos]
		}
		p.pos += n
	}
	return p.src[start:p.pos]
}

// checkVar: $ExecutionContext reaches the engine (InvokeCommand,
// InvokeProvider): whatever it is used for is dynamic.
func (p *pwshParser) checkVar(name string, start int) {
	n := pwshFold(name)
	for _, scope := range []string{"global:", "script:", "local:", "private:", "using:"} {
		n = strings.TrimPrefix(n, scope)
	}
	if n == "executioncontext" {
		p.dynamicf(start, "$ExecutionContext runs code rules cannot see")
	}
}

// Groups and blocks.

// group reads statements up to close, after the opening ( $( @( .
func (p *pwshParser) group(close rune) {
	if p.err != nil || !p.enter() {
		return
	}
	defer p.leave()
	p.stmts(close)
	p.expect(close, "of a group")
}

// block reads a { script block } at its brace. Its commands count whether
// or not it runs.
func (p *pwshParser) block() {
	if p.err != nil || !p.enter() {
		return
	}
	defer p.leave()
	p.pos++
	p.stmts('}')
	p.expect('}', "of a script block")
}

// hash reads a @{ key = statement; ... } after its @{.
func (p *pwshParser) hash() {
	if p.err != nil || !p.enter() {
		return
	}
	defer p.leave()
	for p.err == nil && p.step() {
		p.skipSpace(true)
		r := p.peek()
		switch {
		case r == ';':
			p.pos++
			continue
		case r == '}':
			p.pos++
			return
		case p.eof():
			p.failf("missing '}' of @{")
			return
		case isSQ(r) || isDQ(r):
			p.quoted()
		case r == '$' || r == '(' || r == '@' || r == '[':
			p.unary()
		default:
			for !p.eof() {
				r := p.peek()
				if pwshForceStart(r) || r == '=' {
					break
				}
				p.advance()
			}
		}
		p.skipSpace(false)
		if p.peek() != '=' {
			p.failf("missing '=' in @{")
			return
		}
		p.pos++
		p.skipSpace(true)
		p.statement()
	}
}

// Expressions.

// expr reads an expression: operands and binary operators; an assignment
// (if allowed) takes a statement on its right.
func (p *pwshParser) expr(allowAssign bool) {
	if p.err != nil || !p.enter() {
		return
	}
	defer p.leave()
	start := p.pos
	for p.err == nil && p.step() {
		p.unary()
		p.skipSpace(false)
		if allowAssign && p.assignment() {
			if lhs := pwshFold(strings.TrimLeft(p.src[start:p.pos], "${")); strings.HasPrefix(lhs, "function:") ||
				strings.HasPrefix(lhs, "alias:") {
				p.dynamicf(start, "assigning to the function: or alias: drive defines a command rules cannot see")
			}
			p.skipSpace(true)
			p.statement()
			return
		}
		if !p.binaryOperator() {
			return
		}
		p.skipSpace(true)
	}
}

var pwshUnaryWords = map[string]bool{"not": true, "bnot": true, "split": true, "join": true, "isplit": true, "csplit": true}

var pwshBinaryWords = func() map[string]bool {
	m := map[string]bool{}
	for _, w := range strings.Fields("eq ne gt ge lt le like notlike match notmatch replace contains notcontains in notin split") {
		m[w], m["i"+w], m["c"+w] = true, true, true
	}
	for _, w := range strings.Fields("is isnot as f and or xor band bor bxor shl shr join") {
		m[w] = true
	}
	return m
}()

// dashWord is the folded word after a dash at the current position.
func (p *pwshParser) dashWord() (string, int) {
	_, n := p.at(p.pos)
	i := p.pos + n
	for {
		r, m := p.at(i)
		if m == 0 || !isIdentFollow(r) {
			break
		}
		i += m
	}
	return pwshFold(p.src[p.pos+n : i]), i
}

// unary reads prefix operators and casts, an operand, and its member
// accesses.
func (p *pwshParser) unary() {
	for p.err == nil && p.step() {
		p.skipSpace(false)
		r, r2 := p.peek(), p.peek2()
		switch {
		case r == '!' || r == ',':
			p.pos++
			p.skipSpace(true)
			continue
		case (r == '+' && r2 == '+') || (isDash(r) && isDash(r2)):
			p.advance()
			p.advance()
			continue
		case r == '+' && !isDigit(r2) && r2 != '.':
			p.pos++
			continue
		case isDash(r) && isIdentStart(r2):
			w, end := p.dashWord()
			if !pwshUnaryWords[w] {
				p.failf("unexpected -%s", w)
				return
			}
			p.pos = end
			p.skipSpace(true)
			continue
		case isDash(r) && !isDigit(r2) && r2 != '.':
			p.advance()
			continue
		case r == '[':
			start := p.pos
			name := p.typeLiteral()
			if p.err != nil {
				return
			}
			// (No letter of "create" has another form that folds to it:
			// EqualFold is PowerShell's comparison here.)
			if isScriptBlockType(name) && len(p.src) > p.pos+len("::create(") &&
				strings.EqualFold(p.src[p.pos:p.pos+len("::create(")], "::create(") {
				p.scriptBlockCreate(start)
				p.postfix(false)
				return
			}
			if p.dynamicType(name) {
				p.dynamicf(start, "the .NET type [%s] runs or loads code rules cannot see", clip(name, 80))
			}
			if p.hasPrefix("::") || p.hasPrefix(".") {
				p.postfix(true)
				return
			}
			if p.castOperand() {
				continue
			}
			return // a type on its own
		}
		break
	}
	p.primary()
	p.postfix(false)
	if p.hasPrefix("++") || p.hasPrefix("--") {
		p.pos += 2
	}
}

// castOperand: after a [type], whether an operand follows on the line (a
// cast), leaving the position at it; else the position is unchanged.
func (p *pwshParser) castOperand() bool {
	save := p.pos
	p.skipSpace(false)
	r, r2 := p.peek(), p.peek2()
	switch {
	case r == '$' || r == '(' || r == '@' || isSQ(r) || isDQ(r) || r == '[' || r == '{' || isDigit(r) || r == '!':
		return true
	case r == '.' && isDigit(r2), isDash(r) && isDigit(r2):
		return true
	case isDash(r) && isIdentStart(r2):
		if w, _ := p.dashWord(); pwshUnaryWords[w] {
			return true
		}
	}
	p.pos = save
	return false
}

// dynamicType is dynamicType of name, also as a name in the namespaces of
// the script's using statements.
func (p *pwshParser) dynamicType(name string) bool {
	if dynamicType(name) {
		return true
	}
	for _, ns := range p.sess.namespaces {
		if dynamicType(ns + "." + name) {
			return true
		}
	}
	return false
}

func isScriptBlockType(name string) bool {
	n := strings.TrimPrefix(pwshFold(strings.TrimSpace(name)), "system.")
	return n == "scriptblock" || n == "management.automation.scriptblock"
}

// scriptBlockCreate: [scriptblock]::Create('literal') is read as the
// script it creates (like Invoke-Expression); anything else is dynamic.
func (p *pwshParser) scriptBlockCreate(start int) {
	p.pos += len("::create(")
	p.skipSpace(true)
	r := p.peek()
	if isSQ(r) || isDQ(r) || (r == '@' && (isSQ(p.peek2()) || isDQ(p.peek2()))) {
		save := p.pos
		var (
			v   string
			lit bool
		)
		if r == '@' {
			p.pos++
			v, lit = p.hereString()
		} else {
			v, lit = p.quoted()
		}
		p.skipSpace(true)
		if lit && p.peek() == ')' && p.err == nil {
			p.pos++
			p.wrapScript(v, "[scriptblock]::Create", start)
			return
		}
		p.pos = save
	}
	p.dynamicf(start, "[scriptblock]::Create of a script that is not a literal string")
	p.callArgs()
}

// wrapScript reads script, which the command at start runs in this
// session (Invoke-Expression, [scriptblock]::Create).
func (p *pwshParser) wrapScript(script, via string, start int) {
	if p.err != nil {
		return
	}
	if p.depth+1 > maxWrapperDepth {
		p.dynamicf(start, "wrappers nest deeper than %d levels", maxWrapperDepth)
		return
	}
	if len(script) > maxInnerBytes {
		p.fail(fmt.Errorf("%s: %w: a script longer than %d bytes", via, errTooComplex, maxInnerBytes))
		return
	}
	if !p.enter() {
		return
	}
	defer p.leave()
	c := &pwshParser{a: p.a, sess: p.sess, src: script, nest: p.nest, depth: p.depth + 1, via: via}
	if !c.charge(len(script)) {
		p.fail(c.err)
		return
	}
	c.stmts(0)
	if c.err != nil {
		p.fail(fmt.Errorf("%s: %w", via, c.err))
	}
}

func (p *pwshParser) primary() {
	r, r2 := p.peek(), p.peek2()
	switch {
	case (r == '$' || r == '@') && r2 == '(':
		p.pos += 2
		p.group(')')
	case r == '(':
		p.pos++
		p.group(')')
	case r == '@' && r2 == '{':
		p.pos += 2
		p.hash()
	case r == '{':
		p.block()
	case r == '@' && (isSQ(r2) || isDQ(r2)):
		p.pos++
		p.hereString()
	case r == '@' && pwshVarStart(r2):
		p.pos++
		p.varName()
	case isSQ(r) || isDQ(r):
		p.quoted()
	case r == '$' && (pwshVarStart(r2) || r2 == '{'):
		start := p.pos
		p.pos++
		p.checkVar(p.varName(), start)
	case isDigit(r) || (r == '.' && isDigit(r2)) || ((isDash(r) || r == '+') && (isDigit(r2) || r2 == '.')):
		p.number()
	case p.eof():
		p.failf("missing an expression")
	default:
		p.failf("unexpected %q in an expression", r)
	}
}

// number reads a numeric literal loosely (in an expression it cannot hide
// a command).
func (p *pwshParser) number() {
	if r := p.peek(); isDash(r) || r == '+' {
		p.advance()
	}
	for !p.eof() {
		r, r2 := p.peek(), p.peek2()
		switch {
		case isIdentFollow(r):
			exp := r == 'e' || r == 'E'
			p.advance()
			if exp && (r2 == '+' || isDash(r2)) && isDigit(p.peek2()) {
				p.advance()
			}
		case r == '.' && isDigit(r2):
			p.pos++
		default:
			return
		}
	}
}

// postfix reads member accesses, method calls and indexes that follow an
// operand without space. onType: the operand is a [type] (:: is a static
// member; on anything else it is a type given by an expression).
func (p *pwshParser) postfix(onType bool) {
	for p.err == nil && p.step() {
		r, r2 := p.peek(), p.peek2()
		switch {
		case r == ':' && r2 == ':':
			start := p.pos
			p.pos += 2
			if !onType {
				p.dynamicf(start, "a static member of a type given by an expression")
			}
			p.member(start)
		case r == '.' && r2 != '.' && !pwshForceStart(r2):
			start := p.pos
			p.pos++
			p.member(start)
		case r == '?' && r2 == '.':
			start := p.pos
			p.pos += 2
			p.member(start)
		case r == '[' || (r == '?' && r2 == '['):
			if r == '?' {
				p.pos++
			}
			p.pos++
			if !p.enter() {
				return
			}
			p.skipSpace(true)
			p.expr(false)
			p.skipSpace(true)
			p.expect(']', "of an index")
			p.leave()
		default:
			return
		}
		onType = false
	}
}

// member reads a member name (after . or ::) and its call.
func (p *pwshParser) member(start int) {
	r := p.peek()
	name, lit := "", true
	switch {
	case isIdentFollow(r):
		s := p.pos
		for isIdentFollow(p.peek()) {
			p.advance()
		}
		name = p.src[s:p.pos]
	case isSQ(r) || isDQ(r):
		name, lit = p.quoted()
	case r == '$':
		s := p.pos
		p.pos++
		p.checkVar(p.varName(), s)
		lit = false
	case r == '(':
		p.pos++
		p.group(')')
		lit = false
	default:
		p.failf("missing a member name")
		return
	}
	call := p.peek() == '('
	folded := pwshFold(name)
	switch {
	case !lit && call:
		p.dynamicf(start, "calls a method named by an expression")
	case lit && pwshDynamicMembers[folded]:
		p.dynamicf(start, ".%s runs or loads code rules cannot see", clip(name, 40))
	}
	if call {
		p.pos++
		if n := p.callArgs(); n > 0 && folded == "gettype" {
			p.dynamicf(start, ".GetType(name) reaches a type rules cannot see")
		}
	}
}

// callArgs reads a method's arguments after its '(' and the ')'; the count
// is 0 for none.
func (p *pwshParser) callArgs() int {
	if p.err != nil || !p.enter() {
		return 0
	}
	defer p.leave()
	p.skipSpace(true)
	if p.peek() == ')' {
		p.pos++
		return 0
	}
	n := 0
	for p.err == nil && p.step() {
		p.expr(false)
		n++
		p.skipSpace(true)
		switch p.peek() {
		case ',':
			p.pos++
			p.skipSpace(true)
		case ')':
			p.pos++
			return n
		default:
			p.failf("missing ')' of a method call")
		}
	}
	return n
}

// binaryOperator reads a binary operator, if one is next.
func (p *pwshParser) binaryOperator() bool {
	if p.atRedirect() {
		return false
	}
	r, r2 := p.peek(), p.peek2()
	switch {
	case r == ',':
		p.pos++
	case (r == '+' || r == '*' || r == '/' || r == '%') && r2 != '=':
		p.pos++
	case r == '.' && r2 == '.':
		p.pos += 2
	case r == '?' && r2 == '?' && !p.hasPrefix("??="):
		p.pos += 2
	case r == '?' || r == ':':
		p.pos++
	case isDash(r) && isIdentStart(r2):
		w, end := p.dashWord()
		if !pwshBinaryWords[w] {
			return false
		}
		p.pos = end
	case isDash(r) && r2 != '=':
		p.advance()
	default:
		return false
	}
	return true
}

// assignment reads an assignment operator, if one is next.
func (p *pwshParser) assignment() bool {
	r, r2 := p.peek(), p.peek2()
	switch {
	case r == '=':
		p.pos++
	case (r == '+' || r == '*' || r == '/' || r == '%') && r2 == '=':
		p.pos += 2
	case isDash(r) && r2 == '=':
		p.advance()
		p.pos++
	case p.hasPrefix("??="):
		p.pos += 3
	default:
		return false
	}
	return true
}

// Types.

// typeLiteral reads a [type] or [Attribute(args)] at its '[' and returns
// the type's name. Generic arguments that name types which run code are
// dynamic here; the name itself is for the caller to judge.
func (p *pwshParser) typeLiteral() string {
	if p.err != nil || !p.enter() {
		return ""
	}
	defer p.leave()
	p.pos++
	p.skipSpace(false)
	name := p.typeName(false)
	p.skipSpace(false)
	if p.peek() == '(' {
		p.pos++
		p.attributeArgs()
		p.skipSpace(false)
	}
	p.expect(']', "of a type")
	return name
}

// typeName reads a type's name with its generic arguments and array
// brackets. check: judge the name here (a generic argument, a base class).
func (p *pwshParser) typeName(check bool) string {
	start := p.pos
	for !p.eof() { // the characters of ScanTypeName
		r := p.peek()
		if !(isIdentFollow(r) || strings.ContainsRune(".`_+#\\", r)) {
			break
		}
		p.advance()
	}
	name := p.src[start:p.pos]
	if name == "" {
		p.failf("missing a type name")
		return ""
	}
	if check && p.dynamicType(name) {
		p.dynamicf(start, "the .NET type [%s] runs or loads code rules cannot see", clip(name, 80))
	}
	for p.err == nil && p.step() && p.peek() == '[' {
		if !p.enter() {
			return name
		}
		p.pos++
		p.skipSpace(false)
		for p.peek() == ',' { // [,] a rank
			p.pos++
			p.skipSpace(false)
		}
		for p.err == nil && p.step() && p.peek() != ']' {
			if p.peek() == '[' {
				s := p.pos
				if n := p.typeLiteral(); p.dynamicType(n) {
					p.dynamicf(s, "the .NET type [%s] runs or loads code rules cannot see", clip(n, 80))
				}
			} else {
				p.typeName(true)
			}
			p.skipSpace(false)
			if p.peek() != ',' {
				break
			}
			p.pos++
			p.skipSpace(false)
		}
		p.expect(']', "of a type's arguments")
		p.leave()
	}
	return name
}

// attributeArgs reads an attribute's arguments after '(' and the ')':
// expressions, Name = expression, or a bare Name.
func (p *pwshParser) attributeArgs() {
	if !p.enter() {
		return
	}
	defer p.leave()
	for p.err == nil && p.step() {
		p.skipSpace(true)
		if p.peek() == ')' {
			p.pos++
			return
		}
		if isIdentStart(p.peek()) {
			save := p.pos
			for isIdentFollow(p.peek()) {
				p.advance()
			}
			p.skipSpace(false)
			switch {
			case p.peek() == '=':
				p.pos++
				p.skipSpace(true)
				p.expr(false)
			case p.peek() == ',' || p.peek() == ')':
			default:
				p.pos = save
				p.expr(false)
			}
		} else {
			p.expr(false)
		}
		p.skipSpace(true)
		switch p.peek() {
		case ',':
			p.pos++
		case ')':
		default:
			p.failf("missing ')' of an attribute")
		}
	}
}

// Redirections.

// atRedirect: a redirection operator is next (> >> N> N>> *> *>> N>&M, and
// < which PowerShell reserves).
func (p *pwshParser) atRedirect() bool {
	r, r2 := p.peek(), p.peek2()
	switch {
	case r == '>' || r == '<' && r2 != '#':
		return true
	case (r >= '1' && r <= '6' || r == '*') && r2 == '>':
		return true
	}
	return false
}

// redirect reads a redirection and appends its target, if it has one.
func (p *pwshParser) redirect(targets []string) []string {
	if p.peek() == '<' {
		p.failf("the '<' operator is reserved for future use")
		return targets
	}
	if p.peek() != '>' {
		p.pos++ // the stream: 1-6 or *
	}
	p.pos++ // >
	if p.peek() == '&' {
		if r := p.peek2(); r >= '1' && r <= '6' {
			p.pos += 2 // merged into another stream: no file
			return targets
		}
	}
	if p.peek() == '>' {
		p.pos++
	}
	p.skipSpace(false)
	if p.atCommandEnd() || p.atRedirect() {
		p.failf("missing the file of a redirection")
		return targets
	}
	a := p.argument()
	return append(targets, clip(a.val, maxRedirectBytes))
}
