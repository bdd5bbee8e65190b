package main

import (
	"bufio"
	"bytes"
	"context"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/shellbox/shellbox/agentapi"
	"github.com/shellbox/shellbox/executor"
)

const testToken = "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"

// TestListenNeedsToken: --listen without a token of the minimum length in
// the environment refuses to start.
func TestListenNeedsToken(t *testing.T) {
	for _, tok := range []string{"", "short"} {
		t.Setenv(EnvToken, tok)
		var out bytes.Buffer
		if code := run([]string{"--listen", "127.0.0.1:0"}, &out); code != 2 || !strings.Contains(out.String(), "needs a per-session token") {
			t.Errorf("token %q: %d %q", tok, code, out.String())
		}
	}
	var out bytes.Buffer
	if code := run([]string{"--no-setuid", "--uid", "4242", "--listen", "127.0.0.1:0"}, &out); code != 2 {
		t.Errorf("--no-setuid with another uid: %d %q", code, out.String())
	}
}

// TestTokenFile: --token-file reads the token (not the environment) and
// removes the file; a missing, short or oversized file refuses to start.
func TestTokenFile(t *testing.T) {
	dir := t.TempDir()
	f := filepath.Join(dir, "token")
	if err := os.WriteFile(f, []byte(testToken+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	tok, err := tokenFromFile(f)
	if err != nil || tok != testToken {
		t.Errorf("token %q, %v", tok, err)
	}
	if _, err := os.Stat(f); !os.IsNotExist(err) {
		t.Errorf("the token file stays: %v", err)
	}
	os.WriteFile(f, bytes.Repeat([]byte("x"), maxTokenFile+1), 0o600)
	if _, err := tokenFromFile(f); err == nil || !strings.Contains(err.Error(), "over 4096 bytes") {
		t.Errorf("oversized: %v", err)
	}
	t.Setenv(EnvToken, "")
	for name, content := range map[string]string{"short": "short\n", "missing": ""} {
		p := filepath.Join(dir, name)
		if content != "" {
			os.WriteFile(p, []byte(content), 0o600)
		}
		var out bytes.Buffer
		if code := run([]string{"--listen", "127.0.0.1:0", "--token-file", p}, &out); code != 2 {
			t.Errorf("%s: %d %q", name, code, out.String())
		}
	}
}

// TestInstall: --install copies the running binary, mode 0555; --own gives
// a directory to --uid:--gid, 0755.
func TestInstall(t *testing.T) {
	dir := t.TempDir()
	own := filepath.Join(dir, "ws")
	if err := os.Mkdir(own, 0o777); err != nil {
		t.Fatal(err)
	}
	dest := filepath.Join(dir, "agent")
	var out bytes.Buffer
	args := []string{"--install", dest}
	root := os.Geteuid() == 0
	if root {
		args = append(args, "--own", own, "--uid", "1234", "--gid", "2345")
	}
	if code := run(args, &out); code != 0 {
		t.Fatalf("--install: %d %q", code, out.String())
	}
	self, _ := os.Executable()
	want, _ := os.ReadFile(self)
	got, err := os.ReadFile(dest)
	if err != nil || !bytes.Equal(got, want) {
		t.Fatalf("installed copy differs from %s (%v)", self, err)
	}
	if fi, _ := os.Stat(dest); fi.Mode().Perm() != 0o555 {
		t.Errorf("installed mode %v, want 0555", fi.Mode().Perm())
	}
	if root {
		fi, _ := os.Stat(own)
		st := fi.Sys().(*syscall.Stat_t)
		if st.Uid != 1234 || st.Gid != 2345 || fi.Mode().Perm() != 0o755 {
			t.Errorf("--own: %d:%d %v, want 1234:2345 0755", st.Uid, st.Gid, fi.Mode().Perm())
		}
	}
	if code := run([]string{"--own", own}, &out); code != 2 {
		t.Errorf("--own without --install: %d", code)
	}
}

// tcpAgent is the built agent serving on a loopback TCP port.
type tcpAgent struct {
	ep  agentapi.Endpoint
	ws  string
	cmd *exec.Cmd
	log *bytes.Buffer
}

// startTCPAgent starts the built agent with --listen on a free loopback
// port and the token in its environment; as is the credential it runs
// with (nil: this process's).
func startTCPAgent(t *testing.T, as *syscall.Credential, extra ...string) *tcpAgent {
	t.Helper()
	bin := filepath.Join(buildAgent(t), "shellbox-agent")
	base, err := os.MkdirTemp("", "sbagent-tcp")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(base) })
	os.Chmod(base, 0o755)
	ws, spill := filepath.Join(base, "ws"), filepath.Join(base, "spill")
	for _, d := range []string{ws, spill} {
		if err := os.Mkdir(d, 0o755); err != nil {
			t.Fatal(err)
		}
		if as != nil {
			os.Chown(d, int(as.Uid), int(as.Gid))
		}
	}
	args := append([]string{"--listen", "127.0.0.1:0", "--socket", filepath.Join(base, "unused.sock"),
		"--root", ws, "--home", ws, "--spill-dir", spill, "--cgroup", "off"}, extra...)
	cmd := exec.Command(bin, args...)
	cmd.Env = append(os.Environ(), EnvToken+"="+testToken)
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: as}
	stderr, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	a := &tcpAgent{ws: ws, cmd: cmd, log: &bytes.Buffer{}}
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	addr := make(chan string, 1)
	go func() {
		re := regexp.MustCompile(`serving tcp (\S+) `)
		sc := bufio.NewScanner(stderr)
		for sc.Scan() {
			a.log.WriteString(sc.Text() + "\n")
			if m := re.FindStringSubmatch(sc.Text()); m != nil {
				addr <- m[1]
			}
		}
		close(addr)
		io.Copy(io.Discard, stderr)
	}()
	select {
	case ad, ok := <-addr:
		if !ok {
			t.Fatalf("agent ended before serving")
		}
		a.ep = agentapi.Endpoint{Network: "tcp", Address: ad, Token: testToken}
	case <-time.After(20 * time.Second):
		t.Fatal("agent never said where it serves")
	}
	if _, err := os.Stat(filepath.Join(base, "unused.sock")); err == nil {
		t.Errorf("with --listen the agent also made its unix socket")
	}
	return a
}

