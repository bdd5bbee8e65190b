package termsafe

import (
	"fmt"
	"os"
	"strings"
	"testing"

	"golang.org/x/sys/unix"
)

// openPTY opens a pseudo-terminal pair.
func openPTY(t *testing.T) (master, slave *os.File) {
	m, err := os.OpenFile("/dev/ptmx", os.O_RDWR|unix.O_NOCTTY, 0)
	if err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatalf("no pseudo-terminal: %v", err)
		}
		t.Skipf("no pseudo-terminal on this machine (%v); CI runs it", err)
	}
	t.Cleanup(func() { m.Close() })
	if err := unix.IoctlSetPointerInt(int(m.Fd()), unix.TIOCSPTLCK, 0); err != nil {
		t.Fatal(err)
	}
	n, err := unix.IoctlGetInt(int(m.Fd()), unix.TIOCGPTN)
	if err != nil {
		t.Fatal(err)
	}
	s, err := os.OpenFile(fmt.Sprintf("/dev/pts/%d", n), os.O_RDWR|unix.O_NOCTTY, 0)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return m, s
}

// TestWriterOnATerminal: what a terminal receives through Writer holds no
// escape sequence of the command's.
func TestWriterOnATerminal(t *testing.T) {
	m, s := openPTY(t)
	if !IsTerminal(s) {
		t.Fatal("a pty is not a terminal")
	}
	if _, err := fmt.Fprintln(Writer(s), "before\x1b]52;c;ZXZpbA==\x07\x1b[2Jafter"); err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 4096)
	n, err := m.Read(buf)
	if err != nil {
		t.Fatal(err)
	}
	got := string(buf[:n])
	if strings.ContainsRune(got, 0x1b) || strings.ContainsRune(got, 0x07) || !strings.Contains(got, `before\x1b]52;c;ZXZpbA==\x07\x1b[2Jafter`) {
		t.Fatalf("the terminal got %q", got)
	}
}
