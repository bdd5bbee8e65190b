package pwsh

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"unicode"
	"unicode/utf8"

	"github.com/shellbox/shellbox/internal/clip"
)

// session is the state a pwsh process shares between its scripts
// (Invoke-Expression runs in it; pwsh -Command starts a new one).
type session struct {
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

func (s *session) define(name, target string) error {
	k := Fold(name)
	if s.aliases == nil {
		s.aliases = map[string][]string{}
	}
	ts, ok := s.aliases[k]
	if !ok && len(s.aliases) >= maxPwshAliases {
		return fmt.Errorf("%w: more than %d aliases defined", ErrTooComplex, maxPwshAliases)
	}
	for _, t := range ts {
		if Fold(t) == Fold(target) {
			return nil
		}
	}
	if len(ts) >= maxPwshAliasTargets {
		return fmt.Errorf("%w: alias %s defined more than %d times", ErrTooComplex, clip.To(name, 40), maxPwshAliasTargets)
	}
	s.aliases[k] = append(ts, target)
	return nil
}

// Parse reads src, the script of a pwsh process of its own (the pwsh tool,
// pwsh -Command), into the commands it would run, in reading order, each
// one before what it runs (an Invoke-Expression before the commands of its
// string). An error means src cannot be read statically: a syntax error, a
// construct the reader does not know, or a bound hit (those wrap
// ErrTooComplex); it names opts.Via.
//
// A script that defines aliases (Set-Alias, New-Alias) is read twice, as an
// alias applies wherever it is used, also above its definition in the text:
// the commands returned are those of the second reading.
func Parse(src string, opts Options) ([]Command, error) {
	return AppendParse(nil, src, opts)
}

// AppendParse is Parse appending the commands to dst, for a caller that
// reuses a slice; on an error dst is returned as it was.
func AppendParse(dst []Command, src string, opts Options) ([]Command, error) {
	if opts.Depth == 0 && len(src) > maxScriptBytes {
		return dst, fmt.Errorf("%w: longer than %d bytes", ErrTooComplex, maxScriptBytes)
	}
	if opts.Depth > 0 && len(src) > maxInnerBytes {
		return dst, fmt.Errorf("%s: %w: a script longer than %d bytes", opts.Via, ErrTooComplex, maxInnerBytes)
	}
	if strings.IndexByte(src, 0) >= 0 {
		return dst, errors.New("pwsh: the command contains a NUL character")
	}
	if dst == nil {
		dst = make([]Command, 0, 4)
	}
	r := &reader{cmds: dst, mark: len(dst), budget: opts.Budget}
	r.chains = r.chainBuf[:0]
	if r.budget == nil {
		r.budget = &Budget{}
	}
	if err := r.parse(src, opts); err != nil {
		return dst, err
	}
	if len(r.sess.aliases) > 0 {
		r.cmds = r.cmds[:r.mark]
		if err := r.parse(src, opts); err != nil {
			return dst, err
		}
	}
	return r.cmds, nil
}

// reader is the state one Parse shares between the parsers of its script,
// its subexpressions and the scripts it runs.
type reader struct {
	cmds   []Command
	mark   int // where this Parse's commands start in cmds
	budget *Budget
	sess   session // Invoke-Expression runs in the session of its script
	// chains hold the Command.Scripts of the scripts read (in chainBuf
	// while it lasts: most Parses need a few); last is the latest.
	chains   []string
	last     []string
	chainBuf [4]string
}

// chain is parent with via appended: the Command.Scripts of a script read
// in the script of parent.
func (r *reader) chain(parent []string, via string) []string {
	n := len(parent) + 1
	if l := r.last; len(l) == n && l[n-1] == via && slices.Equal(l[:n-1], parent) {
		return l // a sibling's
	}
	if len(r.chains)+n > cap(r.chains) {
		r.last = append(parent[:len(parent):len(parent)], via)
		return r.last
	}
	s := len(r.chains)
	r.chains = append(append(r.chains, parent...), via)
	r.last = r.chains[s : s+n : s+n]
	return r.last
}

func (r *reader) parse(src string, opts Options) error {
	p := &parser{r: r, sess: &r.sess, src: src, depth: opts.Depth, via: opts.Via}
	if !p.charge(len(src)) {
		return p.err
	}
	p.stmts(0)
	if p.err != nil {
		if opts.Via != "" {
			return fmt.Errorf("%s: %w", opts.Via, p.err)
		}
		return p.err
	}
	return nil
}

// parser reads one script (or the text of one $(...) in a string). On
// the first error it records it and jumps to the end of its input, so every
// loop ends.
type parser struct {
	r     *reader
	sess  *session
	src   string
	pos   int
	nest  int // constructs open at once (bounds the recursion)
	depth int // wrappers around the script (Invoke-Expression, pwsh -c, ...)
	via   string
	// scripts are the scripts this one is read in below the top (Command.Scripts).
	scripts []string
	err     error
}

func (p *parser) charge(n int) bool {
	p.r.budget.work += n
	if p.r.budget.work > maxWork {
		p.fail(fmt.Errorf("%w: more than %d bytes to read", ErrTooComplex, maxWork))
		return false
	}
	return true
}

func (p *parser) fail(err error) {
	if p.err == nil {
		p.err = err
	}
	p.pos = len(p.src)
}

func (p *parser) failf(format string, args ...any) {
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

// step counts one turn of a loop of the reader against maxSteps: every
// turn reads something, and this bound makes sure of it.
func (p *parser) step() bool {
	p.r.budget.steps++
	if p.r.budget.steps > maxSteps {
		p.fail(fmt.Errorf("%w: more than %d steps", ErrTooComplex, maxSteps))
		return false
	}
	return true
}

func (p *parser) enter() bool {
	if p.nest >= maxNesting {
		p.fail(fmt.Errorf("%w: nested more than %d deep", ErrTooComplex, maxNesting))
		return false
	}
	p.nest++
	return true
}

func (p *parser) leave() { p.nest-- }

// add adds a command found in the script (at the script's depth unless sc
// says deeper).
func (p *parser) add(sc Command) {
	if p.err != nil {
		return
	}
	if len(p.r.cmds)-p.r.mark >= maxCommands {
		p.fail(fmt.Errorf("%w: more than %d simple commands", ErrTooComplex, maxCommands))
		return
	}
	if sc.Depth == 0 {
		sc.Depth = p.depth
	}
	sc.Scripts = p.scripts
	p.r.cmds = append(p.r.cmds, sc)
}

// dynamicf adds a command rules cannot read, spanning start to here.
func (p *parser) dynamicf(start int, format string, args ...any) {
	end := max(p.pos, start)
	p.add(Command{Dynamic: true, Text: clip.To(strings.TrimSpace(p.src[start:min(end, len(p.src))]), maxTextBytes),
		Via: p.via, Why: fmt.Sprintf(format, args...)})
}

// sub reads text (the inside of a $(...) in a string or word) as
// statements of this script.
func (p *parser) sub(text string) {
	if p.err != nil || !p.enter() {
		return
	}
	defer p.leave()
	c := &parser{r: p.r, sess: p.sess, src: text, nest: p.nest, depth: p.depth, via: p.via, scripts: p.scripts}
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

func (p *parser) eof() bool { return p.pos >= len(p.src) }

// at is the rune at byte offset i and its size (0, 0 past the end).
func (p *parser) at(i int) (rune, int) {
	if i >= len(p.src) || i < 0 {
		return 0, 0
	}
	if c := p.src[i]; c < utf8.RuneSelf {
		return rune(c), 1
	}
	return utf8.DecodeRuneInString(p.src[i:])
}

func (p *parser) peek() rune { r, _ := p.at(p.pos); return r }

// peek2 is the rune after the current one.
func (p *parser) peek2() rune {
	_, n := p.at(p.pos)
	r, _ := p.at(p.pos + n)
	return r
}

func (p *parser) advance() {
	_, n := p.at(p.pos)
	p.pos += max(n, 1)
}

func (p *parser) hasPrefix(s string) bool { return strings.HasPrefix(p.src[p.pos:], s) }

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

// IsDash reports whether r is a dash PowerShell reads as one before a
// parameter or an operator: -, and the en dash, em dash and horizontal bar.
func IsDash(r rune) bool { return r == '-' || r == 0x2013 || r == 0x2014 || r == 0x2015 }

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
func (p *parser) skipSpace(nl bool) {
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