func (a *tcpAgent) run(t *testing.T, c *agentapi.Client, command string) executor.Result {
	t.Helper()
	lim := executor.DefaultLimits()
	lim.Grace = 300 * time.Millisecond
	s, err := lim.Resolve(context.Background(), executor.Request{Session: "s", Command: command, Timeout: 10 * time.Second}, a.ws,
		[]string{"PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin", "HOME=" + a.ws})
	if err != nil {
		t.Fatal(err)
	}
	res, err := c.Run(context.Background(), s)
	if err != nil {
		t.Fatalf("run %q: %v", command, err)
	}
	return res
}

// TestTCPToken: with --listen the agent serves on TCP, refuses a client
// without the token or with another one, serves one with it; commands, run
// as --uid, see no token in their environment and cannot read the agent's.
func TestTCPToken(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("shellbox-agent: the TCP test starts commands as uid 1000 and needs root")
	}
	a := startTCPAgent(t, nil, "--uid", "1000", "--gid", "1000", "--nproc", "321")
	ctx := context.Background()
	for _, tok := range []string{"", "wrong", testToken + "0"} {
		ep := a.ep
		ep.Token = tok
		if _, err := agentapi.DialEndpoint(ctx, ep); err == nil || !strings.Contains(err.Error(), "missing or wrong token") {
			t.Errorf("token %q: %v, want the refusal", tok, err)
		}
	}
	c, err := agentapi.DialEndpoint(ctx, a.ep)
	if err != nil {
		t.Fatalf("dial with the token: %v\n%s", err, a.log)
	}
	defer c.Close()
	res := a.run(t, c, `id -u; env | grep -c `+EnvToken+`; cat /proc/$PPID/environ >/dev/null 2>&1 && echo readable || echo denied; ulimit -u`)
	if res.Stdout != "1000\n0\ndenied\n321\n" {
		t.Errorf("from a command: %q (stderr %q), want uid 1000, no token variable, the agent's environ denied, RLIMIT_NPROC 321", res.Stdout, res.Stderr)
	}
}

// TestNoSetuid: an agent running as the commands' uid (the restricted Pod
// Security profile) is still out of their reach: its environment (the
// token) is unreadable, it survives the signals they can send it, and it
// keeps serving.
func TestNoSetuid(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("shellbox-agent: the --no-setuid test starts the agent as uid 1000 and needs root")
	}
	a := startTCPAgent(t, &syscall.Credential{Uid: 1000, Gid: 1000}, "--no-setuid", "--uid", "1000", "--gid", "1000")
	ctx := context.Background()
	c, err := agentapi.DialEndpoint(ctx, a.ep)
	if err != nil {
		t.Fatalf("dial: %v\n%s", err, a.log)
	}
	defer c.Close()
	res := a.run(t, c, `id -u; cat /proc/self/oom_score_adj; [ "$(stat -c %u /proc/$PPID/environ)" = 0 ] && echo root-owned;`+
		` cat /proc/$PPID/environ >/dev/null 2>&1 && echo readable || echo denied;`+
		` for s in TERM HUP INT QUIT USR1 USR2 ABRT PIPE ALRM TRAP SYS XCPU PWR; do kill -$s $PPID || echo "kill $s failed"; done; echo sent`)
	// 1000: commands are born with the raised OOM score, which the
	// non-dumpable agent still sets (its oom_score_adj opened before).
	if res.Stdout != "1000\n1000\nroot-owned\ndenied\nsent\n" {
		t.Errorf("from a command: %q (stderr %q)", res.Stdout, res.Stderr)
	}
	time.Sleep(200 * time.Millisecond) // let signals land, were they to end it
	if res := a.run(t, c, "echo alive"); res.Stdout != "alive\n" {
		t.Errorf("after the signals: %+v\n%s", res, a.log)
	}
	if a.cmd.ProcessState != nil {
		t.Errorf("the agent exited: %v", a.cmd.ProcessState)
	}
}
