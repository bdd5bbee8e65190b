package containerd

// Checkpoint and restore of gVisor sandboxes (sandbox.Checkpointer;
// docs/checkpoint.md has the research this follows).
//
// gVisor's own shim (io.containerd.runsc.v1) answers Checkpoint with "not
// implemented" and ignores a restore. containerd's runc v2 shim drives
// runsc's checkpoint and restore as it drives runc's, given a runsc binary
// that takes runc's command lines: so with Config.Checkpoint, runsc
// sandboxes run under io.containerd.runc.v2 with BinaryName = the wrapper,
// a shell script this runtime writes at New into
// <StateDir>/checkpoint/runsc (mode 0755) from the runsc.toml gVisor's
// shim reads (RuntimeConfigs[runsc]: its binary_name, root and
// [runsc_config]), so that file stays the one owner of runsc's flags. The
// wrapper execs runsc with those flags and drops the CRIU-only flags runc's
// checkpoint and restore pass (--file-locks, --tcp-established,
// --ext-unix-sk, --shell-job), which runsc refuses, and makes every delete
// forced (a sandbox killed paused stays "paused" to runsc). A script written at
// start, not the shellbox binary under another name: containerd's shim
// runs BinaryName as a plain executable with no arguments of ours, the
// server may be any binary (cmd/shellbox, a test), and a file rewritten at
// every start follows runsc.toml without an install step.
//
// Checkpoint, in this order, each step undone on a later one's failure:
//  1. the agent closes its host socket (agent/checkpoint.go), which gVisor
//     cannot save: the hook `shellbox-agent checkpoint-hook`, run in the
//     sandbox by runtime exec with GVISOR_SAVE_RESTORE_AUTO_EXEC_MODE=save.
//     Not by runsc's --save-restore-exec-argv: runsc runs that hook in the
//     sandbox's kernel, which step 2 has paused, and a task started in a
//     paused kernel starts stopped (gVisor kernel/task_start.go), so the
//     hook would wait out its timeout; and runsc sets that hook once per
//     sandbox (control.ConfigureSaveRestoreExec: "save/restore binary is
//     already set" at a second checkpoint, and a restored sandbox carries
//     it), so a restored session could never be checkpointed again. The
//     exec'd hook has exited before the checkpoint: a restore kills only
//     processes exec'd before the checkpoint that are still there.
//  2. the task is paused: nothing changes in the sandbox or its workspace
//     from here;
//  3. Task.Checkpoint with an image path (runsc checkpoint --leave-running,
//     never an exit checkpoint, which kills the sandbox when it fails; a
//     leave-running checkpoint of a paused sandbox leaves it paused);
//  4. the image (runsc's files, the session's host workspace as the frozen
//     sandbox left it, in the agent's workspace stream (agentapi/workspace,
//     a library the host uses as the agent does), the sandbox's host
//     directory's files, and shellbox.json: the runsc flags and version)
//     is streamed as a tar to the caller's commit, read from disk, never
//     held in memory;
//  5. success: the sandbox is killed as it is, paused (SIGKILL to the
//     task's process on the host: runsc signals no paused container), for
//     the caller to remove. Any failure before: the task is resumed and
//     the hook run with mode resume, so the agent listens again, and the
//     sandbox runs on.
//
// Restore: the image is unpacked into a temporary directory (names
// confined, only files and directories, bounded by MaxImageBytes), its
// flags compared with this runtime's (other flags: refused, ErrNoCheckpoint:
// a restore under other flags succeeds and then fails inside), then the
// sandbox is made as Create makes it (same spec, same mounts) with
// NewTask(WithRestoreImagePath), the session's workspace replaced by the
// image's and its host directory's files put back first (open files are
// opened again by path), and the hook run with mode restore. The image
// holds the workspace, so a restore needs nothing else: on another host
// sharing the store as on this one. The caller probes the agent.

import (
	"archive/tar"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/BurntSushi/toml"
	client "github.com/containerd/containerd/v2/client"

	"github.com/shellbox/shellbox/agentapi/workspace"
	"github.com/shellbox/shellbox/sandbox"
	"github.com/shellbox/shellbox/sandbox/hostdir"
)

