package pwsh

import (
	"fmt"
	"strings"

	"github.com/shellbox/shellbox/internal/clip"
)

// The pwsh reader: groups, blocks, hash tables, expressions, members and
// types.

// checkVar: $ExecutionContext reaches the engine (InvokeCommand,
// InvokeProvider): whatever it is used for is dynamic.
func (p *parser) checkVar(name string, start int) {
	n := Fold(name)
	for _, scope := range []string{"global:", "script:", "local:", "private:", "using:"} {
		n = strings.TrimPrefix(n, scope)
	}
	if n == "executioncontext" {
		p.dynamicf(start, "$ExecutionContext runs code rules cannot see")
	}
}

// Groups and blocks.

// group reads statements up to close, after the opening ( $( @( .
func (p *parser) group(close rune) {
	if p.err != nil || !p.enter() {
		return
	}
	defer p.leave()
	p.stmts(close)
	p.expect(close, "of a group")
}

// block reads a { script block } at its brace. Its commands count whether
// or not it runs.
func (p *parser) block() {
	if p.err != nil || !p.enter() {
		return
	}
	defer p.leave()
	p.pos++
	p.stmts('}')
	p.expect('}', "of a script block")
}

// hash reads a @{ key = statement; ... } after its @{.
func (p *parser) hash() {
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
func (p *parser) expr(allowAssign bool) {
	if p.err != nil || !p.enter() {
		return
	}
	defer p.leave()
	start := p.pos
	for p.err == nil && p.step() {
		p.unary()
		p.skipSpace(false)
		if allowAssign && p.assignment() {
			p.checkAssigned(start)
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

// checkAssigned judges the variable an assignment starting at start
// assigns: to the function: or alias: drive it defines a command; to
// $PSNativeCommandArgumentPassing it changes the arguments native commands
// get (Legacy re-splits them), so `bash -c '...'` would not run the script
// read here.
func (p *parser) checkAssigned(start int) {
	lhs := Fold(strings.TrimLeft(p.src[start:p.pos], "${"))
	for _, scope := range []string{"global:", "script:", "local:", "private:", "variable:"} {
		lhs = strings.TrimPrefix(lhs, scope)
	}
	switch {
	case strings.HasPrefix(lhs, "function:") || strings.HasPrefix(lhs, "alias:"):
		p.dynamicf(start, "assigning to the function: or alias: drive defines a command rules cannot see")
	case strings.HasPrefix(lhs, "psnativecommandargumentpassing"):
		p.dynamicf(start, "$PSNativeCommandArgumentPassing changes the arguments native commands get")
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
func (p *parser) dashWord() (string, int) {
	_, n := p.at(p.pos)
	i := p.pos + n
	for {
		r, m := p.at(i)
		if m == 0 || !isIdentFollow(r) {
			break
		}
		i += m
	}
	return Fold(p.src[p.pos+n : i]), i
}

// unary reads prefix operators and casts, an operand, and its member
// accesses.
func (p *parser) unary() {
	for p.err == nil && p.step() {
		p.skipSpace(false)
		r, r2 := p.peek(), p.peek2()
		switch {
		case r == '!' || r == ',':
			p.pos++
			p.skipSpace(true)
			continue
		case (r == '+' && r2 == '+') || (IsDash(r) && IsDash(r2)):
			p.advance()
			p.advance()
			continue
		case r == '+' && !isDigit(r2) && r2 != '.':
			p.pos++
			continue
		case IsDash(r) && isIdentStart(r2):
			w, end := p.dashWord()
			if !pwshUnaryWords[w] {
				p.failf("unexpected -%s", w)
				return
			}
			p.pos = end
			p.skipSpace(true)
			continue
		case IsDash(r) && !isDigit(r2) && r2 != '.':
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
				p.dynamicf(start, "the .NET type [%s] runs or loads code rules cannot see", clip.To(name, 80))
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
func (p *parser) castOperand() bool {
	save := p.pos
	p.skipSpace(false)
	r, r2 := p.peek(), p.peek2()
	switch {
	case r == '$' || r == '(' || r == '@' || isSQ(r) || isDQ(r) || r == '[' || r == '{' || isDigit(r) || r == '!':
		return true
	case r == '.' && isDigit(r2), IsDash(r) && isDigit(r2):
		return true
	case IsDash(r) && isIdentStart(r2):
		if w, _ := p.dashWord(); pwshUnaryWords[w] {
			return true
		}
	}
	p.pos = save
	return false
}

// dynamicType is dynamicType of name, also as a name in the namespaces of
// the script's using statements.
func (p *parser) dynamicType(name string) bool {
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
	n := strings.TrimPrefix(Fold(strings.TrimSpace(name)), "system.")
	return n == "scriptblock" || n == "management.automation.scriptblock"
}

// scriptBlockCreate: [scriptblock]::Create('literal') is read as the
// script it creates (like Invoke-Expression); anything else is dynamic.
func (p *parser) scriptBlockCreate(start int) {
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
func (p *parser) wrapScript(script, via string, start int) {
	if p.err != nil {
		return
	}
	if p.depth+1 > maxWrapperDepth {
		p.dynamicf(start, "wrappers nest deeper than %d levels", maxWrapperDepth)
		return
	}
	if len(script) > maxInnerBytes {
		p.fail(fmt.Errorf("%s: %w: a script longer than %d bytes", via, ErrTooComplex, maxInnerBytes))
		return
	}
	if !p.enter() {
		return
	}
	defer p.leave()
	c := &parser{r: p.r, sess: p.sess, src: script, nest: p.nest, depth: p.depth + 1, via: via,
		scripts: p.r.chain(p.scripts, via)}
	if !c.charge(len(script)) {
		p.fail(c.err)
		return
	}
	c.stmts(0)
	if c.err != nil {
		p.fail(fmt.Errorf("%s: %w", via, c.err))
	}
}

func (p *parser) primary() {
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
	case isDigit(r) || (r == '.' && isDigit(r2)) || ((IsDash(r) || r == '+') && (isDigit(r2) || r2 == '.')):
		p.number()
	case p.eof():
		p.failf("missing an expression")
	default:
		p.failf("unexpected %q in an expression", r)
	}
}

// number reads a numeric literal loosely (in an expression it cannot hide
// a command).
func (p *parser) number() {
	if r := p.peek(); IsDash(r) || r == '+' {
		p.advance()
	}
	for !p.eof() {
		r, r2 := p.peek(), p.peek2()
		switch {
		case isIdentFollow(r):
			exp := r == 'e' || r == 'E'
			p.advance()
			if exp && (r2 == '+' || IsDash(r2)) && isDigit(p.peek2()) {
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
func (p *parser) postfix(onType bool) {
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
func (p *parser) member(start int) {
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
	folded := Fold(name)
	switch {
	case !lit && call:
		p.dynamicf(start, "calls a method named by an expression")
	case lit && pwshDynamicMembers[folded]:
		p.dynamicf(start, ".%s runs or loads code rules cannot see", clip.To(name, 40))
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
func (p *parser) callArgs() int {
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
func (p *parser) binaryOperator() bool {
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
	case IsDash(r) && isIdentStart(r2):
		w, end := p.dashWord()
		if !pwshBinaryWords[w] {
			return false
		}
		p.pos = end
	case IsDash(r) && r2 != '=':
		p.advance()
	default:
		return false
	}
	return true
}

// assignment reads an assignment operator, if one is next.
func (p *parser) assignment() bool {
	r, r2 := p.peek(), p.peek2()
	switch {
	case r == '=':
		p.pos++
	case (r == '+' || r == '*' || r == '/' || r == '%') && r2 == '=':
		p.pos += 2
	case IsDash(r) && r2 == '=':
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
func (p *parser) typeLiteral() string {
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
func (p *parser) typeName(check bool) string {
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
		p.dynamicf(start, "the .NET type [%s] runs or loads code rules cannot see", clip.To(name, 80))
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
					p.dynamicf(s, "the .NET type [%s] runs or loads code rules cannot see", clip.To(n, 80))
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
func (p *parser) attributeArgs() {
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
