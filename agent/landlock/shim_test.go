package landlock

import (
	"bytes"
	"debug/elf"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"
)

// TestProgram: the shim is a static ELF64 executable whose one loadable
// segment is the whole file, read+execute, entered at the code, with a
// non-executable stack; architectures without a shim say so.
func TestProgram(t *testing.T) {
	prog, err := Program("amd64")
	if err != nil {
		t.Fatal(err)
	}
	f, err := elf.NewFile(bytes.NewReader(prog))
	if err != nil {
		t.Fatal(err)
	}
	if f.Class != elf.ELFCLASS64 || f.Data != elf.ELFDATA2LSB || f.Type != elf.ET_EXEC || f.Machine != elf.EM_X86_64 {
		t.Errorf("header: %v %v %v %v", f.Class, f.Data, f.Type, f.Machine)
	}
	if f.Entry != base+codeOff || len(prog) != codeOff+len(shimAMD64) {
		t.Errorf("entry %#x, size %d; want %#x, %d", f.Entry, len(prog), base+codeOff, codeOff+len(shimAMD64))
	}
	var load, stack int
	for _, p := range f.Progs {
		switch p.Type {
		case elf.PT_LOAD:
			load++
			if p.Off != 0 || p.Vaddr != base || p.Filesz != uint64(len(prog)) || p.Memsz != p.Filesz || p.Flags != elf.PF_R|elf.PF_X {
				t.Errorf("PT_LOAD %+v", p.ProgHeader)
			}
		case elf.PT_GNU_STACK:
			stack++
			if p.Flags&elf.PF_X != 0 {
				t.Errorf("executable stack: %+v", p.ProgHeader)
			}
		default:
			t.Errorf("unexpected segment %+v", p.ProgHeader)
		}
	}
	if load != 1 || stack != 1 {
		t.Errorf("%d PT_LOAD, %d PT_GNU_STACK; want 1 each", load, stack)
	}
	if _, err := Program("arm64"); !errors.Is(err, ErrUnsupported) {
		t.Errorf("Program(arm64): %v, want ErrUnsupported", err)
	}
}

// shim returns the shim, or skips where this host cannot run it.
func shim(t *testing.T) *os.File {
	t.Helper()
	if _, ok := programs[runtime.GOARCH]; !ok {
		t.Skipf("no shim for %s: the agent starts commands without it (Shim: ErrUnsupported)", runtime.GOARCH)
	}
	if abi := ABI(); abi < MinABI {
		t.Skipf("Landlock ABI %d on this kernel, the shim needs %d: the agent starts commands without it", abi, MinABI)
	}
	f, err := Shim()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.Close() })
	return f
}

// command is the shim running path with argv, as executor/local starts it.
func command(f *os.File, path string, argv ...string) *exec.Cmd {
	c := exec.Command("/proc/self/fd/3")
	c.Args = append([]string{Name, path}, argv...)
	c.ExtraFiles = []*os.File{f}
	c.Env = []string{}
	return c
}

// run runs the shim and returns its combined output and exit code.
func run(t *testing.T, c *exec.Cmd) (string, int) {
	t.Helper()
	var out bytes.Buffer
	c.Stdout, c.Stderr = &out, &out
	err := c.Run()
	var ee *exec.ExitError
	if err != nil && !errors.As(err, &ee) {
		t.Fatalf("%q: %v", c.Args, err)
	}
	return out.String(), c.ProcessState.ExitCode()
}

func lookPath(t *testing.T, name string) string {
	t.Helper()
	p, err := exec.LookPath(name)
	if err != nil {
		t.Skipf("no %s on this host", name)
	}
	return p
}