var _ sandbox.Checkpointer = (*Runtime)(nil)

// The agent's checkpoint hook's modes (agent/checkpoint.go), spelled
// here so that the server does not link the agent's package;
// wrapper_test.go holds them, the signals and the state file equal.
const (
	hookSave    = "save"
	hookRestore = "restore"
	hookResume  = "resume"
)

// RuncShim is containerd's runc v2 shim, which runs checkpointable runsc
// sandboxes through the wrapper.
const RuncShim = "io.containerd.runc.v2"

// MaxImageBytes bounds an image a Restore unpacks: its memory, the host
// directory's files and runsc's state.
const MaxImageBytes = 64 << 30

// The image's parts, as names in its tar.
const (
	imageMeta  = "shellbox.json"
	imageRunsc = "runsc"   // runsc's checkpoint files
	imageHost  = "hostdir" // the sandbox's host directory's files
	// imageWorkspace is the session's host workspace at the image's
	// instant, in the agent's workspace stream (agentapi/workspace: a zstd
	// tar with owners, modes, links, holes and xattrs).
	imageWorkspace = "workspace.tar.zst"
)

// imageVersion is the layout above; a Restore refuses another.
const imageVersion = 1

// meta is shellbox.json.
type meta struct {
	Version int `json:"version"`
	// Flags are runsc's flags the sandbox ran with, sorted; Runsc is
	// `runsc --version`'s first line. A restore needs both equal.
	Flags []string  `json:"flags"`
	Runsc string    `json:"runsc"`
	Taken time.Time `json:"taken"`
}

// runscSetup is what the wrapper is made of: runsc.toml's binary, root and
// flags.
type runscSetup struct {
	binary, root string
	flags        []string
	wrapper      string
	// background adds --background to runsc restore
	// (Config.RestoreBackground).
	background bool

	once    sync.Once
	version string
	verErr  error
}

// readRunscConfig reads gVisor's shim options file.
func readRunscConfig(path string) (*runscSetup, error) {
	var opts struct {
		BinaryName  string            `toml:"binary_name"`
		Root        string            `toml:"root"`
		RunscConfig map[string]string `toml:"runsc_config"`
	}
	if _, err := toml.DecodeFile(path, &opts); err != nil {
		return nil, fmt.Errorf("%w: containerd: checkpoint: runsc options %s: %v", sandbox.ErrInvalid, path, err)
	}
	s := &runscSetup{binary: opts.BinaryName, root: opts.Root}
	if s.binary == "" {
		s.binary = "runsc"
	}
	if !filepath.IsAbs(s.binary) {
		p, err := exec.LookPath(s.binary)
		if err != nil {
			return nil, fmt.Errorf("%w: containerd: checkpoint: runsc binary %q (binary_name in %s): %v", sandbox.ErrInvalid, s.binary, path, err)
		}
		s.binary = p
	}
	if s.root == "" {
		return nil, fmt.Errorf("%w: containerd: checkpoint: %s sets no root: runsc's state directory must be named for the runc shim", sandbox.ErrInvalid, path)
	}
	switch opts.RunscConfig["host-uds"] {
	case "create", "all":
	default:
		return nil, fmt.Errorf("%w: containerd: checkpoint: %s does not set host-uds (create or all) in [runsc_config]: the host cannot reach the sandbox's agent", sandbox.ErrInvalid, path)
	}
	for k, v := range opts.RunscConfig {
		if k == "" || strings.ContainsAny(k+v, "'\n") {
			return nil, fmt.Errorf("%w: containerd: checkpoint: %s: runsc flag %q=%q", sandbox.ErrInvalid, path, k, v)
		}
		s.flags = append(s.flags, "--"+k+"="+v)
	}
	slices.Sort(s.flags)
	return s, nil
}

// criuOnly are the flags runc's checkpoint and restore pass that runsc
// does not know.
var criuOnly = []string{"--file-locks", "--tcp-established", "--ext-unix-sk", "--shell-job"}

