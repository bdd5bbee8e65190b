package pid1

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"

	"golang.org/x/sys/unix"

	"github.com/shellbox/shellbox/internal/mountinfo"
	"github.com/shellbox/shellbox/internal/procscan"
)

// Out-of-memory: protecting the agent, and telling the model.
//
// Protection. The OOM killer picks the process with the highest badness,
// which oom_score_adj raises. Writing a command's /proc/<pid>/oom_score_adj
// after it starts fails when the command runs as another user and this
// process lacks CAP_DAC_OVERRIDE (the file is the command's). With
// OOMScoreAdjInherit, the executor instead raises its own score right before
// the fork and lowers it back right after, under a mutex: the child inherits
// the raised score from its first instruction. Raising needs no privilege;
// lowering back needs none either as long as the value stays at or above
// oom_score_adj_min, the last value written with CAP_SYS_RESOURCE (runc's
// write of the container's score), which the original value always is.
//
// Reporting. A command the OOM killer chose dies of SIGKILL, which alone is
// indistinguishable from `kill -9`. With a memory cgroup to watch, the
// executor samples its OOM-kill counter (v1 memory.oom_control's oom_kill, v2
// memory.events' oom_kill) when a command starts and when it ends; if the
// counter grew and the leader died of SIGKILL (or exited 137, a shell
// reporting its child's SIGKILL), the result says OOMKilled and its stderr
// ends with a line naming the memory limit. The cgroup is shared by the
// commands of the sandbox, so a SIGKILL that coincides with another command's
// OOM kill is reported as one too: the price of a counter without pids.

// oomSelf raises this process's oom_score_adj around forks.
type oomSelf struct {
	mu     sync.Mutex
	target int
	// f is this process's oom_score_adj, opened for writing once, at New:
	// a process that makes itself non-dumpable afterwards (the agent, with
	// a token) has its /proc/self files turned root's, so a non-root one
	// could no longer open it; writes on an open file are not checked
	// again. (Closed by its finalizer with the Executor.)
	f *os.File
}

func newOOMSelf(target int) (*oomSelf, error) {
	f, err := os.OpenFile(selfScoreFile, os.O_WRONLY, 0)
	if err != nil {
		return nil, fmt.Errorf("local: OOMScoreAdjInherit: %w", err)
	}
	return &oomSelf{target: target, f: f}, nil
}

const selfScoreFile = "/proc/self/oom_score_adj"

// readScore and writeScore use plain system calls: they run twice around
// every fork, and under gVisor every system call counts.
func readScore(path string) (int, error) {
	b, err := procscan.ReadFile(path)
	if err != nil {
		return 0, err
	}
	return strconv.Atoi(strings.TrimSpace(string(b)))
}

func (o *oomSelf) writeScore(v int) error {
	_, err := o.f.WriteAt([]byte(strconv.Itoa(v)), 0)
	return err
}

// around runs start (a fork) with this process's score raised to the
// target, and restores the score after. An error to raise or restore is
// returned with start's own error taking precedence; a child started while
// the restore failed is the caller's to kill.
func (o *oomSelf) around(start func() error) error {
	o.mu.Lock()
	defer o.mu.Unlock()
	orig, err := readScore(selfScoreFile)
	if err != nil {
		return fmt.Errorf("read oom_score_adj: %w", err)
	}
	if orig >= o.target {
		return start()
	}
	if err := o.writeScore(o.target); err != nil {
		return fmt.Errorf("raise oom_score_adj to %d: %w", o.target, err)
	}
	startErr := start()
	if err := o.writeScore(orig); err != nil {
		// Still raised: this process would be the OOM killer's first choice.
		// Keep trying once more before giving up; the caller reports it.
		if err2 := o.writeScore(orig); err2 != nil {
			if startErr != nil {
				return startErr
			}
			return errRestoreScore{fmt.Errorf("lower oom_score_adj back to %d: %w", orig, err)}
		}
	}
	return startErr
}

// errRestoreScore: the child started, but this process's score could not be
// lowered back.
type errRestoreScore struct{ error }

func (e errRestoreScore) Unwrap() error { return e.error }

