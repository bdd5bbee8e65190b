package files

import (
	"archive/tar"
	"bytes"
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"testing"
	"unsafe"

	"golang.org/x/sys/unix"
)

// sysFchmodat2 is fchmodat2(2)'s number, the same on every architecture
// (Linux 6.6).
const sysFchmodat2 = 452

// denyFchmodat2 makes fchmodat2 fail with EPERM in every thread of the
// process, for good: what Docker's default seccomp profile, which does not
// list it, does under gVisor (--oci-seccomp). Under runc the same profile
// answers a syscall newer than it knows with ENOSYS.
func denyFchmodat2(t *testing.T) {
	t.Helper()
	filter := []unix.SockFilter{
		{Code: unix.BPF_LD | unix.BPF_W | unix.BPF_ABS, K: 0}, // seccomp_data.nr
		{Code: unix.BPF_JMP | unix.BPF_JEQ | unix.BPF_K, K: sysFchmodat2, Jt: 0, Jf: 1},
		{Code: unix.BPF_RET | unix.BPF_K, K: unix.SECCOMP_RET_ERRNO | uint32(unix.EPERM)},
		{Code: unix.BPF_RET | unix.BPF_K, K: unix.SECCOMP_RET_ALLOW},
	}
	prog := unix.SockFprog{Len: uint16(len(filter)), Filter: &filter[0]}
	if err := unix.Prctl(unix.PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0); err != nil {
		t.Fatalf("no_new_privs: %v", err)
	}
	if _, _, e := unix.Syscall(unix.SYS_SECCOMP, unix.SECCOMP_SET_MODE_FILTER, unix.SECCOMP_FILTER_FLAG_TSYNC, uintptr(unsafe.Pointer(&prog))); e != 0 {
		t.Fatalf("seccomp: %v", e)
	}
	cwd := unix.AT_FDCWD
	if _, _, e := unix.Syscall6(sysFchmodat2, uintptr(cwd), 0, 0, 0, 0, 0); e != unix.EPERM {
		t.Fatalf("fchmodat2 after the filter: %v, want EPERM", e)
	}
}

// TestTarDirectoriesWithoutFchmodat2: with fchmodat2 denied as under gVisor
// (EPERM), a tar's directories still get their modes, merged into an
// existing directory and renamed in as a new one (whose mode is the tar's
// "./"). os.Root.Chmod gave up on the EPERM there ("operation not
// permitted" for every directory of a tar upload). The test runs itself
// again in a process of its own: the filter cannot be lifted.
func TestTarDirectoriesWithoutFchmodat2(t *testing.T) {
	if os.Getenv("SHELLBOX_TEST_DENY_FCHMODAT2") != "1" {
		cmd := exec.Command(os.Args[0], "-test.run=^TestTarDirectoriesWithoutFchmodat2$", "-test.count=1", "-test.v")
		cmd.Env = append(os.Environ(), "SHELLBOX_TEST_DENY_FCHMODAT2=1")
		out, err := cmd.CombinedOutput()
		if err != nil || !bytes.Contains(out, []byte("--- PASS: TestTarDirectoriesWithoutFchmodat2")) {
			t.Fatalf("with fchmodat2 denied: %v\n%s", err, out)
		}
		return
	}
	denyFchmodat2(t)
	tr := newTree(t)
	if err := os.Mkdir(filepath.Join(tr.Root, "d"), 0o700); err != nil {
		t.Fatal(err)
	}
	// The condition: Go's own Root.Chmod fails here.
	if r, err := os.OpenRoot(tr.Root); err == nil {
		if err := r.Chmod("d", 0o755); !errors.Is(err, syscall.EPERM) {
			t.Logf("os.Root.Chmod with fchmodat2 denied: %v (no longer EPERM: Go changed)", err)
		}
		r.Close()
	}
	in := mkTar(t,
		&tar.Header{Typeflag: tar.TypeDir, Name: "./", Mode: 0o750},
		&tar.Header{Typeflag: tar.TypeDir, Name: "venv/", Mode: 0o755},
		&tar.Header{Typeflag: tar.TypeDir, Name: "venv/lib/", Mode: 0o755},
		&tar.Header{Typeflag: tar.TypeDir, Name: "venv/lib/python3.11/site-packages/", Mode: 0o751},
		reg("venv/lib/python3.11/site-packages/.keep"),
		&tar.Header{Typeflag: tar.TypeSymlink, Name: "venv/lib64", Linkname: "lib"},
		&tar.Header{Typeflag: tar.TypeDir, Name: "venv/empty/", Mode: 0o500},
	)
	want := map[string]os.FileMode{
		"venv":                              0o755,
		"venv/lib":                          0o755,
		"venv/lib/python3.11":               0o755, // made on the way
		"venv/lib/python3.11/site-packages": 0o751,
		"venv/empty":                        0o700, // the user keeps rwx
	}
	for _, dest := range []string{".", "fresh"} {
		w, err := tr.Put(context.Background(), dest, bytes.NewReader(in), PutOptions{Tar: true})
		if err != nil {
			t.Fatalf("into %s: %v", dest, err)
		}
		if w.Dirs != 4 || w.Files != 1 || w.Links != 1 {
			t.Errorf("into %s: written %+v", dest, w)
		}
		for name, mode := range want {
			fi, err := os.Lstat(filepath.Join(tr.Root, dest, name))
			if err != nil {
				t.Errorf("into %s: %v", dest, err)
			} else if !fi.IsDir() || fi.Mode().Perm() != mode {
				t.Errorf("into %s: %s is %v, want a directory %v", dest, name, fi.Mode(), mode)
			}
		}
	}
	if fi, err := os.Stat(filepath.Join(tr.Root, "fresh")); err != nil {
		t.Error(err)
	} else if fi.Mode().Perm() != 0o750 {
		t.Errorf("fresh is %v, want the tar root's 0750", fi.Mode())
	}
}
