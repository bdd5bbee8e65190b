package faults_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io/fs"
	"net/http"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/shellbox/shellbox/internal/mountinfo"
	"github.com/shellbox/shellbox/sandbox"
	"github.com/shellbox/shellbox/sandbox/enginetest"
	"github.com/shellbox/shellbox/server/client"
	"github.com/shellbox/shellbox/tools"
)

// stormFor is how long TestRetryStorm's clients storm.
const stormFor = 20 * time.Second

// TestRetryStorm: 8 clients of one `shellbox serve` on Docker (runc), its
// tenant at 2 calls in flight and the default request rate (50/s, burst
// 100), each retrying a refused call at once (no Retry-After honoured)
// for 20 s, session after session: two calls, then one DELETE, which it
// does not retry, as a client that gives up on a refused DELETE (or
// dies). It fails if a DELETE was refused (429), and if, once the clients
// are done, the owner has a sandbox left, or mounts, loop devices or
// files of a session under the state directory: a session whose DELETE
// was refused by the rate limit kept its sandbox, workspace and mounts
// until the idle reaper (the soak's first version left 12-28 so).
func TestRetryStorm(t *testing.T) {
	s := newServed(t, enginetest.Docker, sandbox.RuntimeRunc, "")
	s.tenantSetting(t, "maxConcurrentCalls: 2")
	p := s.start(t)
	const workers = 8
	hc := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: workers + 4}}
	c := client.New(p.url, token, hc)
	end := time.Now().Add(stormFor)
	var mu sync.Mutex
	var calls, refused, made, deletes int
	var deleteRefused, failures []string
	note := func(list *[]string, s string) {
		if len(*list) < 10 {
			*list = append(*list, s)
		}
	}
	var wg sync.WaitGroup
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for gen := 0; time.Now().Before(end); gen++ {
				session := fmt.Sprintf("storm-%d-%d", w, gen)
				for k := 0; k < 2 && time.Now().Before(end); {
					ctx, cancel := context.WithTimeout(context.Background(), hung)
					r, err := c.Call(ctx, session, tools.ToolBash, json.RawMessage(fmt.Sprintf(`{"command":"echo %d","description":"storm"}`, k)))
					cancel()
					text := r.Text
					if err != nil {
						text = err.Error()
					}
					mu.Lock()
					calls++
					switch {
					case refusal(text) || strings.Contains(text, "session limit reached"):
						refused++ // at once again
					case err != nil || r.IsError || r.Text != fmt.Sprint(k):
						note(&failures, fmt.Sprintf("%s: %s", session, text))
						k++
					default:
						if k == 0 {
							made++
						}
						k++
					}
					mu.Unlock()
				}
				ctx, cancel := context.WithTimeout(context.Background(), hung)
				err := c.DeleteSession(ctx, session)
				cancel()
				mu.Lock()
				deletes++
				switch {
				case err != nil && refusal(err.Error()):
					note(&deleteRefused, fmt.Sprintf("%s: %v", session, err))
				case err != nil && !strings.Contains(err.Error(), "no_such_session"):
					note(&failures, fmt.Sprintf("delete %s: %v", session, err))
				}
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	// A removal is done when its DELETE answered: nothing to wait for.
	left := s.sandboxes(t)
	mounts, err := mountinfo.Under(s.stateDir)
	if err != nil {
		t.Fatal(err)
	}
	loops := loopsUnder(s.stateDir)
	t.Logf("storm: %d calls, %d refused (429), %d sessions with a sandbox, %d DELETEs; left: %d sandboxes, %d mounts, %d loop devices; calls failed otherwise (not asserted): %q",
		calls, refused, made, deletes, len(left), len(mounts), loops, failures)
	if made == 0 {
		t.Fatal("no session got a sandbox: the storm tested nothing")
	}
	if len(deleteRefused) > 0 {
		t.Errorf("DELETEs refused: %q", deleteRefused)
	}
	for _, sb := range left {
		t.Errorf("left: sandbox %s of session %s (%s, created %s)", sb.ID, sb.Session, sb.State, sb.Created)
	}
	if len(mounts) > 0 || loops > 0 {
		t.Errorf("left under the state directory: %d mounts, %d loop devices", len(mounts), loops)
	}
	var files []string
	filepath.WalkDir(s.stateDir, func(path string, d fs.DirEntry, err error) error {
		if err == nil && strings.HasPrefix(d.Name(), "storm-") && len(files) < 20 {
			files = append(files, strings.TrimPrefix(path, s.stateDir))
		}
		return nil
	})
	if len(files) > 0 {
		t.Errorf("left under the state directory: %v", files)
	}
}
