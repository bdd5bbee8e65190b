package local

import (
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/shellbox/shellbox/internal/mountinfo"
	"github.com/shellbox/shellbox/internal/procscan"
)

// hierarchy is one cgroup hierarchy shellbox makes per-command cgroups in.
type hierarchy struct {
	v2     bool
	ctrl   string // v1: "freezer" or "pids"
	mount  mount
	parent string      // <mount>/<CgroupParent>
	pool   *cgroupPool // nil: no reuse, every cgroup is removed
}

// mount is a cgroupfs mount: where it is, and which cgroup of the hierarchy
// it shows (not "/" when a container got a subtree bind-mounted).
type mount struct {
	dir, root string
}

func (h *hierarchy) String() string {
	if h.v2 {
		return "cgroup2 " + h.parent
	}
	return "cgroup1 " + h.ctrl + " " + h.parent
}

// mounts lists the cgroup2 mounts and the v1 mount of each controller
// shellbox can use, from /proc/self/mountinfo.
func mounts() (v2 []mount, v1 map[string]mount, err error) {
	all, err := cgroupMounts()
	v1 = map[string]mount{}
	for _, cm := range all {
		if cm.v2 {
			v2 = append(v2, cm.mount)
			continue
		}
		for _, o := range cm.opts {
			if o == "freezer" || o == "pids" {
				if _, dup := v1[o]; !dup {
					v1[o] = cm.mount
				}
			}
		}
	}
	// The canonical pure-v2 mount first.
	for i, m := range v2 {
		if m.dir == "/sys/fs/cgroup" {
			v2[0], v2[i] = v2[i], v2[0]
		}
	}
	return v2, v1, err
}

// cgroupMount is one cgroupfs mount of /proc/self/mountinfo: cgroup2, or a
// v1 hierarchy with its options (the controllers among them).
type cgroupMount struct {
	mount
	v2   bool
	opts []string
}

// cgroupMounts lists the cgroup and cgroup2 mounts of this process.
func cgroupMounts() ([]cgroupMount, error) {
	all, err := mountinfo.Cgroups()
	out := make([]cgroupMount, 0, len(all))
	for _, c := range all {
		out = append(out, cgroupMount{mount: mount{dir: c.Dir, root: c.Root}, v2: c.V2, opts: c.Opts})
	}
	return out, err
}

// detect finds the hierarchy mode asks for, and a v1 fallback when the
// primary is v2 (clone3 into a cgroup can be refused at run time, e.g. under
// gVisor; the executor then falls back). Both nil means process group only.
func detect(mode CgroupMode, parent string) (primary, fallback *hierarchy, err error) {
	if mode == CgroupOff {
		return nil, nil, nil
	}
	v2, v1, err := mounts()
	if err != nil {
		if mode == CgroupAuto {
			return nil, nil, nil
		}
		return nil, nil, fmt.Errorf("local: Cgroup %s: %w", mode, err)
	}
	var errs []error
	var v1h *hierarchy
	if mode != CgroupV2 {
		for _, ctrl := range []string{"freezer", "pids"} {
			if m, ok := v1[ctrl]; ok {
				h := &hierarchy{ctrl: ctrl, mount: m, parent: filepath.Join(m.dir, parent), pool: &cgroupPool{}}
				if err := h.probe(); err != nil {
					errs = append(errs, err)
					continue
				}
				v1h = h
				break
			}
		}
	}
	if mode != CgroupV1 {
		for _, m := range v2 {
			h := &hierarchy{v2: true, mount: m, parent: filepath.Join(m.dir, parent), pool: &cgroupPool{}}
			if err := h.probe(); err != nil {
				errs = append(errs, err)
				continue
			}
			return h, v1h, nil
		}
	}
	if v1h != nil {
		return v1h, nil, nil
	}
	if mode == CgroupAuto {
		return nil, nil, nil
	}
	if len(errs) == 0 {
		errs = append(errs, errors.New("no usable cgroup mount"))
	}
	return nil, nil, fmt.Errorf("local: Cgroup %s: %w", mode, errors.Join(errs...))
}

