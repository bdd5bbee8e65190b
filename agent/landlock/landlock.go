// Package landlock puts every command of a sandbox in a Landlock domain of
// its own.
//
// Every call's commands run as the same user, so without more, one call's
// process may open /proc/<pid>/mem of another call's and write into it (the
// agent's seccomp filter, agent/notrace.ConfineCommands, stops ptrace and process_vm_*,
// not an open): a background task could make a process of a call that holds
// a network grant connect for it. Landlock fences that: a process in a
// Landlock domain may ptrace-access (the check /proc/<pid>/mem, and
// /proc/<pid>/{fd,environ,maps,cwd,...}, go through) only processes of its
// own domain or of domains nested in it. So if each command enters a
// domain of its own, the calls are sibling domains and none reaches
// another's memory, while the agent, outside every domain, reaches all.
//
// A process can only put itself in a domain, and the agent must not
// (Landlock binds a thread, and an agent thread that entered a domain
// would have to die). So each command starts through a shim, which enters
// a new domain and execs the command in the same process: pid, process
// group, credentials, tag group and exit status are the command's own, and
// /proc/self/exe and $0 are the command's. The shim is not a Go program:
// under a fork storm's pids pressure a Go runtime cannot create the threads
// it starts with ("fatal error: newosproc"), where bash retries its forks.
// It is a static ELF of a few hundred bytes of machine code (no libc, one
// thread, no allocation; testdata/shim_amd64.s), generated here as bytes
// and run from a sealed memfd (Shim), so nothing needs to be installed in
// the sandbox and a command cannot change it. It does:
//
//	prctl(PR_SET_NO_NEW_PRIVS, 1)            (the sandbox has it set already)
//	fd = landlock_create_ruleset({handled_access_fs: REFER})
//	landlock_add_rule(fd, PATH_BENEATH, {allowed_access: REFER, parent_fd: open("/")})
//	landlock_restrict_self(fd); close(fd); close(3)
//	execve(argv[1], &argv[2], envp)
//
// and on a failure writes one line to stderr ("shellbox-landlock:
// landlock_restrict_self: errno 1") and exits 126, or 127 when the command
// does not exist.
//
// What the domain restricts besides ptrace access: a domain must handle
// some access right, and every domain that handles a filesystem right also
// refuses, whatever it handles, linking or renaming a file into another
// directory (LANDLOCK_ACCESS_FS_REFER is denied unless a rule allows it:
// `ln a/f b/`, rename(2) across directories, fail with EXDEV) and
// mounting. So the ruleset handles REFER alone and allows it beneath "/":
// what remains refused is mount(2) and its kin, which the commands cannot
// do anyway (no capabilities; the runtimes' seccomp profiles). That takes
// Landlock ABI 2 (Linux 5.19); with ABI 1 calls start without a domain.
// Signals and abstract unix sockets are not scoped: calls may still signal
// each other's processes, as processes of one user may.
package landlock

import (
	"bytes"
	"debug/elf"
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"runtime"

	"golang.org/x/sys/unix"
)

// Name is the shim's name: its memfd's and its argv[0], and the prefix of
// its messages.
const Name = "shellbox-landlock"

// MinABI is the Landlock ABI the shim's ruleset needs (it handles and
// allows LANDLOCK_ACCESS_FS_REFER).
const MinABI = 2

// ErrUnsupported is the error of Shim where the calls cannot have a domain
// each: no Landlock, one too old, or no shim for this architecture.
var ErrUnsupported = errors.New("landlock: unsupported")

// ABI returns the running kernel's Landlock ABI version, 0 when it has no
// Landlock (not built in, not enabled, or refused by a seccomp filter;
// gVisor has none).
func ABI() int {
	v, _, e := unix.Syscall(unix.SYS_LANDLOCK_CREATE_RULESET, 0, 0, unix.LANDLOCK_CREATE_RULESET_VERSION)
	if e != 0 {
		return 0
	}
	return int(v)
}

// programs holds the shim's machine code per GOARCH: position-independent,
// entered at its first byte with the initial process stack.
var programs = map[string]struct {
	machine elf.Machine
	code    []byte
}{
	"amd64": {machine: elf.EM_X86_64, code: shimAMD64},
}

// Program returns the shim for goarch as a static ELF64 executable, or an
// ErrUnsupported error when there is none (only amd64 has one: arm64's
// would need a machine to verify it on).
func Program(goarch string) ([]byte, error) {
	p, ok := programs[goarch]
	if !ok {
		return nil, fmt.Errorf("%w: no shim for %s", ErrUnsupported, goarch)
	}
	return elf64(p.machine, p.code), nil
}

// ELF64 layout: the file header, two program headers (the code, loaded
// read+execute at base with the headers; a non-executable stack), then the
// code, which starts at codeOff.
const (
	base     = 0x400000
	ehdrSize = 64
	phdrSize = 56
	phnum    = 2
	codeOff  = ehdrSize + phnum*phdrSize
)