// wrapperScript is the wrapper's text.
func (s *runscSetup) wrapperScript(from string) string {
	var b strings.Builder
	b.WriteString("#!/bin/sh\n")
	b.WriteString("# Written by shellbox (sandbox/containerd/checkpoint.go) from " + from + ":\n")
	b.WriteString("# runsc with gVisor's shim's flags, for containerd's runc v2 shim (BinaryName),\n")
	b.WriteString("# without the CRIU-only flags runc's checkpoint and restore pass.\n")
	b.WriteString("# delete is forced: a sandbox killed while paused (a checkpoint's end) is\n")
	b.WriteString("# \"paused\" to runsc for ever, and only a forced delete removes it.\n")
	restore := ""
	if s.background {
		b.WriteString("# restore loads the image's pages in the background (restoreBackground).\n")
		restore = "\trestore) set -- \"$@\" restore --background ;;\n"
	}
	b.WriteString("for a do\n\tshift\n\tcase $a in\n\t" + strings.Join(criuOnly, "|") + ") ;;\n\tdelete) set -- \"$@\" delete --force ;;\n" + restore + "\t*) set -- \"$@\" \"$a\" ;;\n\tesac\ndone\n")
	b.WriteString("exec '" + s.binary + "'")
	for _, f := range s.flags {
		b.WriteString(" '" + f + "'")
	}
	b.WriteString(" \"$@\"\n")
	return b.String()
}

// setUpCheckpoint reads runsc.toml and writes the wrapper (Config.Checkpoint).
func setUpCheckpoint(cfg Config) (*runscSetup, error) {
	path := cfg.RuntimeConfigs[sandbox.RuntimeRunsc]
	if path == "" {
		return nil, fmt.Errorf("%w: containerd: checkpoint needs runsc's options file (runtimeConfigs.runsc: runsc.toml)", sandbox.ErrInvalid)
	}
	s, err := readRunscConfig(path)
	if err != nil {
		return nil, err
	}
	s.background = cfg.RestoreBackground
	dir := filepath.Join(cfg.StateDir, "checkpoint")
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("%w: containerd: checkpoint: %v", sandbox.ErrUnavailable, err)
	}
	s.wrapper = filepath.Join(dir, "runsc")
	tmp := s.wrapper + ".new"
	if err := os.WriteFile(tmp, []byte(s.wrapperScript(path)), 0o755); err != nil {
		return nil, fmt.Errorf("%w: containerd: checkpoint: write the runsc wrapper: %v", sandbox.ErrUnavailable, err)
	}
	if err := os.Chmod(tmp, 0o755); err != nil {
		return nil, fmt.Errorf("%w: containerd: checkpoint: %v", sandbox.ErrUnavailable, err)
	}
	if err := os.Rename(tmp, s.wrapper); err != nil {
		return nil, fmt.Errorf("%w: containerd: checkpoint: %v", sandbox.ErrUnavailable, err)
	}
	return s, nil
}

// runscVersion is `runsc --version`'s first line, read once.
func (s *runscSetup) runscVersion(ctx context.Context) (string, error) {
	s.once.Do(func() {
		ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
		defer cancel()
		out, err := exec.CommandContext(ctx, s.binary, "--version").Output()
		if err != nil {
			s.verErr = fmt.Errorf("%w: containerd: %s --version: %v", sandbox.ErrUnavailable, s.binary, err)
			return
		}
		s.version, _, _ = strings.Cut(strings.TrimSpace(string(out)), "\n")
	})
	return s.version, s.verErr
}

// checkpointable says why sb cannot be checkpointed by this runtime ("":
// it can).
func (r *Runtime) checkpointable(sb sandbox.Sandbox) string {
	switch {
	case sb.Runtime != sandbox.RuntimeRunsc:
		return fmt.Sprintf("runtime %s: only gVisor (runsc) sandboxes are checkpointed", sb.Runtime)
	case r.cr == nil:
		return "this containerd runtime runs runsc under gVisor's shim, which cannot checkpoint (containerd.checkpoint is off)"
	}
	return ""
}

