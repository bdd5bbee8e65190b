package main

import (
	"context"
	"encoding/json"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/shellbox/shellbox/executor"
	"github.com/shellbox/shellbox/sandbox/docker/dockertest"
	"github.com/shellbox/shellbox/sandbox/enginetest"
	"github.com/shellbox/shellbox/server"
	"github.com/shellbox/shellbox/server/client"
	"github.com/shellbox/shellbox/tools"
)

// burnCommand spins the shell until its own CPU time, as the scheduler
// counts it to the nanosecond (/proc/<pid>/schedstat, read by the shell's
// builtin read), reaches 2 s: a known amount however loaded the host.
const burnCommand = `while read ns rest < /proc/$$/schedstat && [ "$ns" -lt 2000000000 ]; do :; done; echo "burned $ns ns"`

// memBurnCommand holds 256 MiB for 10 s: dd reads 256 MiB of /dev/zero
// into one buffer (every page touched), then blocks writing it to a
// reader that takes a byte and sleeps 10 s. It prints when it started,
// when the buffer was full (the reader's byte came) and when the sleep
// ended, as bash's $EPOCHREALTIME.
const memBurnCommand = `t0=$EPOCHREALTIME; dd if=/dev/zero bs=256M count=1 status=none | { head -c 1 >/dev/null; t1=$EPOCHREALTIME; sleep 10; echo "$t0 $t1 $EPOCHREALTIME"; }`

// usageInterval is the test server's sampling interval, the least the
// configuration takes: memory GiB-seconds are the memory in use at each
// reading times the time since the reading before, so a step in memory is
// counted up to one interval early or late at each of its edges (for 256
// MiB held 10 s, up to 10% either way).
const usageInterval = time.Second

// TestUsageKnownBurn runs `shellbox serve` on each engine, burns 2
// CPU-seconds in a session's sandbox and finds them in GET /v1/usage
// within 5% (the bound), in its CSV and in `shellbox usage`; and
// holds 256 MiB for 10 s in another session's sandbox and finds them in
// its memory peak and GiB-seconds.
func TestUsageKnownBurn(t *testing.T) { enginetest.Each(t, usageKnownBurn) }