// TestShimExec: the shim runs the command in its own process with the
// argv and environment it was given, fd 3 closed; a command that cannot
// run gets 127 (not found) or 126, with a line on stderr; the command's
// exit status is its own.
func TestShimExec(t *testing.T) {
	f := shim(t)
	sh := lookPath(t, "sh")

	c := command(f, sh, "my-argv0", "-c", `printf '%s|' "$@"; tr '\0' '|' </proc/$$/cmdline; echo; echo "FOO=$FOO"; test -e /proc/$$/fd/3 && echo fd3-"open"; readlink /proc/$$/exe; exit 7`, "x", "a b", "")
	c.Env = []string{"FOO=bar baz"}
	out, code := run(t, c)
	exe, err := filepath.EvalSymlinks(sh)
	if err != nil {
		t.Fatal(err)
	}
	want := "a b||my-argv0|-c|" // "$@" then the shell's own argv, from argv0 on
	if code != 7 || !strings.HasPrefix(out, want) || !strings.Contains(out, "\nFOO=bar baz\n") ||
		strings.Contains(out, "fd3-open") || !strings.HasSuffix(out, "\n"+exe+"\n") {
		t.Errorf("exit %d, output:\n%q\nwant exit 7, %q..., FOO=bar baz, no fd 3, exe %s", code, out, want, exe)
	}

	// The environment is exactly the one given.
	env := lookPath(t, "env")
	c = command(f, env, "env")
	c.Env = []string{"A=1", "B=two words"}
	if out, code := run(t, c); code != 0 || out != "A=1\nB=two words\n" {
		t.Errorf("env: exit %d, %q", code, out)
	}

	for _, tc := range []struct {
		name string
		args []string
		code int
		msg  string
	}{
		{"missing", []string{"/nonexistent/cmd", "cmd"}, 127, Name + ": execve /nonexistent/cmd: errno 2\n"},
		{"directory", []string{"/", "x"}, 126, Name + ": execve /: errno 13\n"},
		{"no argv0", []string{sh}, 126, Name + ": usage: "},
		{"no path", nil, 126, Name + ": usage: "},
	} {
		c := command(f, "")
		c.Args = append([]string{Name}, tc.args...)
		out, code := run(t, c)
		if code != tc.code || !strings.HasPrefix(out, tc.msg) {
			t.Errorf("%s: exit %d, %q; want %d, %q", tc.name, code, out, tc.code, tc.msg)
		}
	}
}

// TestShimDomain: a process started through the shim cannot open
// /proc/<pid>/mem of a process started through another shim (sibling
// domains), though it can its own children's (same domain); this process,
// outside every domain, can open either's. Renaming and linking across
// directories still work in a domain, and so do forks.
func TestShimDomain(t *testing.T) {
	f := shim(t)
	sh := lookPath(t, "sh")
	lookPath(t, "sleep")

	victim := command(f, sh, "sh", "-c", "exec sleep 60")
	victim.Env = []string{"PATH=/usr/bin:/bin"}
	if err := victim.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() {
		victim.Process.Kill()
		victim.Wait()
	}()
	pid := strconv.Itoa(victim.Process.Pid)
	// Wait for the exec of sleep: until then the victim is the shim, in no
	// domain yet, or sh.
	deadline := time.Now().Add(10 * time.Second)
	for {
		b, _ := os.ReadFile("/proc/" + pid + "/comm")
		if string(b) == "sleep\n" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the victim did not exec sleep: comm %q", b)
		}
		time.Sleep(5 * time.Millisecond)
	}

	m, err := os.Open("/proc/" + pid + "/mem")
	if err != nil {
		t.Fatalf("outside every domain: open the victim's mem: %v", err)
	}
	m.Close()

	dir := t.TempDir()
	script := `
		exec 2>&1
		if (exec 3</proc/` + pid + `/mem); then echo other=open; else echo other=refused; fi
		sleep 60 & own=$!
		if (exec 3</proc/$own/mem); then echo own=open; else echo own=refused; fi
		kill $own
		cd ` + dir + ` && mkdir a b && : >a/f && ln a/f b/g && mv a/f b/f && echo refer=ok`
	c := command(f, sh, "sh", "-c", script)
	c.Env = []string{"PATH=/usr/bin:/bin", "LANG=C"}
	out, code := run(t, c)
	if code != 0 || !strings.Contains(out, "other=refused") || !strings.Contains(out, "Permission denied") ||
		!strings.Contains(out, "own=open") || !strings.Contains(out, "refer=ok") {
		t.Errorf("exit %d:\n%s\nwant other=refused (Permission denied), own=open, refer=ok", code, out)
	}
	if _, err := os.Stat(filepath.Join(dir, "b", "g")); err != nil {
		t.Error(err)
	}
}