// memcg is a memory cgroup whose OOM kills are counted.
type memcg struct {
	dir string
	v2  bool
}

// findMemcg returns the memory cgroup of this process (v1 memory controller,
// else a cgroup2 mount with memory.events), or nil when there is none to read.
func findMemcg() *memcg {
	own, err := os.ReadFile("/proc/self/cgroup")
	if err != nil {
		return nil
	}
	v1path, v2path := "", ""
	haveV2 := false
	for _, line := range strings.Split(string(own), "\n") {
		f := strings.SplitN(line, ":", 3)
		if len(f) != 3 {
			continue
		}
		if f[0] == "0" && f[1] == "" {
			v2path, haveV2 = f[2], true
		} else if slices.Contains(strings.Split(f[1], ","), "memory") {
			v1path = f[2]
		}
	}
	all, err := mountinfo.Cgroups()
	if err != nil {
		return nil
	}
	var v2cands []*memcg
	for _, cm := range all {
		switch {
		case !cm.V2 && v1path != "" && slices.Contains(cm.Opts, "memory"):
			if dir, ok := underMount(cm, v1path); ok && exists(filepath.Join(dir, "memory.oom_control")) {
				return &memcg{dir: dir}
			}
		case cm.V2 && haveV2:
			if dir, ok := underMount(cm, v2path); ok && exists(filepath.Join(dir, "memory.events")) {
				v2cands = append(v2cands, &memcg{dir: dir, v2: true})
			}
		}
	}
	if len(v2cands) > 0 {
		return v2cands[0]
	}
	return nil
}

// underMount maps a cgroup path of /proc/self/cgroup to a directory of m.
func underMount(m mountinfo.Cgroup, path string) (string, bool) {
	rel := path
	if m.Root != "/" {
		var ok bool
		rel, ok = strings.CutPrefix(path, m.Root)
		if !ok || rel != "" && rel[0] != '/' {
			return "", false
		}
	}
	return filepath.Join(m.Dir, rel), true
}

func exists(p string) bool {
	_, err := os.Stat(p)
	return err == nil
}

// kills returns the cgroup's OOM-kill counter.
func (m *memcg) kills() (int64, error) {
	name := "memory.oom_control"
	if m.v2 {
		name = "memory.events"
	}
	b, err := procscan.ReadFile(filepath.Join(m.dir, name))
	if err != nil {
		return 0, err
	}
	for _, line := range bytes.Split(b, []byte("\n")) {
		if v, ok := bytes.CutPrefix(line, []byte("oom_kill ")); ok {
			return strconv.ParseInt(string(bytes.TrimSpace(v)), 10, 64)
		}
	}
	return 0, errors.New("no oom_kill counter in " + name)
}

// limit returns the cgroup's memory limit in bytes; ok false when unlimited
// or unreadable.
func (m *memcg) limit() (int64, bool) {
	name := "memory.limit_in_bytes"
	if m.v2 {
		name = "memory.max"
	}
	b, err := os.ReadFile(filepath.Join(m.dir, name))
	if err != nil {
		return 0, false
	}
	s := strings.TrimSpace(string(b))
	v, err := strconv.ParseInt(s, 10, 64)
	// v1 reports "no limit" as a huge page-aligned number.
	if err != nil || v <= 0 || v >= 1<<62 {
		return 0, false
	}
	return v, true
}

// oomNote is the line appended to the stderr of a command the OOM killer
// ended.
func (m *memcg) oomNote() string {
	if l, ok := m.limit(); ok {
		return fmt.Sprintf("shellbox: the command was killed by the out-of-memory killer (memory limit: %d bytes)\n", l)
	}
	return "shellbox: the command was killed by the out-of-memory killer\n"
}

// killedLikeOOM reports whether a leader's status is what an OOM kill leaves:
// death by SIGKILL, or a shell's exit code 137 for a child's.
func killedLikeOOM(ws syscall.WaitStatus) bool {
	if ws.Signaled() {
		return ws.Signal() == unix.SIGKILL
	}
	return ws.Exited() && ws.ExitStatus() == 128+int(unix.SIGKILL)
}
