package pwsh

import "errors"

// A Command is one command a script would run, as the reader sees it: a
// command of a pipeline, a statement list, a block, a subexpression or a
// string, whether or not it runs, or one that a command of the script runs
// (Invoke-Expression's string, Start-Process's program, ...).
type Command struct {
	// Name is the command the name resolves to, spelled as PowerShell
	// spells it when the reader knows it: a built-in alias is folded (ri is
	// Remove-Item), an alias the script defines is its target, a path or a
	// module-qualified name is its last part. "" when Args[0] names the
	// command as written: a Dynamic command, a Native program, a
	// redirection on its own.
	Name string
	// Args are the command's words, the name first as it runs (an alias's
	// target as written): quotes and escapes removed, parameters as written
	// with an ASCII dash, arrays flattened. A word that is not a literal
	// ($x, "a$b", (...)) is kept as written. Empty for what is not a
	// command: a Dynamic construct of an expression, a redirection on its
	// own.
	Args []string
	// Literal says, per word of Args, whether it is a literal.
	Literal []bool
	// Redirects are the files of the command's redirections.
	Redirects []string
	// Text is the command as written (clipped), with a note on how its name
	// resolved ("(alias of Remove-Item)"), for explanations.
	Text string
	// Via names what runs the command ("Invoke-Expression",
	// "Start-Process", Options.Via, ...), the innermost one when they nest.
	Via string
	// Depth counts the wrappers around the command, Options.Depth
	// included.
	Depth int
	// Scripts name the scripts the command is read in below Options.Via,
	// outermost first (["Invoke-Expression", "[scriptblock]::Create"]):
	// Parse's errors inside them are prefixed "Invoke-Expression:
	// [scriptblock]::Create: ", and so can a caller's about the command.
	Scripts []string
	// Dynamic reports that what runs cannot be read statically: a name that
	// is not a literal or is a wildcard pattern, or a construct that runs
	// code the script does not show (Why says which).
	Dynamic bool
	// Why says what makes a Dynamic command unreadable when it is not its
	// name.
	Why string
	// Wrapper reports that the command only runs the commands that follow
	// it (Invoke-Expression 'x', Start-Process x), or that it is one more
	// reading of a name (a Get- fallback: `date` may be Get-Date; what an
	// alias being defined will run): a caller judges the others by it only
	// when they say nothing.
	Wrapper bool
	// Native reports a program the OS starts by its file name
	// (Start-Process's and exec's): its name is not one PowerShell
	// resolves, and compares as written.
	Native bool
	// Program reports a command that may be a program which runs others in
	// turn (env, sudo, xargs, bash -c, pwsh -c): the reader does not know
	// the programs of the system, so the caller reads Args for what it
	// runs. The other commands run nothing the reader has not listed.
	Program bool
}

// Options say where a script is read.
type Options struct {
	// Depth counts the wrappers around the script (0: the pwsh tool's
	// command; 1: a script a command of it runs through pwsh -c, ...).
	// Scripts and programs nest at most 4 wrappers deep: deeper, what runs
	// is a Dynamic command.
	Depth int
	// Via names what runs the script ("pwsh -c"); it prefixes errors.
	Via string
	// Budget is shared by the readings of one analysis (a bash command that
	// runs pwsh -c twice): nil for one of its own.
	Budget *Budget
}

// Budget bounds the work of the readings that share it: bytes read
// (re-reads included) and turns of the reader's loops. The zero value is
// an unused budget; it is not safe for concurrent use.
type Budget struct {
	work, steps int
}

// ErrTooComplex is wrapped by the errors of a script beyond the reader's
// bounds (its size, nesting, commands, work).
var ErrTooComplex = errors.New("too complex to analyse")

// Bounds of the reader.
const (
	maxScriptBytes   = 256 << 10 // a script at Depth 0
	maxInnerBytes    = 64 << 10  // a script a wrapper runs
	maxNesting       = 256       // constructs open at once
	maxCommands      = 2000      // commands of one Parse
	maxWrapperDepth  = 4         // scripts and programs run by wrappers, nested
	maxTextBytes     = 200       // Command.Text
	maxRedirectBytes = 4 << 10   // one of Command.Redirects
	maxWork          = 4 << 20   // bytes read, with a Budget
	maxSteps         = 4 << 20   // turns of loops, with a Budget
)
