package local

import (
	"context"
	"os"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/shellbox/shellbox/executor"
)

// TestCgroupReuse stresses the cgroup pool: many sequential and concurrent
// commands, mixed with commands that time out (some leaving only when
// SIGKILLed, which goes through cgroup.kill or a freeze) and background tasks
// ended by Kill, and commands that exit leaving a child behind, which must
// not survive. No command may be killed spuriously (a reused cgroup that
// still carries a kill, or that is frozen, would show as a `true` that did
// not exit 0), no command may start in a cgroup that was killed, and the
// pool must actually be used.
func TestCgroupReuse(t *testing.T) {
	t.Parallel()
	for _, mode := range modes(t) {
		t.Run(string(mode), func(t *testing.T) {
			t.Parallel()
			e := newExec(t, mode)
			const workers, rounds = 6, 12
			var (
				mu  sync.Mutex
				seq int
				// The cgroups `true` ran in, with the latest sequence
				// number taken before one started there; and the cgroups
				// killed commands ran in, with the earliest number taken
				// after one returned.
				ran    = map[string]int{}
				killed = map[string]int{}
			)
			next := func() int {
				mu.Lock()
				defer mu.Unlock()
				seq++
				return seq
			}
			// whoami is the command's cgroups (every hierarchy's line), as
			// the command sees them: the identity of the cgroup it ran in.
			const whoami = "cat /proc/$$/cgroup; "
			var wg sync.WaitGroup
			for w := range workers {
				wg.Go(func() {
					for i := range rounds {
						n := next()
						res, err := runErr(t, e, executor.Request{Command: whoami + "true"})
						if err != nil || res.ExitCode != 0 || res.Signal != "" || res.TimedOut {
							t.Errorf("worker %d round %d: `true` ended with %+v, %v", w, i, res, err)
							continue
						}
						mu.Lock()
						ran[res.Stdout] = max(ran[res.Stdout], n)
						mu.Unlock()
						switch (w + i) % 4 {
						case 0:
							// Ignores SIGTERM: only the SIGKILL loop ends it.
							res, err := runErr(t, e, executor.Request{
								Command: whoami + "trap '' TERM; sleep 30 & sleep 30",
								Timeout: 100 * time.Millisecond,
							})
							if err != nil || !res.TimedOut {
								t.Errorf("worker %d round %d: timeout ended with %+v, %v", w, i, res, err)
								continue
							}
							if res.Signal != "SIGKILL" {
								// Under load the timer can fire before bash
								// reached its trap: SIGTERM ended it, the
								// kill loop never ran, and the cgroup may
								// rightly be reused.
								continue
							}
							n := next()
							mu.Lock()
							if k, ok := killed[res.Stdout]; !ok || n < k {
								killed[res.Stdout] = n
							}
							mu.Unlock()
						case 1:
							// Leaves on SIGTERM: its cgroup may be reused.
							res, err := runErr(t, e, executor.Request{
								Command: whoami + "sleep 30",
								Timeout: 100 * time.Millisecond,
							})
							if err != nil || !res.TimedOut || res.Signal != "SIGTERM" {
								t.Errorf("worker %d round %d: timeout ended with %+v, %v", w, i, res, err)
							}
						case 3:
							// Exits leaving a child: the reused cgroup must
							// still see it (a stale read would not).
							res, err := runErr(t, e, executor.Request{Command: "sleep 30 >/dev/null 2>&1 & echo $!"})
							if err != nil || res.ExitCode != 0 {
								t.Errorf("worker %d round %d: leftover ended with %+v, %v", w, i, res, err)
								continue
							}
							if pid, _ := strconv.Atoi(strings.TrimSpace(res.Stdout)); mode != CgroupOff && (pid == 0 || !dead(pid)) {
								t.Errorf("worker %d round %d: child %q survived its command", w, i, res.Stdout)
							}
						case 2:
							task := start(t, e, executor.Request{Command: whoami + "sleep 30 & sleep 30"})
							time.Sleep(20 * time.Millisecond)
							// A bound, not a timing assertion: generous for a loaded machine.
							ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
							kr, err := task.Kill(ctx)
							cancel()
							if err != nil || kr.Status.State != executor.Killed {
								t.Errorf("worker %d round %d: Kill: %+v, %v", w, i, kr, err)
							}
						}
					}
				})
			}
			wg.Wait()
			for cg, k := range killed {
				if mode != CgroupOff && ran[cg] > k {
					t.Errorf("a command ran in a cgroup that was killed before:\n%s", cg)
				}
			}
			if mode != CgroupOff && len(ran) >= workers*rounds {
				t.Errorf("%d `true` commands ran in %d different cgroups: none was reused", workers*rounds, len(ran))
			}
			if t.Failed() {
				return
			}
			// And after all that, sequentially, still nothing killed.
			for i := range 50 {
				res := run(t, e, executor.Request{Command: "true"})
				if res.ExitCode != 0 || res.Signal != "" {
					t.Fatalf("sequential `true` %d ended with %+v", i, res)
				}
			}
		})
	}
}

