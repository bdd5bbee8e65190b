// Command standin is a stand-in for cmd/shellbox-agent in the sandbox tests:
// a static PID 1 that listens on /run/shellbox/agent.sock and runs one
// command per connection, as a given uid/gid, in its own process group, the
// way the real agent will (oom_score_adj raised, privileges dropped before
// exec). It reaps every zombie, so a fork bomb's leftovers do not hold pids.
//
// Usage:
//
//	standin [serve]                  PID 1 mode (default)
//	standin exec UID GID MS ARGV...  run ARGV as serve does, print the Response (docker exec path)
//	standin run UID GID ARGV...      drop to UID:GID and exec ARGV
//	standin probe                    print "nnp=N seccomp=N uid=N" from prctl/getuid
//
// Protocol: one JSON request line, one JSON response line, per connection.
package main

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

const socketPath = "/run/shellbox/agent.sock"

// Request asks the stand-in to run Argv as Uid:Gid for at most TimeoutMs.
type Request struct {
	Argv      []string `json:"argv"`
	UID       int      `json:"uid"`
	GID       int      `json:"gid"`
	TimeoutMs int      `json:"timeout_ms"`
}

// Response is what came of it.
type Response struct {
	Stdout   string `json:"stdout"`
	Stderr   string `json:"stderr"`
	ExitCode int    `json:"exit_code"`
	Signal   string `json:"signal,omitempty"`
	TimedOut bool   `json:"timed_out,omitempty"`
	Error    string `json:"error,omitempty"`
}

const maxOutput = 1 << 20

func main() {
	args := os.Args[1:]
	mode := "serve"
	if len(args) > 0 {
		mode, args = args[0], args[1:]
	}
	switch mode {
	case "serve":
		serve()
	case "run", "child":
		if len(args) < 3 {
			fmt.Fprintln(os.Stderr, "standin run UID GID ARGV...")
			os.Exit(2)
		}
		uid, _ := strconv.Atoi(args[0])
		gid, _ := strconv.Atoi(args[1])
		child(uid, gid, args[2:])
	case "exec":
		if len(args) < 4 {
			fmt.Fprintln(os.Stderr, "standin exec UID GID TIMEOUT_MS ARGV...")
			os.Exit(2)
		}
		var req Request
		req.UID, _ = strconv.Atoi(args[0])
		req.GID, _ = strconv.Atoi(args[1])
		req.TimeoutMs, _ = strconv.Atoi(args[2])
		req.Argv = args[3:]
		r := &reaper{waiters: map[int]chan syscall.WaitStatus{}}
		go r.loop()
		b, _ := json.Marshal(run(r, req))
		fmt.Println(string(b))
	case "probe":
		nnp, _ := unix.PrctlRetInt(unix.PR_GET_NO_NEW_PRIVS, 0, 0, 0, 0)
		sec, _ := unix.PrctlRetInt(unix.PR_GET_SECCOMP, 0, 0, 0, 0)
		fmt.Printf("nnp=%d seccomp=%d uid=%d\n", nnp, sec, os.Getuid())
	default:
		fmt.Fprintln(os.Stderr, "standin: unknown mode", mode)
		os.Exit(2)
	}
}

// child raises its OOM score (no privilege needed), drops to uid:gid and
// execs argv. Going from uid 0 to a non-zero uid clears the permitted and
// effective capability sets.
func child(uid, gid int, argv []string) {
	_ = os.WriteFile("/proc/self/oom_score_adj", []byte("1000"), 0)
	fail := func(what string, err error) {
		fmt.Fprintf(os.Stderr, "standin: %s: %v\n", what, err)
		os.Exit(126)
	}
	if err := syscall.Setgroups([]int{}); err != nil {
		fail("setgroups", err)
	}
	if err := syscall.Setgid(gid); err != nil {
		fail("setgid", err)
	}
	if err := syscall.Setuid(uid); err != nil {
		fail("setuid", err)
	}
	env := []string{"PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin", "HOME=/workspace"}
	_ = os.Setenv("PATH", strings.TrimPrefix(env[0], "PATH="))
	path, err := exec.LookPath(argv[0])
	if err != nil {
		fail("lookpath", err)
	}
	fail("exec", syscall.Exec(path, argv, env))
}

// reaper owns wait4: every child status goes through it, to the waiter
// registered for that pid, or nowhere (orphans reparented to PID 1).
type reaper struct {
	mu      sync.Mutex
	waiters map[int]chan syscall.WaitStatus
}

func (r *reaper) loop() {
	sig := make(chan os.Signal, 64)
	signal.Notify(sig, syscall.SIGCHLD)
	tick := time.NewTicker(200 * time.Millisecond) // SIGCHLD coalesces
	for {
		select {
		case <-sig:
		case <-tick.C:
		}
		r.mu.Lock()
		for {
			var ws syscall.WaitStatus
			pid, err := syscall.Wait4(-1, &ws, syscall.WNOHANG, nil)
			if pid <= 0 || err != nil {
				break
			}
			if c, ok := r.waiters[pid]; ok {
				delete(r.waiters, pid)
				c <- ws
			}
		}
		r.mu.Unlock()
	}
}