// Checkpoint implements sandbox.Checkpointer (see the file's comment).
func (r *Runtime) Checkpoint(ctx context.Context, sb sandbox.Sandbox, commit func(ctx context.Context, image io.Reader) error) error {
	if why := r.checkpointable(sb); why != "" {
		return fmt.Errorf("%w: %s", sandbox.ErrNoCheckpoint, why)
	}
	version, err := r.cr.runscVersion(ctx)
	if err != nil {
		return err
	}
	ctx = r.ctx(ctx)
	ctr, err := r.client.LoadContainer(ctx, sb.ID)
	if err != nil {
		return r.convert(err, "load container %s", sb.ID)
	}
	info, err := ctr.Info(ctx, client.WithoutRefreshedMetadata)
	if err != nil {
		return r.convert(err, "container info %s", sb.ID)
	}
	if info.Runtime.Name != RuncShim {
		return fmt.Errorf("%w: container %s runs under %s, made before checkpoints were on: only the runc shim with the runsc wrapper checkpoints", sandbox.ErrNoCheckpoint, sb.ID, info.Runtime.Name)
	}
	task, err := ctr.Task(ctx, nil)
	if err != nil {
		return r.convert(err, "load task %s", sb.ID)
	}
	// 1. The agent's host socket.
	dir := info.Labels[LabelHostDir]
	if err := r.hook(ctx, task, dir, hookSave); err != nil {
		// A hook that failed may have closed it anyway.
		r.thaw(ctx, task, dir, false)
		return err
	}
	// 2. Frozen from here.
	if err := task.Pause(ctx); err != nil {
		r.thaw(ctx, task, dir, false)
		return r.convert(err, "pause task %s", sb.ID)
	}
	done := false
	defer func() {
		if !done {
			r.thaw(ctx, task, dir, true)
		}
	}()
	tmp, err := os.MkdirTemp(filepath.Join(r.cfg.StateDir, "checkpoint"), "image-")
	if err != nil {
		return fmt.Errorf("%w: containerd: checkpoint: %v", sandbox.ErrUnavailable, err)
	}
	defer os.RemoveAll(tmp)
	// 3. runsc checkpoint --leave-running, of a paused sandbox.
	runscDir := filepath.Join(tmp, imageRunsc)
	if err := os.Mkdir(runscDir, 0o700); err != nil {
		return fmt.Errorf("%w: containerd: checkpoint: %v", sandbox.ErrUnavailable, err)
	}
	if _, err := task.Checkpoint(ctx, client.WithCheckpointImagePath(runscDir)); err != nil {
		err = toNative(err)
		if strings.Contains(err.Error(), "Cannot save endpoint with bound host socket") {
			return fmt.Errorf("%w: a process in the sandbox has a unix socket bound on a host path (in /workspace, say), which gVisor cannot save: %v", sandbox.ErrNoCheckpoint, err)
		}
		return r.convert(err, "checkpoint task %s", sb.ID)
	}
	// 4. The workspace as the image has it (frozen: a checkpoint syncs
	// the sandbox's files), the host directory's files, the flags, and
	// the stream.
	if r.dirs.Workspaces() {
		if err := exportWorkspace(ctx, r.dirs.WorkspacePath(sb.Tenant, sb.Session), filepath.Join(tmp, imageWorkspace)); err != nil {
			return fmt.Errorf("%w: containerd: checkpoint: the workspace: %v", sandbox.ErrUnavailable, err)
		}
	}
	if dir != "" {
		if err := copyFiles(dir, filepath.Join(tmp, imageHost)); err != nil {
			return fmt.Errorf("%w: containerd: checkpoint: the host directory's files: %v", sandbox.ErrUnavailable, err)
		}
	}
	m, err := json.Marshal(meta{Version: imageVersion, Flags: r.cr.flags, Runsc: version, Taken: time.Now().UTC()})
	if err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(tmp, imageMeta), m, 0o600); err != nil {
		return fmt.Errorf("%w: containerd: checkpoint: %v", sandbox.ErrUnavailable, err)
	}
	pr, pw := io.Pipe()
	go func() { pw.CloseWithError(writeTar(pw, tmp)) }()
	err = commit(ctx, pr)
	pr.CloseWithError(errors.New("commit returned"))
	if err != nil {
		return fmt.Errorf("containerd: checkpoint %s: commit the image: %w", sb.ID, err)
	}
	// 5. Killed as it is, frozen: runsc signals no paused container, so the
	// sandbox's process (the task's pid, runsc's sandbox) is killed on the
	// host, and nothing in it runs again.
	done = true
	return r.killPaused(ctx, task)
}

