package executortest

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"sync"
	"testing"

	"github.com/shellbox/shellbox/executor"
	"github.com/shellbox/shellbox/tools"
)

// runScenario runs sc in a session of its own and compares the transcript of
// its recorded calls with its golden file. A scenario that stops early logs
// the transcript so far instead.
func (s *suite) runScenario(t *testing.T, group string, sc scenario) {
	ss := s.newSession(t, sc.profile, group+"-"+sc.name)
	ss.golden = group + "_" + sc.name
	finished := false
	defer func() {
		tr := ss.transcript()
		switch {
		case tr == "":
		case !finished:
			t.Logf("transcript so far:\n%s", indent(tr))
		default:
			checkGolden(t, ss.golden, strings.TrimSuffix(tr, "\n"))
		}
	}()
	sc.run(ss)
	finished = true
}

func foregroundScenarios() []scenario {
	return []scenario{
		{name: "parallel_same_session", run: parallelSameSession},
	}
}

// parallelSameSession runs ten foreground calls of one session at once;
// each gets its own output and exit code.
func parallelSameSession(s *session) {
	const n = 10
	var wg sync.WaitGroup
	results := make([]tools.Result, n)
	for i := range n {
		wg.Go(func() {
			ctx, cancel := context.WithTimeout(context.Background(), callBound)
			defer cancel()
			args := bashArgs(fmt.Sprintf("sleep 0.2; echo out%d; echo err%d >&2; exit %d", i, i, i+1))
			results[i] = s.in.call(ctx, tools.Invocation{Session: s.id, Tool: tools.ToolBash, Args: json.RawMessage(args)})
		})
	}
	wg.Wait()
	for i, r := range results {
		s.note(r)
		s.checkInvariants(tools.ToolBash, "parallel call", r)
		s.want(fmt.Sprintf("call %d", i), r, fmt.Sprintf("out%d\n[stderr]\nerr%d\n[exit code: %d]", i, i, i+1))
	}
}

func envScenarios() []scenario {
	return []scenario{
		{name: "background", run: envBackground},
		{name: "no_state", run: envNoState},
	}
}

// envBackground: a background task gets the same managed environment, and
// no more, as a foreground call.
func envBackground(s *session) {
	id := s.start(`env | grep '^DSH_' | sort; echo "canary=${` + canaryName + `-unset}"`)
	s.waitNotice(id)
	s.do(tools.ToolBashOutput, taskArgs(id))
}

// envNoState: every call starts a fresh shell in the session cwd.
func envNoState(s *session) {
	s.do(tools.ToolBash, bashArgs("cd /; export FOO=bar; echo set"))
	s.do(tools.ToolBash, bashArgs(`pwd; echo "FOO=${FOO-unset}"`))
}

func pwshScenarios() []scenario {
	return []scenario{{name: "pwsh", run: pwsh}}
}

// pwsh runs the PowerShell tool where the executor has it, and otherwise
// checks it is refused with the contract's text.
func pwsh(s *session) {
	const d = `"description":"d"`
	if !s.in.exec.Has(context.Background(), s.id, executor.Pwsh) {
		s.golden = "pwsh_unavailable"
		s.do(tools.ToolPwsh, `{"command":"Write-Output hi",`+d+`}`)
		s.do(tools.ToolPwsh, `{"command":"Write-Output hi",`+d+`,"run_in_background":true}`)
		// Arguments are validated first, whatever the image.
		s.do(tools.ToolPwsh, `{}`)
		return
	}
	s.golden = "pwsh_available"
	s.do(tools.ToolPwsh, `{"command":"Write-Output hi",`+d+`}`)
	s.do(tools.ToolPwsh, `{"command":"$env:DSH_SHELL; $env:DSH_SESSION_ID",`+d+`}`)
	s.do(tools.ToolPwsh, `{"command":"[Console]::Error.WriteLine('oops')",`+d+`}`)
	s.do(tools.ToolPwsh, `{"command":"exit 3",`+d+`}`)
	s.do(tools.ToolPwsh, `{"command":"(Get-Location).Path",`+d+`}`)
	r := s.do(tools.ToolPwsh, `{"command":"Write-Output bg",`+d+`,"run_in_background":true}`)
	if bg, ok := r.Value.(*tools.Background); ok {
		s.waitNotice(bg.TaskID)
		s.do(tools.ToolBashOutput, taskArgs(bg.TaskID))
	}
}
