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
//
// The files: pwsh.go (entry points, bounds, characters), pwsh_statements.go
// (statements, pipelines, commands, redirections), pwsh_words.go (words,
// strings, variables), pwsh_expressions.go (expressions, members, types),
// pwsh_command.go (name resolution and wrappers), pwsh_names.go (PowerShell's
// names: aliases, dynamic types and members), pwsh_match.go (rules for pwsh
// commands).

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