// killPaused kills a paused gVisor task without resuming it, and waits
// for its exit.
func (r *Runtime) killPaused(ctx context.Context, task client.Task) error {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
	defer cancel()
	wait, err := task.Wait(ctx)
	if err != nil {
		return r.convert(err, "wait for task %s", task.ID())
	}
	pid := int(task.Pid())
	if pid <= 1 {
		return fmt.Errorf("%w: containerd: task %s has no process to kill (pid %d)", sandbox.ErrUnavailable, task.ID(), pid)
	}
	if err := syscall.Kill(pid, syscall.SIGKILL); err != nil && !errors.Is(err, syscall.ESRCH) {
		return fmt.Errorf("%w: containerd: kill task %s (pid %d): %v", sandbox.ErrUnavailable, task.ID(), pid, err)
	}
	select {
	case <-wait:
		// runsc keeps a sandbox killed paused "paused" for ever, and then
		// refuses the shim's kill and delete of it: its state goes now
		// (the runc shim's root for a namespace is <root>/<namespace>).
		out, err := exec.CommandContext(ctx, r.cr.wrapper, "--root", filepath.Join(r.cr.root, r.cfg.Namespace), "delete", task.ID()).CombinedOutput()
		if err != nil {
			return fmt.Errorf("%w: containerd: runsc delete %s after its checkpoint: %v: %s", sandbox.ErrUnavailable, task.ID(), err, clipOut(out))
		}
		return nil
	case <-ctx.Done():
		return fmt.Errorf("%w: containerd: task %s (pid %d) did not exit after SIGKILL: %w", sandbox.ErrUnavailable, task.ID(), pid, ctx.Err())
	}
}

// thaw undoes a checkpoint that failed: resume the task if it was paused,
// then have the agent listen again. Under a context of its own: the
// caller's may be why it failed. Errors are the log's: the sandbox may
// still answer.
func (r *Runtime) thaw(ctx context.Context, task client.Task, dir string, paused bool) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
	defer cancel()
	if paused {
		if err := task.Resume(ctx); err != nil {
			return
		}
	}
	_ = r.hook(ctx, task, dir, hookResume)
}

// agentTimeout bounds the wait for the agent to close or open its
// socket; signalAgain is how often an unanswered agent is signalled again
// (one that has only just started may not listen for it yet).
const (
	agentTimeout = 15 * time.Second
	signalAgain  = 500 * time.Millisecond
)

// The agent's signals and states (agent/checkpoint.go: sigCloseHost,
// sigListenHost, StateFile's content).
const (
	stateClosed    = "closed"
	stateListening = "listening"
)

// hook has the agent of task close its host socket (mode hookSave) or
// listen again (hookRestore, hookResume), as its checkpoint hook would
// (agent/checkpoint.go), from the host: the signal through the runtime
// (runsc kill: no process is exec'd), the answer read from the agent's
// state file in the host directory dir.
func (r *Runtime) hook(ctx context.Context, task client.Task, dir, mode string) error {
	sig, want := syscall.SIGUSR2, stateListening
	if mode == hookSave {
		sig, want = syscall.SIGUSR1, stateClosed
	}
	if dir == "" {
		return fmt.Errorf("%w: containerd: task %s has no host directory: its agent cannot be told to %s", sandbox.ErrUnavailable, task.ID(), mode)
	}
	path := agentStateFile(dir)
	_, before := readAgentState(path)
	ctx, cancel := context.WithTimeout(ctx, agentTimeout)
	defer cancel()
	var sent time.Time
	for {
		if time.Since(sent) >= signalAgain {
			if err := task.Kill(ctx, sig); err != nil {
				return r.convert(err, "signal the agent of %s (%s)", task.ID(), mode)
			}
			sent = time.Now()
		}
		if st, seq := readAgentState(path); seq > before {
			if st != want {
				return fmt.Errorf("%w: containerd: the agent of %s did not %s: its socket is %s (see its log)", sandbox.ErrUnavailable, task.ID(), mode, st)
			}
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("%w: containerd: the agent of %s did not answer (%s) within %s: %w", sandbox.ErrUnavailable, task.ID(), mode, agentTimeout, ctx.Err())
		case <-time.After(5 * time.Millisecond):
		}
	}
}