// TestCgroupPoolStates checks the checks: a cgroup that is not as good as
// new is removed, not reused.
func TestCgroupPoolStates(t *testing.T) {
	t.Parallel()
	for _, mode := range modes(t) {
		if mode == CgroupOff {
			continue
		}
		t.Run(string(mode), func(t *testing.T) {
			t.Parallel()
			e := newExec(t, mode)
			h := e.hier.Load()
			c, err := h.get()
			if err != nil {
				t.Fatal(err)
			}
			if !c.reusable() {
				t.Fatalf("a new cgroup is not reusable")
			}
			if err := c.release(); err != nil {
				t.Fatal(err)
			}
			if got, _ := h.get(); got != c {
				t.Fatalf("released cgroup not reused")
			}
			c.kill() // on an empty cgroup: still marks it
			path := c.path
			if err := c.release(); err != nil {
				t.Fatal(err)
			}
			if n := len(h.pool.idle); n != 0 {
				t.Errorf("killed cgroup went to the pool (%d idle)", n)
			}
			if exists(path) {
				t.Errorf("killed cgroup %s not removed", path)
			}

			// Full pool: the extra ones are removed.
			var cs []*cgroup
			for range maxIdleCgroups + 3 {
				c, err := h.get()
				if err != nil {
					t.Fatal(err)
				}
				cs = append(cs, c)
			}
			for _, c := range cs {
				if err := c.release(); err != nil {
					t.Fatal(err)
				}
			}
			if n := len(h.pool.idle); n != maxIdleCgroups {
				t.Errorf("%d idle cgroups, want %d", n, maxIdleCgroups)
			}
			for _, c := range cs[maxIdleCgroups:] {
				if exists(c.path) {
					t.Errorf("cgroup %s beyond the bound not removed", c.path)
				}
			}
		})
	}
}

// TestCgroupPoolChildCgroup: a command that leaves a child cgroup behind
// (it has the rights to) makes its cgroup unfit for reuse.
func TestCgroupPoolChildCgroup(t *testing.T) {
	t.Parallel()
	for _, mode := range modes(t) {
		if mode == CgroupOff {
			continue
		}
		t.Run(string(mode), func(t *testing.T) {
			t.Parallel()
			e := newExec(t, mode)
			h := e.hier.Load()
			c, err := h.get()
			if err != nil {
				t.Fatal(err)
			}
			sub := c.path + "/sub"
			if err := os.Mkdir(sub, 0o755); err != nil {
				t.Skipf("cannot make a child cgroup: %v", err)
			}
			if c.reusable() {
				t.Errorf("a cgroup with a child cgroup counts as reusable")
			}
			if err := os.Remove(sub); err != nil {
				t.Fatal(err)
			}
			if !c.reusable() {
				t.Errorf("the child cgroup is gone, yet not reusable")
			}
			c.release()
		})
	}
}

func TestEventsEmpty(t *testing.T) {
	for in, want := range map[string]bool{
		"populated 0\nfrozen 0\n": true,
		"populated 1\nfrozen 0\n": false,
		"frozen 0\npopulated 0\n": true,
		"populated 10\n":          false,
		"":                        false,
	} {
		if got := eventsEmpty([]byte(in)); got != want {
			t.Errorf("eventsEmpty(%q) = %v", in, got)
		}
	}
}