// start starts a process with the reaper locked, so its status cannot be
// reaped before the waiter is registered.
func (r *reaper) start(argv []string, files []*os.File) (int, chan syscall.WaitStatus, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	p, err := os.StartProcess(argv[0], argv, &os.ProcAttr{
		Dir:   "/workspace",
		Files: files,
		Env:   []string{},
		Sys:   &syscall.SysProcAttr{Setpgid: true},
	})
	if err != nil {
		return 0, nil, err
	}
	pid := p.Pid // Release sets p.Pid to -1: kill(-(-1)) would be kill(1)
	c := make(chan syscall.WaitStatus, 1)
	r.waiters[pid] = c
	_ = p.Release()
	return pid, c, nil
}

func serve() {
	// Park a few OS threads now: under a fork bomb the pids limit is
	// exhausted and the Go runtime cannot create a thread later (it dies
	// trying). Idle threads are kept and reused.
	var wg sync.WaitGroup
	for range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			runtime.LockOSThread()
			time.Sleep(50 * time.Millisecond)
			runtime.UnlockOSThread()
		}()
	}
	wg.Wait()

	r := &reaper{waiters: map[int]chan syscall.WaitStatus{}}
	go r.loop()

	_ = os.MkdirAll(filepath.Dir(socketPath), 0o755)
	_ = os.Remove(socketPath)
	l, err := net.Listen("unix", socketPath)
	if err != nil {
		fmt.Fprintln(os.Stderr, "standin: listen:", err)
		os.Exit(1)
	}
	// Only root (the agent's peer on the host) may connect: commands run as
	// the sandbox user must not drive the agent.
	_ = os.Chmod(socketPath, 0o600)
	for {
		c, err := l.Accept()
		if err != nil {
			time.Sleep(10 * time.Millisecond)
			continue
		}
		go handle(r, c)
	}
}

func handle(r *reaper, c net.Conn) {
	defer c.Close()
	line, err := bufio.NewReader(io.LimitReader(c, 1<<20)).ReadBytes('\n')
	if err != nil {
		return
	}
	var req Request
	var resp Response
	if err := json.Unmarshal(line, &req); err != nil || len(req.Argv) == 0 {
		resp.Error = fmt.Sprintf("bad request: %v", err)
	} else {
		resp = run(r, req)
	}
	b, _ := json.Marshal(resp)
	_, _ = c.Write(append(b, '\n'))
}

func run(r *reaper, req Request) Response {
	var resp Response
	outR, outW, err := os.Pipe()
	if err != nil {
		return Response{Error: err.Error()}
	}
	errR, errW, err := os.Pipe()
	if err != nil {
		return Response{Error: err.Error()}
	}
	devnull, _ := os.Open(os.DevNull)
	self, _ := os.Executable()
	argv := append([]string{self, "child", strconv.Itoa(req.UID), strconv.Itoa(req.GID)}, req.Argv...)
	pid, status, err := r.start(argv, []*os.File{devnull, outW, errW})
	devnull.Close()
	outW.Close()
	errW.Close()
	if err != nil {
		outR.Close()
		errR.Close()
		return Response{Error: "start: " + err.Error()}
	}
	var so, se []byte
	var rw sync.WaitGroup
	rw.Add(2)
	go func() { defer rw.Done(); so = readBounded(outR) }()
	go func() { defer rw.Done(); se = readBounded(errR) }()

	timeout := time.Duration(req.TimeoutMs) * time.Millisecond
	if timeout <= 0 {
		timeout = 30 * time.Second
	}
	var ws syscall.WaitStatus
	select {
	case ws = <-status:
	case <-time.After(timeout):
		resp.TimedOut = true
		killGroup(pid)
		ws = <-status
	}
	// Whatever the leader left in its group goes too.
	killGroup(pid)
	done := make(chan struct{})
	go func() { rw.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(2 * time.Second):
		outR.Close()
		errR.Close()
		<-done
	}
	resp.Stdout, resp.Stderr = string(so), string(se)
	switch {
	case ws.Signaled():
		resp.Signal = unix.SignalName(ws.Signal())
		resp.ExitCode = -1
	default:
		resp.ExitCode = ws.ExitStatus()
	}
	return resp
}

// killGroup SIGKILLs process group pgid until no member is left; forks in
// flight may add members while it runs, hence the loop.
func killGroup(pgid int) {
	if pgid <= 1 {
		panic(fmt.Sprintf("killGroup(%d)", pgid))
	}
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) {
		if err := syscall.Kill(-pgid, syscall.SIGKILL); errors.Is(err, syscall.ESRCH) {
			return
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func readBounded(f *os.File) []byte {
	defer f.Close()
	b, _ := io.ReadAll(io.LimitReader(f, maxOutput))
	_, _ = io.Copy(io.Discard, f)
	return b
}
