package server

import (
	"encoding/json"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/shellbox/shellbox/executor"
	"github.com/shellbox/shellbox/tools"
	"github.com/shellbox/shellbox/usage"
)

// spillMeter is a fake usage.Meter.Spill: what it was told, per session.
type spillMeter struct {
	mu    sync.Mutex
	bytes map[string]int64
	calls int
}

func (m *spillMeter) spill(tenant, session string, n int64) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.bytes == nil {
		m.bytes = map[string]int64{}
	}
	m.bytes[tenant+"/"+session] += n
	m.calls++
}

func (m *spillMeter) get(key string) (int64, int) {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.bytes[key], m.calls
}

// TestTaskSpillCountedOnce: a background task that spilled N bytes is
// metered N, once, whatever mix of its own notice, bash_output and
// bash_kill reports its end, in any order and repeated; a relayed notice,
// a notice handed back in a call's result, a running status and a task
// this server did not start are never metered.
func TestTaskSpillCountedOnce(t *testing.T) {
	const n = 300_000
	ended := executor.Status{State: executor.Completed}
	killed := executor.Status{State: executor.Killed, ExitCode: -1, Signal: "SIGTERM"}
	type report func(r *rig, id string)
	own := func(r *rig, id string) {
		r.srv.notice("acme", "s1", tools.Notice{TaskID: id, Status: ended, SpillBytes: n}, false)
	}
	relayed := func(r *rig, id string) {
		r.srv.notice("acme", "s1", tools.Notice{TaskID: id, Status: ended, SpillBytes: n}, true)
	}
	output := func(r *rig, id string) {
		r.srv.book.called("acme", "s1", tools.ToolBashOutput, nil, tools.Result{Value: &tools.TaskOutput{Kind: "output", TaskID: id,
			Output: executor.Output{SpillPath: "/x", SpillBytes: n, Status: ended}}})
	}
	running := func(r *rig, id string) {
		r.srv.book.called("acme", "s1", tools.ToolBashOutput, nil, tools.Result{Value: &tools.TaskOutput{Kind: "output", TaskID: id,
			Output: executor.Output{SpillPath: "/x", Status: executor.Status{State: executor.Running}}}})
	}
	kill := func(r *rig, id string) {
		r.srv.book.called("acme", "s1", tools.ToolBashKill, nil, tools.Result{Value: &tools.TaskKill{Kind: "kill", TaskID: id,
			Status: killed, SpillBytes: n}})
	}
	inResult := func(r *rig, id string) {
		r.srv.book.called("acme", "s1", tools.ToolBash, nil, tools.Result{Value: &tools.Foreground{Kind: "foreground"},
			Notices: []tools.Notice{{TaskID: id, Status: ended, SpillBytes: n}}})
	}
	for _, tt := range []struct {
		name    string
		reports []report
		want    int64
	}{
		{"notice", []report{own}, n},
		{"notice, then bash_output twice", []report{own, output, output}, n},
		{"bash_output, then the notice", []report{running, output, own}, n},
		{"bash_kill, bash_output, notice, bash_kill", []report{kill, output, own, kill}, n},
		{"notice twice", []report{own, own}, n},
		{"the notice in a call's result, then its own", []report{inResult, own}, n},
		{"relayed notice", []report{relayed}, 0},
		{"relayed notice, then its own copy", []report{relayed, own}, n},
		{"relayed notice, then bash_output", []report{relayed, output, output}, n},
		{"notice in a call's result only", []report{inResult}, 0},
		{"running", []report{running, running}, 0},
	} {
		t.Run(tt.name, func(t *testing.T) {
			r := newRig(t, nil)
			m := &spillMeter{}
			r.srv.book = newTaskBook(m.spill)
			r.srv.book.called("acme", "s1", tools.ToolBash, json.RawMessage(`{"command":"yes"}`),
				tools.Result{Value: &tools.Background{Kind: "background", TaskID: "t1"}})
			for _, rep := range tt.reports {
				rep(r, "t1")
			}
			got, calls := m.get("acme/s1")
			if got != tt.want || calls > 1 {
				t.Errorf("metered %d bytes in %d counts, want %d once", got, calls, tt.want)
			}
		})
	}
	// A task another replica started (not in this book): its end read
	// here is that replica's to meter.
	r := newRig(t, nil)
	m := &spillMeter{}
	r.srv.book = newTaskBook(m.spill)
	output(r, "elsewhere")
	kill(r, "elsewhere")
	own(r, "elsewhere")
	if got, calls := m.get("acme/s1"); got != 0 || calls != 0 {
		t.Errorf("a task not started here: metered %d bytes in %d counts", got, calls)
	}
}

// TestUsageCountsTaskSpill: through the local backend, a background task
// whose output outgrows memory is metered the size of its spill file,
// once, though both its notice and bash_output report its end.
func TestUsageCountsTaskSpill(t *testing.T) {
	m := usage.NewMeter(&usage.Memory{}, nil)
	r := newRig(t, func(c *Config) { c.Usage = m })
	notices := make(chan tools.Notice, 1)
	r.b.notify = func(tenant, session string, n tools.Notice) {
		r.srv.Notify(tenant, session, n)
		notices <- n
	}
	code, res := r.json("POST", "/v1/sessions/sp/tools/bash", tokenAcme, map[string]any{
		"command": "head -c 300000 /dev/zero | tr '\\0' b", "description": "output", "run_in_background": true})
	id, _ := res["result"].(map[string]any)["taskId"].(string)
	if code != 200 || id == "" {
		t.Fatalf("start: %d %v", code, res)
	}
	select {
	case n := <-notices:
		if n.SpillBytes != 300_000 {
			t.Errorf("notice: %+v, want a 300000-byte spill", n)
		}
	case <-time.After(time.Minute):
		t.Fatal("no notice in a minute")
	}
	var path string
	for range 2 {
		code, res = r.json("POST", "/v1/sessions/sp/tools/bash_output", tokenAcme, map[string]any{"task_id": id})
		v, _ := res["result"].(map[string]any)
		if code != 200 || v["spillBytes"] != 300_000.0 {
			t.Fatalf("bash_output: %d %v", code, res)
		}
		path, _ = v["spillPath"].(string)
	}
	fi, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	code, b := r.do("GET", "/v1/usage?session=sp", tokenAcme, "", nil)
	var rep UsageReport
	if code != 200 || json.Unmarshal(b, &rep) != nil || len(rep.Sessions) != 1 {
		t.Fatalf("%d %s", code, b)
	}
	if got := rep.Sessions[0].SpillBytes; got != fi.Size() || got != 300_000 {
		t.Errorf("spill bytes %d, want the spill file's %d", got, fi.Size())
	}
}