func usageKnownBurn(t *testing.T, eng enginetest.Engine) {
	requireEngine(t)
	bin := buildBinaries(t)
	cfg := filepath.Join(t.TempDir(), "shellbox.yaml")
	os.WriteFile(cfg, []byte(eng.Config(t)+fmt.Sprintf(`sandbox:
  stateDir: %s
  owner: %s
  image: %s
  labels:
    %s: "1"
usage:
  interval: %s
server:
  tenants:
    %s:
      tokens: [%q]
`, dockertest.StateDir(t), dockertest.Owner(t), dockertest.Image, dockertest.LabelTest, usageInterval, dockerTenant, server.HashToken(testToken))), 0o644)
	srv := startServeProcess(t, bin, cfg)
	removeSandboxesAtEnd(t, cfg, dockerTenant, "burn", "mem")
	ctx := context.Background()
	c := client.New(srv.url, testToken, nil)
	callIn := func(session, command string) string {
		t.Helper()
		r, err := c.Call(ctx, session, "bash", json.RawMessage(fmt.Sprintf(`{"command":%q,"description":"usage test"}`, command)))
		if err != nil || r.IsError {
			t.Fatalf("%s: %v %q", command, err, r.Text)
		}
		return r.Text
	}
	call := func(command string) string { t.Helper(); return callIn("burn", command) }
	call("true")
	// cpu returns the session's CPU-seconds once two readings of the
	// usage a sampling interval and more apart agree (the sandbox idle,
	// its last sample in).
	cpu := func() float64 {
		t.Helper()
		last := -1.0
		for deadline := time.Now().Add(time.Minute); time.Now().Before(deadline); time.Sleep(1500 * time.Millisecond) {
			rep, err := c.Usage(ctx, map[string][]string{"session": {"burn"}})
			if err != nil {
				t.Fatal(err)
			}
			if len(rep.Sessions) == 1 && rep.Sessions[0].SandboxSeconds > 0 {
				if v := rep.Sessions[0].CPUSeconds; math.Abs(v-last) < 0.005 {
					return v
				}
				last = rep.Sessions[0].CPUSeconds
			}
		}
		t.Fatal("the session's usage did not settle in a minute")
		return 0
	}
	before := cpu()
	t.Log(call(burnCommand))
	after := cpu()
	burned := after - before
	t.Logf("/v1/usage: %.3f CPU-seconds before the burn, %.3f after: %.3f counted for 2 burned", before, after, burned)
	if math.Abs(burned-2) > 0.1 {
		t.Errorf("/v1/usage counted %.3f CPU-seconds for a 2 s burn, want 2 within 5%%", burned)
	}

	// A known workspace write and a known spill (past the 30,000 bytes
	// kept in memory): the workspace within 5%, the spill exactly.
	call("head -c 10485760 /dev/urandom > /workspace/ws; head -c 100000 /dev/zero | tr '\\0' a")
	written := time.Now()
	var ws, spill int64
	for deadline := time.Now().Add(time.Minute); ; time.Sleep(time.Second) {
		rep, err := c.Usage(ctx, map[string][]string{"session": {"burn"}})
		if err != nil {
			t.Fatal(err)
		}
		if len(rep.Sessions) == 1 && rep.Sessions[0].WorkspaceMeasured.After(written) {
			ws, spill = rep.Sessions[0].WorkspaceBytes, rep.Sessions[0].SpillBytes
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("no workspace measurement after the write in a minute: %+v", rep.Sessions)
		}
	}
	t.Logf("/v1/usage: workspace %d bytes after writing 10 MiB (%.3f MiB), spill %d bytes", ws, float64(ws)/(1<<20), spill)
	if math.Abs(float64(ws)/(10<<20)-1) > 0.05 || spill != 100_000 {
		t.Errorf("/v1/usage: workspace %d bytes, spill %d: want 10 MiB within 5%%, and 100000", ws, spill)
	}

	// A background task's spill (300,000 bytes, past the tails and the
	// in-memory buffer), counted once its end is known: exactly its spill
	// file's size, once, whether a notice or bash_output told the server.
	r, err := c.Call(ctx, "burn", "bash", json.RawMessage(fmt.Sprintf(`{"command":%q,"description":"usage test","run_in_background":true}`,
		"head -c 300000 /dev/zero | tr '\\0' b")))
	bg, isBg := r.Value.(*tools.Background)
	if err != nil || !isBg {
		t.Fatalf("background start: %v %q", err, r.Text)
	}
	var ended *tools.TaskOutput
	for deadline := time.Now().Add(time.Minute); ended == nil; time.Sleep(200 * time.Millisecond) {
		r, err := c.Call(ctx, "burn", "bash_output", json.RawMessage(fmt.Sprintf(`{"task_id":%q}`, bg.TaskID)))
		o, ok := r.Value.(*tools.TaskOutput)
		if err != nil || !ok {
			t.Fatalf("bash_output: %v %q", err, r.Text)
		}
		if o.Status.State != executor.Running {
			ended = o
		} else if time.Now().After(deadline) {
			t.Fatal("the background task did not end in a minute")
		}
	}
	size, err := strconv.ParseInt(strings.TrimSpace(call("wc -c < "+ended.SpillPath)), 10, 64)
	if err != nil || size != 300_000 || ended.SpillBytes != size {
		t.Fatalf("spill file %s: %d bytes (%v), reported %d: want 300000 both", ended.SpillPath, size, err, ended.SpillBytes)
	}
	bgSpill := func() int64 {
		t.Helper()
		rep, err := c.Usage(ctx, map[string][]string{"session": {"burn"}})
		if err != nil || len(rep.Sessions) != 1 {
			t.Fatalf("usage: %v %+v", err, rep)
		}
		return rep.Sessions[0].SpillBytes - spill
	}
	got := bgSpill()
	for deadline := time.Now().Add(30 * time.Second); got < size && time.Now().Before(deadline); time.Sleep(time.Second) {
		got = bgSpill()
	}
	// A notice after the read, or a second read, must add nothing.
	time.Sleep(2 * time.Second)
	call("true")
	if _, err := c.Call(ctx, "burn", "bash_output", json.RawMessage(fmt.Sprintf(`{"task_id":%q}`, bg.TaskID))); err != nil {
		t.Fatal(err)
	}
	again := bgSpill()
	t.Logf("/v1/usage: spill grew by %d bytes for a background task's %d-byte spill file (%d after more reports)", got, size, again)
	if got != size || again != size {
		t.Errorf("/v1/usage: spill grew by %d, then %d, for a %d-byte background spill: want exactly %d", got, again, size, size)
	}

	usageKnownMemory(t, c, callIn)

	// The same figures as CSV, and through the CLI.
	var csvOut strings.Builder
	if err := c.UsageCSV(ctx, map[string][]string{"session": {"burn"}}, &csvOut); err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(csvOut.String(), "tenant,session,from,to,sandbox_seconds,cpu_seconds,") || !strings.Contains(csvOut.String(), dockerTenant+",burn,") {
		t.Errorf("CSV:\n%s", csvOut.String())
	}
	out, stderr, code := runBinary(t, bin, cfg, "usage", "--server", srv.url, "--token", testToken, "--session", "burn")
	if code != 0 || !strings.Contains(out, "CPU-S") || !strings.Contains(out, "WS-MIB") || !strings.Contains(out, dockerTenant) {
		t.Errorf("shellbox usage: %d\n%s\n%s", code, out, stderr)
	}
	// This host's usage files, read without the server, once it has
	// stopped (a server appends once a minute, and when it stops).
	srv.stop(t)
	out, stderr, code = runBinary(t, bin, cfg, "usage", "--tenant", dockerTenant, "--csv")
	if code != 0 || !strings.Contains(out, dockerTenant+",burn,") {
		t.Errorf("shellbox usage from the files: %d\n%s\n%s", code, out, stderr)
	}
}

