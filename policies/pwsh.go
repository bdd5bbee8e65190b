package policies

import (
	"errors"
	"fmt"
	"sync"

	"github.com/shellbox/shellbox/policies/pwsh"
)

// PowerShell calls: package pwsh reads a pwsh command into the commands it
// would run; here they become simple commands, and the programs among them
// go through the wrapper analysis of bash (env, sudo, bash -c, xargs,
// pwsh -c, ...). pwsh_match.go says how rules name them.

// analyzePwsh parses a pwsh command into its simple commands. An error
// means the command cannot be read statically (the unparseable decision
// applies).
func analyzePwsh(command string) ([]simpleCommand, error) {
	a := &analyzer{cmds: make([]simpleCommand, 0, 4)}
	if err := a.pwshScript(command, 0, ""); err != nil {
		return nil, err
	}
	if err := a.finish(command); err != nil {
		return nil, err
	}
	return a.cmds, nil
}

// pwshScript adds the simple commands of src, run by a pwsh process of its
// own (the pwsh tool, pwsh -Command) under depth wrappers.
func (a *analyzer) pwshScript(src string, depth int, via string) error {
	buf := pwshBufs.Get().(*[]pwsh.Command)
	defer func() {
		if cap(*buf) > maxPooledPwsh {
			return // a rare long script's: not kept
		}
		*buf = (*buf)[:0]
		clear((*buf)[:cap(*buf)]) // keep no strings alive
		pwshBufs.Put(buf)
	}()
	cmds, err := pwsh.AppendParse((*buf)[:0], src, pwsh.Options{Depth: depth, Via: via, Budget: &a.pwshBudget})
	*buf = cmds
	if err != nil {
		return pwshError{err}
	}
	for _, c := range cmds {
		sc := simpleCommand{Argv: c.Args, Dynamic: c.Dynamic, Redirects: c.Redirects, Text: c.Text, Via: c.Via,
			why: c.Why, Wrapper: c.Wrapper, name: c.Name, pwsh: !c.Native}
		if c.Program {
			err = a.wrapped(sc, c.Literal, nil, "", c.Depth)
		} else {
			err = a.add(sc)
		}
		if err != nil {
			// Where the reader would have reported it, had it read what the
			// program runs.
			for i := len(c.Scripts) - 1; i >= 0; i-- {
				err = fmt.Errorf("%s: %w", c.Scripts[i], err)
			}
			if via != "" {
				return fmt.Errorf("%s: %w", via, err)
			}
			return err
		}
	}
	return nil
}

// pwshBufs hold the reader's commands while they become simple commands,
// reused so that a decision allocates little; one longer than
// maxPooledPwsh commands is left to the garbage collector.
var pwshBufs = sync.Pool{New: func() any { b := make([]pwsh.Command, 0, 8); return &b }}

const maxPooledPwsh = 64

// pwshError is an error of the pwsh reader: its text, and errTooComplex
// when the reader hit one of its bounds.
type pwshError struct{ err error }

func (e pwshError) Error() string { return e.err.Error() }

func (e pwshError) Unwrap() error { return e.err }

func (e pwshError) Is(target error) bool {
	return target == errTooComplex && errors.Is(e.err, pwsh.ErrTooComplex)
}

// pwshFold folds a name as PowerShell compares names (pwsh.Fold).
func pwshFold(s string) string { return pwsh.Fold(s) }

// isDash: r is a dash to PowerShell (pwsh.IsDash).
func isDash(r rune) bool { return pwsh.IsDash(r) }
