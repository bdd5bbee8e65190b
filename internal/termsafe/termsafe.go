// Package termsafe prints text that came from commands to an operator's
// terminal without letting it drive the terminal: control characters
// (escape sequences that set the title, clear the screen, write the
// clipboard with OSC 52, ...) are shown, not sent.
package termsafe

import (
	"fmt"
	"io"
	"os"
	"strings"
	"unicode/utf8"
)

// Escape returns s with every control character but newline and tab
// rendered visibly: C0 controls and DEL as \xHH (ESC is \x1b), C1 controls
// (U+0080–U+009F) as \uHHHH, and each byte that is not UTF-8 as \xHH.
// Text without such characters is returned unchanged. A JSON document stays
// valid JSON (it holds no raw C0 controls, and \uHHHH is a JSON escape).
func Escape(s string) string {
	if !needsEscape(s) {
		return s
	}
	var b strings.Builder
	b.Grow(len(s) + 16)
	for i := 0; i < len(s); {
		r, size := utf8.DecodeRuneInString(s[i:])
		switch {
		case r == utf8.RuneError && size == 1:
			fmt.Fprintf(&b, `\x%02x`, s[i])
		case r == '\n' || r == '\t':
			b.WriteRune(r)
		case r < 0x20 || r == 0x7f:
			fmt.Fprintf(&b, `\x%02x`, r)
		case r >= 0x80 && r <= 0x9f:
			fmt.Fprintf(&b, `\u%04x`, r)
		default:
			b.WriteString(s[i : i+size])
		}
		i += size
	}
	return b.String()
}

// Visible is Escape, with the characters that reorder or hide text also
// shown as \uHHHH: the soft hyphen, bidi controls and marks, zero-width
// characters, the line and paragraph separators, word joiners and the
// BOM (the set the console marks, server/ui/app.js's SUSPECT). For text
// an operator decides on: what the terminal shows is what runs.
func Visible(s string) string {
	s = Escape(s)
	var b strings.Builder
	b.Grow(len(s))
	for _, r := range s {
		if hidesText(r) {
			fmt.Fprintf(&b, `\u%04x`, r)
		} else {
			b.WriteRune(r)
		}
	}
	return b.String()
}

func hidesText(r rune) bool {
	return r == 0xAD || r == 0x61C || r == 0x180E || r >= 0x200B && r <= 0x200F ||
		r >= 0x2028 && r <= 0x202E || r >= 0x2060 && r <= 0x2069 || r == 0xFEFF
}

func needsEscape(s string) bool {
	for i := 0; i < len(s); i++ {
		c := s[i]
		if (c < 0x20 && c != '\n' && c != '\t') || c == 0x7f {
			return true
		}
		if c >= utf8.RuneSelf {
			// C1 controls are U+0080–U+009F: c2 80 … c2 9f in UTF-8.
			if c == 0xc2 && i+1 < len(s) && s[i+1] >= 0x80 && s[i+1] <= 0x9f {
				return true
			}
		}
	}
	return !utf8.ValidString(s)
}

// Writer returns w itself, or, when w is a terminal, a writer that passes
// every write through Escape. Each write should hold whole characters (a
// character split across writes is shown as its bytes).
func Writer(w io.Writer) io.Writer {
	f, ok := w.(*os.File)
	if !ok || !IsTerminal(f) {
		return w
	}
	return escaper{w}
}

type escaper struct{ w io.Writer }

func (e escaper) Write(p []byte) (int, error) {
	if _, err := io.WriteString(e.w, Escape(string(p))); err != nil {
		return 0, err
	}
	return len(p), nil
}
