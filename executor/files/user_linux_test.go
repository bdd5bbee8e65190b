package files

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/shellbox/shellbox/executor"
)

func mountTmpfs(dir, opts string) error { return unix.Mount("tmpfs", dir, "tmpfs", 0, opts) }
func unmount(dir string) error          { return unix.Unmount(dir, unix.MNT_DETACH) }

// TestAsUser: as root with a Tree user, what an upload creates is the
// user's, and the user's permissions apply (a root-only directory is
// refused), as for the agent in a sandbox.
func TestAsUser(t *testing.T) {
	t.Run("setfsuid", testAsUser)
	t.Run("effective-ids", func(t *testing.T) {
		// gVisor's path: the thread's effective ids.
		forceEffectiveIDs = true
		defer func() { forceEffectiveIDs = false }()
		testAsUser(t)
	})
}

func testAsUser(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root to switch filesystem ids")
	}
	root := t.TempDir()
	os.Chmod(filepath.Dir(root), 0o755)
	os.Chmod(root, 0o755)
	if err := os.Chown(root, 4242, 4243); err != nil {
		t.Fatal(err)
	}
	os.Mkdir(filepath.Join(root, "rootonly"), 0o700)
	tr := Tree{Root: root, UID: 4242, GID: 4243}
	ctx := context.Background()
	if _, err := tr.Put(ctx, "a/b/f", strings.NewReader("x"), PutOptions{}); err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{"a", "a/b", "a/b/f"} {
		fi, err := os.Stat(filepath.Join(root, p))
		if err != nil {
			t.Fatal(err)
		}
		st := fi.Sys().(*syscall.Stat_t)
		if st.Uid != 4242 || st.Gid != 4243 {
			t.Errorf("%s owned by %d:%d, want 4242:4243", p, st.Uid, st.Gid)
		}
	}
	_, err := tr.Put(ctx, "rootonly/f", strings.NewReader("x"), PutOptions{})
	wantErr(t, err, executor.ErrInvalid, "rootonly", "permission denied")
	// The thread went back to root: the test's own files are root's.
	f := filepath.Join(t.TempDir(), "after")
	os.WriteFile(f, nil, 0o644)
	if fi, _ := os.Stat(f); fi.Sys().(*syscall.Stat_t).Uid != 0 {
		t.Error("a file made after an upload is not root's")
	}
}