// agentStateFile is the agent's state file in the host directory dir.
func agentStateFile(dir string) string { return hostdir.SocketPath(dir) + ".state" }

// readAgentState reads the agent's state file ("closed 3"); "", 0 when
// it is missing or unreadable.
func readAgentState(path string) (string, uint64) {
	b, err := os.ReadFile(path)
	if err != nil || len(b) > 64 {
		return "", 0
	}
	st, n, _ := strings.Cut(strings.TrimSpace(string(b)), " ")
	seq, err := strconv.ParseUint(n, 10, 64)
	if err != nil {
		return "", 0
	}
	return st, seq
}

// clipOut is a command's output for an error, at most 1 KiB.
func clipOut(b []byte) string {
	if len(b) > 1<<10 {
		b = b[:1<<10]
	}
	return strings.TrimSpace(string(b))
}

// Restore implements sandbox.Checkpointer (see the file's comment).
func (r *Runtime) Restore(ctx context.Context, spec sandbox.Spec, image io.Reader) (sandbox.Sandbox, error) {
	if why := r.checkpointable(sandbox.Sandbox{Runtime: spec.Runtime}); why != "" {
		return sandbox.Sandbox{}, fmt.Errorf("%w: %s", sandbox.ErrNoCheckpoint, why)
	}
	if err := spec.Validate(); err != nil {
		return sandbox.Sandbox{}, err
	}
	version, err := r.cr.runscVersion(ctx)
	if err != nil {
		return sandbox.Sandbox{}, err
	}
	if err := os.MkdirAll(filepath.Join(r.cfg.StateDir, "checkpoint"), 0o700); err != nil {
		return sandbox.Sandbox{}, fmt.Errorf("%w: containerd: restore: %v", sandbox.ErrUnavailable, err)
	}
	tmp, err := os.MkdirTemp(filepath.Join(r.cfg.StateDir, "checkpoint"), "restore-")
	if err != nil {
		return sandbox.Sandbox{}, fmt.Errorf("%w: containerd: restore: %v", sandbox.ErrUnavailable, err)
	}
	defer os.RemoveAll(tmp)
	start := time.Now()
	var times RestoreTimes
	if times.Bytes, err = readTar(image, tmp, MaxImageBytes); err != nil {
		return sandbox.Sandbox{}, fmt.Errorf("containerd: restore %s/%s: the image: %w", spec.Tenant, spec.Session, err)
	}
	times.Unpack = time.Since(start)
	b, err := os.ReadFile(filepath.Join(tmp, imageMeta))
	if err != nil {
		return sandbox.Sandbox{}, fmt.Errorf("%w: containerd: restore: the image has no %s: %v", sandbox.ErrInvalid, imageMeta, err)
	}
	var m meta
	if err := json.Unmarshal(b, &m); err != nil || m.Version != imageVersion {
		return sandbox.Sandbox{}, fmt.Errorf("%w: containerd: restore: the image's %s is unreadable or of another version (%d, want %d): %v", sandbox.ErrInvalid, imageMeta, m.Version, imageVersion, err)
	}
	if !slices.Equal(m.Flags, r.cr.flags) || m.Runsc != version {
		return sandbox.Sandbox{}, fmt.Errorf("%w: the image was taken with runsc %q %q, this runtime runs %q %q: a restore under other flags or another runsc fails inside the sandbox",
			sandbox.ErrNoCheckpoint, m.Runsc, m.Flags, version, r.cr.flags)
	}
	sb, err := r.create(ctx, spec, tmp, &times)
	if err == nil && r.cfg.OnRestore != nil {
		times.Total = time.Since(start)
		r.cfg.OnRestore(spec.Tenant, spec.Session, times)
	}
	return sb, err
}