// usageKnownMemory holds 256 MiB for 10 s in session mem's sandbox (a
// session of its own: a peak is the high-water mark of a sandbox's life,
// and cgroup v1's counts page cache, so the workspace write above would
// be in burn's) and checks /v1/usage: the peak is 256 MiB over the
// sandbox's baseline within 5%, and the GiB-seconds grew by 256 MiB times
// the measured hold within the bound the sampling allows.
func usageKnownMemory(t *testing.T, c *client.Client, callIn func(session, command string) string) {
	ctx := context.Background()
	type reading struct {
		sec, gibs float64
		peak      int64
	}
	read := func() reading {
		t.Helper()
		rep, err := c.Usage(ctx, map[string][]string{"session": {"mem"}})
		if err != nil || len(rep.Sessions) != 1 {
			t.Fatalf("usage: %v %+v", err, rep)
		}
		s := rep.Sessions[0]
		return reading{s.SandboxSeconds, s.MemoryGiBSeconds, s.MemoryPeakBytes}
	}
	callIn("mem", "true")
	time.Sleep(2 * time.Second) // the call's processes gone, readings in
	// The baseline: the sandbox's mean memory in use over 3 idle seconds
	// (GiB-seconds over sandbox-seconds, both from the same readings).
	a := read()
	time.Sleep(3 * time.Second)
	b := read()
	if b.sec-a.sec < 1 {
		t.Fatalf("usage: %.3f sandbox-seconds in 3 s idle", b.sec-a.sec)
	}
	base := (b.gibs - a.gibs) / (b.sec - a.sec) // GiB
	out := strings.TrimSpace(callIn("mem", memBurnCommand))
	var t0, t1, t2 float64
	if _, err := fmt.Sscanf(out, "%f %f %f", &t0, &t1, &t2); err != nil {
		t.Fatalf("memory burn: %q: %v", out, err)
	}
	time.Sleep(2 * time.Second) // the burn's last readings in
	d := read()
	const burn = 0.25 // GiB
	hold, ramp, iv := t2-t1, t1-t0, usageInterval.Seconds()
	extra := (d.gibs - b.gibs) - base*(d.sec-b.sec)
	want := burn * hold
	peakWant := float64(256<<20) + base*(1<<30)
	t.Logf("/v1/usage: baseline %.2f MiB; 256 MiB filled in %.3f s, held %.3f s: peak %d bytes (%.2f MiB, %+.2f%% of 256 MiB + baseline); "+
		"GiB-seconds grew %.4f over the baseline's (%.3f sandbox-seconds), %+.2f%% of 256 MiB x the hold (%.4f), %+.2f%% of 2.5",
		base*1024, ramp, hold, d.peak, float64(d.peak)/(1<<20), (float64(d.peak)/peakWant-1)*100,
		extra, d.sec-b.sec, (extra/want-1)*100, want, (extra/2.5-1)*100)
	if d.peak < 256<<20 || math.Abs(float64(d.peak)/peakWant-1) > 0.05 {
		t.Errorf("/v1/usage: memory peak %d bytes after holding 256 MiB over a %.2f MiB baseline: want at least 256 MiB and within 5%% of %.0f",
			d.peak, base*1024, peakWant)
	}
	// The sampler counts the memory at each reading times the time since
	// the reading before: the rise is counted up to one interval early,
	// the fall up to one interval late, so the 256 MiB held for the hold
	// count within 256 MiB x one interval of 256 MiB x the hold. On top:
	// the fill (between nothing and 256 MiB for the ramp) and the burn's
	// own processes (dd, the shells, sleep: allowed 5%, as the peak).
	lo, hi := burn*(hold-iv), burn*1.05*(hold+ramp+iv)
	if extra < lo || extra > hi {
		t.Errorf("/v1/usage: memory GiB-seconds grew %.4f over the baseline for 256 MiB held %.3f s (filled in %.3f s), sampled every %v: want %.4f to %.4f",
			extra, hold, ramp, usageInterval, lo, hi)
	}
}
