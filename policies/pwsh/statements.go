package pwsh

import (
	"strings"
	"unicode/utf8"

	"github.com/shellbox/shellbox/internal/clip"
)

// The pwsh reader: statements, pipelines, commands and their arguments,
// redirections.

// Statements.

// stmts reads statements up to close (')' or '}'; 0: the end of the
// input), which it leaves unread.
func (p *parser) stmts(close rune) {
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
func (p *parser) expect(r rune, what string) {
	if p.err != nil {
		return
	}
	if p.peek() != r {
		p.failf("missing %q %s", r, what)
		return
	}
	p.advance()
}

func (p *parser) statement() {
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
func (p *parser) keyword() (string, int) {
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
	return Fold(p.src[p.pos:i]), i
}

// keywordStatement reads the statement keyword kw starts, reporting false
// when kw starts none (the word is a command).
func (p *parser) keywordStatement(kw string, end int) bool {
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
		if IsDash(p.peek()) { // -SupportedCommand a, b
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
		start := p.pos
		p.pos = end
		p.usingStatement(start)
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

func (p *parser) atStatementEnd() bool {
	r := p.peek()
	return p.eof() || isNewline(r) || r == ';' || r == ')' || r == '}'
}

// options skips the -options of a statement (switch -regex, foreach
// -parallel).
func (p *parser) options() {
	for p.err == nil && p.step() {
		p.skipSpace(false)
		if !IsDash(p.peek()) {
			return
		}
		p.advance()
		for isIdentFollow(p.peek()) {
			p.advance()
		}
	}
}

// cond reads a parenthesized condition: ( statements ).
func (p *parser) cond() {
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
func (p *parser) body() {
	p.skipSpace(true)
	if p.err == nil && p.peek() != '{' {
		p.failf("missing '{'")
		return
	}
	p.block()
}

func (p *parser) switchStatement() {
	file := false
	for p.err == nil && p.step() {
		p.skipSpace(false)
		if !IsDash(p.peek()) {
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

func (p *parser) classStatement() {
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

func (p *parser) enumStatement() {
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
// start is where the statement starts.
func (p *parser) usingStatement(start int) {
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
	p.add(Command{Args: words, Text: clip.To(strings.TrimSpace(p.src[start:p.pos]), maxTextBytes),
		Via: p.via, Name: "using"})
}

// paramList reads the inside of param( ... ) or a function's ( ... ), up to
// and including the ')'.
func (p *parser) paramList() {
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

func (p *parser) pipelineChain() {
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

func (p *parser) pipeline() {
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
func (p *parser) element() {
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
func (p *parser) startsExpression() bool {
	r, r2 := p.peek(), p.peek2()
	switch {
	case r == '$':
		return r2 == '(' || r2 == '{' || pwshVarStart(r2)
	case r == '@', isSQ(r), isDQ(r), r == '(', r == '{', r == '[', r == ',', r == '+', IsDash(r):
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
func (p *parser) numberLength() int {
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
	if i == len(s) || pwshForceStart(r) || strings.ContainsRune("!#%*+-./<=>]", r) || IsDash(r) {
		return i
	}
	return 0
}

// expressionElement reads an expression that starts a pipeline, with its
// redirections.
func (p *parser) expressionElement() {
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
		p.add(Command{Redirects: redirs, Text: clip.To(strings.TrimSpace(p.src[start:p.pos]), maxTextBytes),
			Via: p.via, Wrapper: true})
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
	lits       []bool // per word, after a first for the name: Command.Literal
	elems      []pwElem
	redirs     []string
	// slab holds the elements' values: one allocation as it grows rather
	// than one per argument (a command may have 100000).
	slab []pwArg
}

// values is the values of slab from start on, for one element.
func (c *pwCmd) values(start int) []pwArg { return c.slab[start:len(c.slab):len(c.slab)] }

func (c *pwCmd) word(w string, lit bool) {
	c.words = append(c.words, w)
	c.lits = append(c.lits, lit)
}

func (p *parser) atCommandEnd() bool {
	r := p.peek()
	return p.eof() || isNewline(r) || r == ';' || r == '|' || r == '&' || r == ')' || r == '}'
}

// command reads a command that starts at start. invoked: after & or . (the
// name is an argument: a string, a word, or something that makes it
// dynamic).
func (p *parser) command(start int, invoked bool) {
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
	if !c.blockOnly {
		c.lits = append(c.lits, true) // the name's, set when it is emitted
	}
	p.commandElements(c)
	if p.err == nil {
		p.emit(c)
	}
}

func (p *parser) commandElements(c *pwCmd) {
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
		case params && IsDash(r) && (isIdentStart(r2) || r2 == '?'):
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
					c.slab = append(c.slab, p.argument())
					v := c.values(len(c.slab) - 1)
					c.word(w+v[0].val, v[0].lit)
					c.elems = append(c.elems, el, pwElem{vals: v})
					c.end = p.pos
					continue
				}
			}
			c.word(w, true)
			c.elems = append(c.elems, el)
		default:
			el, start := pwElem{}, len(c.slab)
			for p.err == nil && p.step() {
				a := p.argument()
				c.slab = append(c.slab, a)
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
			el.vals = c.values(start)
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
func (p *parser) runeAfter(n int) rune { r, _ := p.at(p.pos + n); return r }

// stopParsing: after --% the rest of the line goes to the native command as
// written, up to a newline, or a | or && outside double quotes
// (GetVerbatimCommandArgument); the program splits it as .NET splits a
// command line.
func (p *parser) stopParsing(c *pwCmd) {
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
		c.slab = append(c.slab, pwArg{val: w, lit: true, word: true})
		c.elems = append(c.elems, pwElem{vals: c.values(len(c.slab) - 1)})
	}
}

// parameter reads -Name or -Name: (a dash followed by a letter). One with a
// quote in it is a word (pwElem with a value).
func (p *parser) parameter() pwElem {
	start := p.pos
	p.advance() // the dash
	nameStart := p.pos
	for !p.eof() {
		r, n := p.at(p.pos)
		if isPwshSpace(r) || strings.ContainsRune("{}();,|&.[\n\r", r) {
			break
		}
		if r == ':' {
			name := Fold(p.src[nameStart:p.pos])
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
	return pwElem{param: Fold(p.src[nameStart:p.pos])}
}

// argument reads one command argument (command mode).
func (p *parser) argument() pwArg {
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

// Redirections.

// atRedirect: a redirection operator is next (> >> N> N>> *> *>> N>&M, and
// < which PowerShell reserves).
func (p *parser) atRedirect() bool {
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
func (p *parser) redirect(targets []string) []string {
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
	return append(targets, clip.To(a.val, maxRedirectBytes))
}