// RestoreTimes say where a Restore's time went, in its order
// (Config.OnRestore).
type RestoreTimes struct {
	// Unpack: the image read to its end (from the caller's reader: the
	// store's read and check) and unpacked into a directory on the host.
	Unpack time.Duration
	// Files: the host directory's files and the workspace put back.
	Files time.Duration
	// Runsc: the container and its task made, and runsc restore (the
	// task's start).
	Runsc time.Duration
	// Agent: the agent listening again on its host socket.
	Agent time.Duration
	// Total: from the Restore's start to its end.
	Total time.Duration
	// Bytes: the image's files' content.
	Bytes int64
}

// copyFiles copies the regular files and directories under src into dst,
// with their modes and owners (the spill directory is root's and 0755: the
// commands read their spill files), dst itself left as it is (sockets,
// the agent's among them, and links are left out).
func copyFiles(src, dst string) error {
	return filepath.WalkDir(src, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(src, path)
		if err != nil {
			return err
		}
		to := filepath.Join(dst, rel)
		switch {
		case d.IsDir():
			if err := os.MkdirAll(to, 0o700); err != nil || rel == "." {
				return err
			}
			fi, err := d.Info()
			if err != nil {
				return err
			}
			if err := os.Chmod(to, fi.Mode().Perm()); err != nil {
				return err
			}
			if st, ok := fi.Sys().(*syscall.Stat_t); ok {
				return os.Lchown(to, int(st.Uid), int(st.Gid))
			}
			return nil
		case d.Type().IsRegular():
			return copyFile(path, to)
		}
		return nil
	})
}

func copyFile(from, to string) error {
	in, err := os.Open(from)
	if err != nil {
		return err
	}
	defer in.Close()
	fi, err := in.Stat()
	if err != nil {
		return err
	}
	out, err := os.OpenFile(to, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, fi.Mode().Perm())
	if err != nil {
		return err
	}
	if _, err := io.Copy(out, in); err != nil {
		out.Close()
		return err
	}
	if err := out.Close(); err != nil {
		return err
	}
	// Owners as they were: spill files are root's, read by the commands.
	if st, ok := fi.Sys().(*syscall.Stat_t); ok {
		return os.Lchown(to, int(st.Uid), int(st.Gid))
	}
	return nil
}

// writeTar writes the files and directories under dir as a tar.
func writeTar(w io.Writer, dir string) error {
	tw := tar.NewWriter(w)
	err := filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(dir, path)
		if err != nil || rel == "." {
			return err
		}
		fi, err := d.Info()
		if err != nil {
			return err
		}
		if !fi.Mode().IsRegular() && !fi.IsDir() {
			return nil
		}
		h, err := tar.FileInfoHeader(fi, "")
		if err != nil {
			return err
		}
		h.Name = filepath.ToSlash(rel)
		if fi.IsDir() {
			h.Name += "/"
		}
		if err := tw.WriteHeader(h); err != nil {
			return err
		}
		if fi.IsDir() {
			return nil
		}
		f, err := os.Open(path)
		if err != nil {
			return err
		}
		defer f.Close()
		_, err = io.Copy(tw, f)
		return err
	})
	if err != nil {
		return err
	}
	return tw.Close()
}

