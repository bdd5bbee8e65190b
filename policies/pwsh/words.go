package pwsh

import (
	"strings"
	"unicode"
	"unicode/utf8"
)

// The pwsh reader: words, strings, here-strings, escapes and variables.

// generic reads a bare word: up to a character that ends a token, with
// quoted parts, backtick escapes and $ expansions inside. lit is false when
// it expands something (the word is then returned as written).
func (p *parser) generic() (string, bool) {
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
func (p *parser) escape(b *strings.Builder) {
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
func (p *parser) dollar(here bool) bool {
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
func (p *parser) stringSubexpression(here bool) string {
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

func (p *parser) singleQuoted(b *strings.Builder) {
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
func (p *parser) doubleQuoted(b *strings.Builder) bool {
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
func (p *parser) quoted() (string, bool) {
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
func (p *parser) hereString() (string, bool) {
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
func (p *parser) varName() string {
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