// elf64 wraps code in a little-endian ELF64 executable for machine.
func elf64(machine elf.Machine, code []byte) []byte {
	size := uint64(codeOff + len(code))
	var b bytes.Buffer
	w := func(v any) { binary.Write(&b, binary.LittleEndian, v) } // bytes.Buffer writes do not fail
	// e_ident
	b.Write([]byte{0x7f, 'E', 'L', 'F', byte(elf.ELFCLASS64), byte(elf.ELFDATA2LSB), byte(elf.EV_CURRENT), byte(elf.ELFOSABI_NONE), 0, 0, 0, 0, 0, 0, 0, 0})
	w(uint16(elf.ET_EXEC))    // e_type
	w(uint16(machine))        // e_machine
	w(uint32(elf.EV_CURRENT)) // e_version
	w(uint64(base + codeOff)) // e_entry
	w(uint64(ehdrSize))       // e_phoff
	w(uint64(0))              // e_shoff: no sections
	w(uint32(0))              // e_flags
	w(uint16(ehdrSize))       // e_ehsize
	w(uint16(phdrSize))       // e_phentsize
	w(uint16(phnum))          // e_phnum
	w(uint16(64))             // e_shentsize
	w(uint16(0))              // e_shnum
	w(uint16(0))              // e_shstrndx
	// PT_LOAD: the whole file, read and execute.
	w(uint32(elf.PT_LOAD))
	w(uint32(elf.PF_R | elf.PF_X))
	w(uint64(0))    // p_offset
	w(uint64(base)) // p_vaddr
	w(uint64(base)) // p_paddr
	w(size)         // p_filesz
	w(size)         // p_memsz
	w(uint64(0x1000))
	// PT_GNU_STACK: the stack is not executable.
	w(uint32(elf.PT_GNU_STACK))
	w(uint32(elf.PF_R | elf.PF_W))
	for range 5 {
		w(uint64(0))
	}
	w(uint64(16))
	b.Write(code)
	return b.Bytes()
}

// Shim returns the shim for this kernel and architecture in a sealed,
// close-on-exec memfd, checked to work: run once, it entered a domain and
// reported a missing command as the shim does (exit 127). Start a command
// through it as Path "/proc/self/fd/3", with the file as ExtraFiles[0] and
// Args Name, the command's path, then the command's argv; the shim closes
// fd 3 before it execs the command (executor/local Config.ExecShim does
// this). The error wraps ErrUnsupported where calls cannot have a domain
// each (no Landlock, an ABI below MinABI, no shim for GOARCH); any other
// error is a shim that could not be made to run (a memfd that may not be
// executed: vm.memfd_noexec = 2).
func Shim() (*os.File, error) {
	if abi := ABI(); abi == 0 {
		return nil, fmt.Errorf("%w: the kernel has no Landlock", ErrUnsupported)
	} else if abi < MinABI {
		return nil, fmt.Errorf("%w: Landlock ABI %d, the shim needs %d (Linux 5.19)", ErrUnsupported, abi, MinABI)
	}
	prog, err := Program(runtime.GOARCH)
	if err != nil {
		return nil, err
	}
	f, err := memfd(prog)
	if err != nil {
		return nil, err
	}
	if err := check(f); err != nil {
		f.Close()
		return nil, err
	}
	return f, nil
}

// memfd returns prog in a sealed executable memfd.
func memfd(prog []byte) (*os.File, error) {
	const flags = unix.MFD_CLOEXEC | unix.MFD_ALLOW_SEALING
	// MFD_EXEC (Linux 6.3) says the memfd is meant to be executed, which
	// vm.memfd_noexec = 1 requires; older kernels refuse the flag and
	// make every memfd executable.
	fd, err := unix.MemfdCreate(Name, flags|unix.MFD_EXEC)
	if err == unix.EINVAL {
		fd, err = unix.MemfdCreate(Name, flags)
	}
	if err != nil {
		return nil, fmt.Errorf("landlock: memfd_create for the shim: %w", err)
	}
	f := os.NewFile(uintptr(fd), Name)
	if _, err := f.Write(prog); err != nil {
		f.Close()
		return nil, fmt.Errorf("landlock: write the shim: %w", err)
	}
	// Sealed: nothing, holding the fd or not, can change it.
	seals := unix.F_SEAL_SEAL | unix.F_SEAL_SHRINK | unix.F_SEAL_GROW | unix.F_SEAL_WRITE
	if _, err := unix.FcntlInt(f.Fd(), unix.F_ADD_SEALS, seals); err != nil {
		f.Close()
		return nil, fmt.Errorf("landlock: seal the shim: %w", err)
	}
	return f, nil
}

// check runs the shim on a command that does not exist: it must get as
// far as the execve, past every Landlock step, and exit 127.
func check(f *os.File) error {
	const missing = "/nonexistent/" + Name + "-check"
	c := exec.Command("/proc/self/fd/3")
	c.Args = []string{Name, missing, missing}
	c.ExtraFiles = []*os.File{f}
	c.Env = []string{}
	var out bytes.Buffer
	c.Stdout, c.Stderr = &out, &out
	err := c.Run()
	var ee *exec.ExitError
	if errors.As(err, &ee) && ee.ExitCode() == 127 && bytes.Contains(out.Bytes(), []byte("execve "+missing+": errno 2")) {
		return nil
	}
	msg := bytes.TrimSpace(out.Bytes())
	if len(msg) > 256 {
		msg = msg[:256]
	}
	return fmt.Errorf("landlock: the shim does not work: %v: %q", err, msg)
}
