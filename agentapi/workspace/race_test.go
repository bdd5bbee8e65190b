package workspace_test

import (
	"bytes"
	"context"
	"errors"
	"io"
	"os"
	"path/filepath"
	"sync"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/shellbox/shellbox/agentapi/workspace"
	"github.com/shellbox/shellbox/errdefs"
)

// unblockFIFOs opens each of names for writing, without blocking: a
// reader blocked opening one of them then returns.
func unblockFIFOs(names ...string) {
	for _, n := range names {
		if fd, err := unix.Open(n, unix.O_WRONLY|unix.O_NONBLOCK, 0); err == nil {
			unix.Close(fd)
		}
	}
}

// TestPackNeverBlocksOnASwappedFIFO: a process of the sandbox swapping a
// directory and a FIFO (rename(2) with RENAME_EXCHANGE) while Pack walks
// them never makes Pack open the FIFO as a directory: an open(2) of a
// FIFO for reading blocks until a writer comes, whatever ctx says.
func TestPackNeverBlocksOnASwappedFIFO(t *testing.T) {
	src := emptyDir(t, "src")
	mkdir(t, src, "d", 0o755)
	write(t, src, "d/f", "f", 0o644)
	if err := syscall.Mkfifo(filepath.Join(src, "p"), 0o600); err != nil {
		t.Fatal(err)
	}
	d, p := filepath.Join(src, "d"), filepath.Join(src, "p")
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			select {
			case <-stop:
				return
			default:
			}
			unix.Renameat2(unix.AT_FDCWD, d, unix.AT_FDCWD, p, unix.RENAME_EXCHANGE)
		}
	}()
	defer func() {
		close(stop)
		wg.Wait()
	}()
	done := make(chan error, 1)
	go func() {
		deadline := time.Now().Add(time.Second)
		for time.Now().Before(deadline) {
			_, err := workspace.Pack(context.Background(), src, io.Discard, workspace.Limits{})
			if err != nil && !errors.Is(err, errdefs.ErrUnavailable) && !errors.Is(err, os.ErrNotExist) {
				done <- err
				return
			}
		}
		done <- nil
	}()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("Pack: %v", err)
		}
	case <-time.After(10 * time.Second):
		close(stop)
		wg.Wait()
		stop = make(chan struct{})
		unblockFIFOs(d, p)
		<-done
		t.Fatal("Pack blocked opening a FIFO swapped in for a directory")
	}
}

// TestImportNeverBlocksOnASwappedFIFO: the same, for a process swapping a
// FIFO in for the scratch directory of an Import, or for a directory the
// stream made in it.
func TestImportNeverBlocksOnASwappedFIFO(t *testing.T) {
	src := emptyDir(t, "src")
	mkdir(t, src, "d", 0o755)
	write(t, src, "d/f", "f", 0o644)
	s := pack(t, src)
	root := emptyDir(t, "root")
	q := filepath.Join(root, "q")
	if err := syscall.Mkfifo(q, 0o600); err != nil {
		t.Fatal(err)
	}
	var fifos sync.Map // every FIFO made, to unblock
	fifos.Store(q, true)
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			select {
			case <-stop:
				return
			default:
			}
			scratches, _ := filepath.Glob(filepath.Join(root, ".shellbox-import-*"))
			for _, sc := range scratches {
				p := filepath.Join(sc, "p")
				if syscall.Mkfifo(p, 0o600) == nil {
					fifos.Store(p, true)
				}
				unix.Renameat2(unix.AT_FDCWD, filepath.Join(sc, "d"), unix.AT_FDCWD, p, unix.RENAME_EXCHANGE)
				unix.Renameat2(unix.AT_FDCWD, sc, unix.AT_FDCWD, q, unix.RENAME_EXCHANGE)
			}
		}
	}()
	defer func() {
		close(stop)
		wg.Wait()
	}()
	done := make(chan struct{})
	go func() {
		defer close(done)
		deadline := time.Now().Add(time.Second)
		for time.Now().Before(deadline) {
			workspace.Import(context.Background(), root, bytes.NewReader(s), workspace.Limits{})
		}
	}()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		for {
			var names []string
			fifos.Range(func(k, _ any) bool { names = append(names, k.(string)); return true })
			unblockFIFOs(names...)
			select {
			case <-done:
				t.Fatal("Import blocked opening a FIFO swapped in for a directory")
			case <-time.After(100 * time.Millisecond):
			}
		}
	}
}