// probe checks that per-command cgroups can be made under h.parent (and, on
// v2, killed with cgroup.kill).
func (h *hierarchy) probe() error {
	if err := os.MkdirAll(h.parent, 0o755); err != nil {
		return err
	}
	dir := filepath.Join(h.parent, cgroupName(newID()))
	if err := os.Mkdir(dir, 0o755); err != nil {
		return err
	}
	defer os.Remove(dir)
	if h.v2 {
		if _, err := os.Stat(filepath.Join(dir, "cgroup.kill")); err != nil {
			return fmt.Errorf("%s: no cgroup.kill (Linux < 5.14?): %w", h.mount.dir, err)
		}
	}
	return unix.Access(filepath.Join(dir, "cgroup.procs"), unix.W_OK)
}

// cgroup is one per-command cgroup. It is used by one command at a time:
// taken from its hierarchy's pool (or made) by launch, owned by that
// command's supervisor, and given back (release) once the command's tree is
// gone, or removed.
type cgroup struct {
	h    *hierarchy
	path string
	// Open for as long as the cgroup exists (-1 when not open, as for the
	// cgroups Cleanup finds): dir is the directory (CLONE_INTO_CGROUP on v2,
	// and its link count, which tells whether it has child cgroups); state
	// is cgroup.events on v2 (populated, frozen), read with pread so that a
	// check costs one system call. v1 has no cgroup.events, and its
	// cgroup.procs cannot be kept open: the kernel caches the pid list of an
	// open file for about a second, so a second read could miss a process.
	dir, state int
	// killed: kill ran on it (cgroup.kill, or a freeze), so it is never
	// reused (see cgroupPool).
	killed bool
}

// maxIdleCgroups bounds the empty cgroups a hierarchy keeps for reuse.
const maxIdleCgroups = 8

// cgroupPool keeps the empty cgroups of finished commands for the next ones:
// making and removing a cgroup (mkdir, open, rmdir) is a good part of a short
// command's overhead. A cgroup enters the pool only from its supervisor,
// after the command's leader has been reaped and its whole tree is gone
// (the kill loop has returned), so nothing refers to it any more; and only
// if it is in the state of a new one:
//
//   - it was never killed: no cgroup.kill was written to it (some kernels,
//     6.18 among them, SIGKILL at birth every process cloned with
//     CLONE_INTO_CGROUP into a cgroup that was ever killed that way) and, on
//     v1, it was never frozen;
//   - it is empty (v2: cgroup.events says populated 0, which counts child
//     cgroups too; v1: cgroup.procs is empty), not frozen (v2: frozen 0; v1
//     freezer: freezer.state THAWED), and has no child cgroups (a command
//     with the rights may have made some).
//
// The state checks run again when a cgroup is taken from the pool, and a
// cgroup that fails any check, or whose state cannot be read, is removed,
// never reused. Commands that run as root could still rewrite the control
// files of their own cgroup (pids.max, say) in ways these checks do not see;
// such a command can do as much to the server itself. The pool holds at most
// maxIdleCgroups, each with its descriptors open; Executor.Close drains
// the pools and removes their cgroups.
type cgroupPool struct {
	mu     sync.Mutex
	closed bool
	idle   []*cgroup
}

