package termsafe

import (
	"bytes"
	"encoding/json"
	"os"
	"testing"
)

func TestEscape(t *testing.T) {
	cases := []struct{ in, want string }{
		{"plain text\n\twith tab", "plain text\n\twith tab"},
		{"h\u00e9 \u2603 \U0001F600 \uFFFD", "h\u00e9 \u2603 \U0001F600 \uFFFD"},
		{"\x1b]0;pwned\x07title", `\x1b]0;pwned\x07title`},
		{"\x1b[2J\x1b[H", `\x1b[2J\x1b[H`},
		{"\x1b]52;c;ZWNobyBoaQ==\x07", `\x1b]52;c;ZWNobyBoaQ==\x07`},
		{"a\rb\bc\x00d\x7f", `a\x0db\x08c\x00d\x7f`},
		{"8-bit CSI \u009b2J and OSC \u009d0;x\u009c", `8-bit CSI \u009b2J and OSC \u009d0;x\u009c`},
		{"bad \xff byte", `bad \xff byte`},
	}
	for _, c := range cases {
		if got := Escape(c.in); got != c.want {
			t.Errorf("Escape(%q) = %q, want %q", c.in, got, c.want)
		}
	}
}

// TestEscapeKeepsJSON: escaped JSON is still JSON and decodes to the text.
func TestEscapeKeepsJSON(t *testing.T) {
	text := "out \x1b]52;c;eA==\x07 \u009b2J done"
	b, _ := json.Marshal(map[string]string{"text": text})
	var v map[string]string
	if err := json.Unmarshal([]byte(Escape(string(b))), &v); err != nil || v["text"] != text {
		t.Fatalf("%s: %v %q", Escape(string(b)), err, v["text"])
	}
}

// TestWriter: only a terminal gets escapes; a pipe or buffer gets the
// bytes as they are.
func TestWriter(t *testing.T) {
	var buf bytes.Buffer
	if w := Writer(&buf); w != &buf {
		t.Fatal("a buffer was wrapped")
	}
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	defer w.Close()
	if got := Writer(w); got != w {
		t.Fatal("a pipe was wrapped")
	}
	var out bytes.Buffer
	e := escaper{&out}
	if n, err := e.Write([]byte("\x1b[2Jok\n")); n != 7 || err != nil || out.String() != `\x1b[2Jok`+"\n" {
		t.Fatalf("escaper: %d %v %q", n, err, out.String())
	}
}