// readTar unpacks r into dir: regular files and directories only, every
// name confined to dir, at most max bytes of content, which it returns.
// It reads r to its EOF: a store's reader says only there whether the
// bytes were whole (snapshot.ErrCorrupt), and that error is returned.
func readTar(r io.Reader, dir string, max int64) (int64, error) {
	tr := tar.NewReader(r)
	var total int64
	for {
		h, err := tr.Next()
		if err == io.EOF {
			// The archive's end; what follows (padding) up to r's end.
			if _, err := io.Copy(io.Discard, io.LimitReader(r, 1<<20)); err != nil {
				return total, fmt.Errorf("%w: %w", sandbox.ErrInvalid, err)
			}
			if n, _ := io.Copy(io.Discard, io.LimitReader(r, 1)); n > 0 {
				return total, fmt.Errorf("%w: more than 1 MiB after the archive's end", sandbox.ErrInvalid)
			}
			return total, nil
		}
		if err != nil {
			return total, fmt.Errorf("%w: %w", sandbox.ErrInvalid, whyUnreadable(r, max, err))
		}
		name := filepath.Clean(filepath.FromSlash(h.Name))
		if !filepath.IsLocal(name) {
			return total, fmt.Errorf("%w: entry %q is not a relative path inside the image", sandbox.ErrInvalid, h.Name)
		}
		to := filepath.Join(dir, name)
		switch h.Typeflag {
		case tar.TypeDir:
			// Its mode and owner, which copyFiles carries on.
			if err := os.MkdirAll(to, 0o700); err != nil {
				return total, err
			}
			if err := os.Chmod(to, os.FileMode(h.Mode).Perm()); err != nil {
				return total, err
			}
			if err := os.Lchown(to, h.Uid, h.Gid); err != nil {
				return total, err
			}
		case tar.TypeReg:
			if total += h.Size; h.Size < 0 || total > max {
				return total, fmt.Errorf("%w: more than %d bytes", sandbox.ErrInvalid, max)
			}
			if err := os.MkdirAll(filepath.Dir(to), 0o700); err != nil {
				return total, err
			}
			f, err := os.OpenFile(to, os.O_WRONLY|os.O_CREATE|os.O_EXCL, os.FileMode(h.Mode).Perm())
			if err != nil {
				return total, fmt.Errorf("%w: entry %q: %v", sandbox.ErrInvalid, h.Name, err)
			}
			_, err = io.Copy(f, io.LimitReader(tr, h.Size))
			if cerr := f.Close(); err == nil {
				err = cerr
			}
			if err != nil {
				return total, err
			}
			if err := os.Lchown(to, h.Uid, h.Gid); err != nil {
				return total, err
			}
		default:
			return total, fmt.Errorf("%w: entry %q is of type %q: an image holds files and directories only", sandbox.ErrInvalid, h.Name, h.Typeflag)
		}
	}
}

// whyUnreadable is err, an archive that does not parse, or, if the
// stream's reader fails further on (read to its end, at most max bytes:
// a store's reader says at its end whether the bytes were whole), that
// failure (snapshot.ErrCorrupt) with err.
func whyUnreadable(r io.Reader, max int64, err error) error {
	if _, rerr := io.Copy(io.Discard, io.LimitReader(r, max)); rerr != nil {
		return fmt.Errorf("%w (%v)", rerr, err)
	}
	return err
}

// exportWorkspace writes the host workspace at root into the file to.
func exportWorkspace(ctx context.Context, root, to string) error {
	f, err := os.OpenFile(to, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return err
	}
	if _, err := workspace.Export(ctx, root, f, workspace.Limits{}); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

// importWorkspace replaces the host workspace at root with the image's,
// if it has one.
func importWorkspace(ctx context.Context, image, root string, maxBytes int64) error {
	f, err := os.Open(filepath.Join(image, imageWorkspace))
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	defer f.Close()
	_, err = workspace.Import(ctx, root, f, workspace.Limits{MaxBytes: maxBytes})
	return err
}

// restoreHostFiles puts the image's host directory files into dir, the
// new sandbox's host directory, before the restore opens them again.
func restoreHostFiles(image, dir string) error {
	src := filepath.Join(image, imageHost)
	if _, err := os.Stat(src); errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	return copyFiles(src, dir)
}

// restoreOpts are the NewTask options of a restore from image ("" none).
func restoreOpts(image string) []client.NewTaskOpts {
	if image == "" {
		return nil
	}
	return []client.NewTaskOpts{client.WithRestoreImagePath(filepath.Join(image, imageRunsc))}
}