// take returns an idle cgroup, nil when there is none.
func (p *cgroupPool) take() *cgroup {
	if p == nil {
		return nil
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	n := len(p.idle)
	if n == 0 {
		return nil
	}
	c := p.idle[n-1]
	p.idle[n-1] = nil
	p.idle = p.idle[:n-1]
	return c
}

// put keeps c for reuse; false when the pool is closed or full.
func (p *cgroupPool) put(c *cgroup) bool {
	if p == nil {
		return false
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed || len(p.idle) >= maxIdleCgroups {
		return false
	}
	p.idle = append(p.idle, c)
	return true
}

// drain closes the pool (cgroups released later are removed) and removes
// the idle cgroups.
func (p *cgroupPool) drain() error {
	if p == nil {
		return nil
	}
	p.mu.Lock()
	p.closed = true
	idle := p.idle
	p.idle = nil
	p.mu.Unlock()
	var errs []error
	for _, c := range idle {
		if err := c.remove(); err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", c.path, err))
		}
	}
	return errors.Join(errs...)
}

// get returns an empty cgroup for one command: an idle one that still
// checks out, else a new one.
func (h *hierarchy) get() (*cgroup, error) {
	for {
		c := h.pool.take()
		if c == nil {
			break
		}
		if c.reusable() {
			return c, nil
		}
		c.remove() // an error leaves it for Cleanup
	}
	return h.create(cgroupName(newID()))
}

// release gives back the cgroup of a command whose leader was reaped and
// whose tree is gone: to the pool if it is as good as new, else it is
// removed. The caller must not use c afterwards.
func (c *cgroup) release() error {
	if !c.killed && c.reusable() && c.h.pool.put(c) {
		return nil
	}
	return c.remove()
}

// reusable reports whether c is in the state of a new cgroup: empty, not
// frozen, without child cgroups. Anything it cannot read counts as not.
func (c *cgroup) reusable() bool {
	if c.dir < 0 || c.h.v2 && c.state < 0 {
		return false
	}
	var st unix.Stat_t
	// A kernfs directory's link count is 2 plus its subdirectories.
	if unix.Fstat(c.dir, &st) != nil || st.Nlink != 2 {
		return false
	}
	if c.h.v2 {
		var buf [128]byte
		b, err := pread(c.state, buf[:])
		return err == nil && eventsEmpty(b) && !bytes.Contains(b, []byte("frozen 1"))
	}
	if !c.empty() {
		return false
	}
	if c.h.ctrl == "freezer" {
		b, err := procscan.ReadFile(filepath.Join(c.path, "freezer.state"))
		return err == nil && strings.TrimSpace(string(b)) == "THAWED"
	}
	return true
}

// eventsEmpty reports whether a cgroup.events says populated 0.
func eventsEmpty(b []byte) bool {
	return bytes.HasPrefix(b, []byte("populated 0\n")) || bytes.Contains(b, []byte("\npopulated 0\n"))
}

// pread reads a small control file from its start into buf.
func pread(fd int, buf []byte) ([]byte, error) {
	for {
		n, err := unix.Pread(fd, buf, 0)
		if err == unix.EINTR {
			continue
		}
		if err != nil {
			return nil, err
		}
		return buf[:n], nil
	}
}

// create makes a new cgroup named name and opens it.
func (h *hierarchy) create(name string) (*cgroup, error) {
	dir := filepath.Join(h.parent, name)
	err := os.Mkdir(dir, 0o755)
	if errors.Is(err, fs.ErrNotExist) {
		// The parent went away (an operator's rmdir); make it again.
		if err = os.MkdirAll(h.parent, 0o755); err == nil {
			err = os.Mkdir(dir, 0o755)
		}
	}
	if err != nil {
		return nil, fmt.Errorf("create cgroup: %w", err)
	}
	c := &cgroup{h: h, path: dir, dir: -1, state: -1}
	if c.dir, err = unix.Open(dir, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0); err == nil && h.v2 {
		c.state, err = unix.Openat(c.dir, "cgroup.events", unix.O_RDONLY|unix.O_CLOEXEC, 0)
	}
	if err != nil {
		c.remove()
		return nil, fmt.Errorf("open cgroup %s: %w", dir, err)
	}
	return c, nil
}

// add moves pid into the cgroup after the fact: the v1 fallback when
// startInside cannot be used.
func (c *cgroup) add(pid int) error {
	return os.WriteFile(filepath.Join(c.path, "cgroup.procs"), []byte(strconv.Itoa(pid)), 0)
}

// errNoThreadHome means this thread's own v1 cgroup could not be located
// under the mount, so startInside cannot move it back; nothing was changed.
var errNoThreadHome = errors.New("thread cgroup not under the mount")

// startInside starts cmd so that it is born in the v1 cgroup, like
// CLONE_INTO_CGROUP on v2: v1 lets a single thread change cgroup, so a
// locked OS thread moves itself in, forks the child (which inherits the
// thread's cgroup), and moves itself back before anything else runs on it.
// The Go runtime never clones new threads from a locked one (it uses its
// template thread), so no other server thread can end up in the cgroup. If
// the move back fails, the goroutine exits still locked and the runtime
// discards the thread.
//
// started reports whether cmd was started; with a nil error, the child is in
// the cgroup. errNoThreadHome means nothing happened and the caller may start
// the command the racy way.
func (c *cgroup) startInside(cmd *exec.Cmd) (started bool, err error) {
	type outcome struct {
		started bool
		err     error
	}
	res := make(chan outcome, 1)
	go func() {
		runtime.LockOSThread()
		tid := strconv.Itoa(unix.Gettid())
		home, err := c.h.threadHome()
		if err != nil {
			runtime.UnlockOSThread()
			res <- outcome{false, err}
			return
		}
		if err := os.WriteFile(filepath.Join(c.path, "tasks"), []byte(tid), 0); err != nil {
			runtime.UnlockOSThread()
			res <- outcome{false, fmt.Errorf("move into %s: %w", c.path, err)}
			return
		}
		startErr := cmd.Start()
		if err := os.WriteFile(filepath.Join(home, "tasks"), []byte(tid), 0); err != nil {
			// Stay locked: this thread dies with the goroutine.
			res <- outcome{startErr == nil, fmt.Errorf("move back to %s: %w", home, err)}
			return
		}
		runtime.UnlockOSThread()
		res <- outcome{startErr == nil, startErr}
	}()
	o := <-res
	return o.started, o.err
}

// threadHome is the directory of the calling thread's own cgroup in h (v1).
func (h *hierarchy) threadHome() (string, error) {
	b, err := os.ReadFile("/proc/thread-self/cgroup")
	if err != nil {
		return "", err
	}
	for _, line := range strings.Split(string(b), "\n") {
		// hierarchy-id:controller,...:path
		f := strings.SplitN(line, ":", 3)
		if len(f) != 3 || !slices.Contains(strings.Split(f[1], ","), h.ctrl) {
			continue
		}
		rel := f[2]
		if h.mount.root != "/" {
			var ok bool
			rel, ok = strings.CutPrefix(rel, h.mount.root)
			if !ok || rel != "" && rel[0] != '/' {
				return "", errNoThreadHome
			}
		}
		return filepath.Join(h.mount.dir, rel), nil
	}
	return "", errNoThreadHome
}

// procs lists the processes in the cgroup. A cgroup that is gone is empty.
func (c *cgroup) procs() ([]int, error) {
	b, err := os.ReadFile(filepath.Join(c.path, "cgroup.procs"))
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	var pids []int
	for _, f := range strings.Fields(string(b)) {
		if pid, err := strconv.Atoi(f); err == nil {
			pids = append(pids, pid)
		}
	}
	return pids, nil
}

// empty reports whether no process is left (on v2, none in child cgroups
// either). A cgroup that cannot be read counts as not empty: the kill loop
// keeps trying.
func (c *cgroup) empty() bool {
	if c.state >= 0 {
		var buf [128]byte
		b, err := pread(c.state, buf[:])
		return err == nil && eventsEmpty(b)
	}
	b, err := procscan.ReadFile(filepath.Join(c.path, "cgroup.procs"))
	if errors.Is(err, unix.ENOENT) {
		return true // a cgroup that is gone is empty
	}
	return err == nil && len(bytes.TrimSpace(b)) == 0
}

// signal sends sig to every process in the cgroup. A process may exit (and,
// rarely, its pid be reused) between the listing and the signal: the price of
// signalling without freezing, paid only for the polite SIGTERM.
func (c *cgroup) signal(sig syscall.Signal) {
	pids, _ := c.procs()
	self := os.Getpid()
	for _, pid := range pids {
		// Never the server itself (a thread of it is in a v1 cgroup for an
		// instant while it starts a command there).
		if pid != self {
			unix.Kill(pid, sig)
		}
	}
}

// kill sends SIGKILL to every process in the cgroup, once. On v2 that is
// cgroup.kill, atomic in the kernel. On a v1 freezer the cgroup is frozen
// first, so nothing can fork between the listing and the signals, then thawed
// so the signals are delivered. Callers loop until the cgroup is empty.
func (c *cgroup) kill() {
	c.killed = true
	switch {
	case c.h.v2:
		if os.WriteFile(filepath.Join(c.path, "cgroup.kill"), []byte("1"), 0) == nil {
			return
		}
		c.signal(unix.SIGKILL)
	case c.h.ctrl == "freezer":
		state := filepath.Join(c.path, "freezer.state")
		frozen := os.WriteFile(state, []byte("FROZEN"), 0) == nil
		if frozen {
			// Freezing can take a moment (or never finish, for a task in an
			// uninterruptible sleep): wait a little, then kill regardless.
			for i := 0; i < 50; i++ {
				if b, _ := os.ReadFile(state); strings.TrimSpace(string(b)) == "FROZEN" {
					break
				}
				time.Sleep(time.Millisecond)
			}
		}
		c.signal(unix.SIGKILL)
		if frozen {
			os.WriteFile(state, []byte("THAWED"), 0)
		}
	default:
		c.signal(unix.SIGKILL)
	}
}

// remove closes and removes the (empty) cgroup. The kernel may report it
// busy for a moment after its last process exited, so it retries briefly.
func (c *cgroup) remove() error {
	for _, fd := range []*int{&c.state, &c.dir} {
		if *fd >= 0 {
			unix.Close(*fd)
			*fd = -1
		}
	}
	var err error
	for d := time.Millisecond; d < 500*time.Millisecond; d *= 2 {
		err = os.Remove(c.path)
		if err == nil || errors.Is(err, fs.ErrNotExist) {
			return nil
		}
		if !errors.Is(err, unix.EBUSY) {
			break
		}
		time.Sleep(d)
	}
	return fmt.Errorf("remove cgroup: %w", err)
}

// owner identifies this process in cgroup names: pid and start time, so a
// reused pid is not mistaken for a live creator.
var owner = func() string {
	pid := os.Getpid()
	st, err := readProcStat(pid)
	if err != nil {
		return strconv.Itoa(pid) + "-0"
	}
	return strconv.Itoa(pid) + "-" + strconv.FormatUint(st.start, 10)
}()

// cgroupName is the name of a command's cgroup: <pid>-<starttime>-<id> of
// the creating process.
func cgroupName(id string) string { return owner + "-" + id }

// parseCgroupName returns the creator of a per-command cgroup, ok false for a
// name shellbox did not make.
func parseCgroupName(name string) (pid int, start uint64, ok bool) {
	f := strings.Split(name, "-")
	if len(f) != 3 || f[2] == "" {
		return 0, 0, false
	}
	pid, err1 := strconv.Atoi(f[0])
	start, err2 := strconv.ParseUint(f[1], 10, 64)
	return pid, start, err1 == nil && err2 == nil && pid > 0
}

// Cleanup removes the per-command cgroups under parent (relative to each
// cgroup mount; "" means the default, "shellbox") that were left by a
// process that is gone, typically a crashed server: it kills whatever still
// runs in them, then removes them. Cgroups of a live creator are left alone,
// so Cleanup is safe while other executors run; it identifies creators by pid
// and start time, so every executor sharing a parent must share a pid
// namespace (a sandbox's agent has its own cgroup namespace anyway). It
// returns how many cgroups it removed; a cgroup it could not empty or remove
// is an error, and the rest are still done.
func Cleanup(parent string) (int, error) {
	if parent == "" {
		parent = "shellbox"
	}
	v2, v1, err := mounts()
	if err != nil {
		return 0, err
	}
	var hs []*hierarchy
	for _, m := range v2 {
		hs = append(hs, &hierarchy{v2: true, mount: m, parent: filepath.Join(m.dir, parent)})
	}
	for ctrl, m := range v1 {
		hs = append(hs, &hierarchy{ctrl: ctrl, mount: m, parent: filepath.Join(m.dir, parent)})
	}
	removed := 0
	var errs []error
	for _, h := range hs {
		ents, err := os.ReadDir(h.parent)
		if err != nil {
			if !errors.Is(err, fs.ErrNotExist) {
				errs = append(errs, err)
			}
			continue
		}
		for _, e := range ents {
			pid, start, ok := parseCgroupName(e.Name())
			if !e.IsDir() || !ok || alive(pid, start) {
				continue
			}
			c := &cgroup{h: h, path: filepath.Join(h.parent, e.Name()), dir: -1, state: -1}
			deadline := time.Now().Add(killBound)
			for !c.empty() && time.Now().Before(deadline) {
				c.kill()
				time.Sleep(5 * time.Millisecond)
			}
			if err := c.remove(); err != nil {
				errs = append(errs, fmt.Errorf("%s: %w", c.path, err))
				continue
			}
			removed++
		}
	}
	return removed, errors.Join(errs...)
}
