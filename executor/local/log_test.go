package local

import (
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/shellbox/shellbox/executor"
)

// TestLogSaysWhy: Config.Logf hears which command's tree was signalled, and
// why: a timeout, and a leader that left a process behind.
func TestLogSaysWhy(t *testing.T) {
	for _, mode := range modes(t) {
		t.Run(string(mode), func(t *testing.T) {
			var mu sync.Mutex
			var lines []string
			e := newExec(t, mode, func(c *Config) {
				c.Logf = func(format string, args ...any) {
					mu.Lock()
					lines = append(lines, fmt.Sprintf(format, args...))
					mu.Unlock()
				}
			})
			res := run(t, e, executor.Request{Command: "sleep 30", Timeout: 200 * time.Millisecond})
			if !res.TimedOut {
				t.Fatalf("not timed out: %+v", res)
			}
			run(t, e, executor.Request{Command: "sleep 30 & echo left"})
			mu.Lock()
			got := strings.Join(lines, "\n")
			mu.Unlock()
			for _, want := range []string{"timed out after 200ms: SIGTERM to its tree", "its leader exited, leaving processes behind: SIGTERM to its tree"} {
				if !strings.Contains(got, want) {
					t.Errorf("log lacks %q:\n%s", want, got)
				}
			}
		})
	}
}
