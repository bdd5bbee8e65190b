// Package pwsh reads a PowerShell script (what `pwsh -NoProfile
// -NonInteractive -Command <script>` runs) into the commands it would run,
// as mvdan.cc/sh reads bash: Parse returns every command of its pipelines,
// statement lists, blocks, subexpressions and expandable strings, whether or
// not it runs, each with its name resolved as pwsh 7 on Linux resolves it
// (built-in aliases, the script's own Set-Alias, paths, module-qualified
// names, the Get- fallback) and its arguments as written or as literals.
// The scripts that commands run are read too, when they are literals:
// Invoke-Expression's string, [scriptblock]::Create's, a & { block };
// Start-Process and exec give the program they start (a Native command).
//
// It cannot see what is not in the text: a name or a script given by a
// variable, an expression or the pipeline's input; .NET calls (which are
// not commands, except those that run code: [scriptblock], [powershell],
// reflection, Add-Type, which make a Dynamic command); what a function does
// when it is called (its body is read where it is defined); files a script
// loads (. ./x.ps1, Import-Module); and what a program does with its
// arguments. Where the text runs what it does not show, the reader returns
// a Dynamic command saying why, never skips it; a construct it does not
// know is an error, never a guess. A Program command (env, sudo, bash -c,
// pwsh -c, ...) is for the caller to read with its knowledge of programs:
// a bash body comes back as the argument of bash -c, a pwsh -c one as a
// script to Parse again.
//
// There is no maintained PowerShell parser in Go, so this is a bounded
// recursive-descent reader that follows PowerShell's own tokenizer
// (src/System.Management.Automation/engine/parser/tokenizer.cs and
// CharTraits.cs) where it decides what a token is: which characters end a
// bare word, how quotes (smart quotes too), backtick escapes, here-strings,
// comments and $(...) inside strings are scanned, and when a pipeline
// element is an expression rather than a command. It is permissive where
// PowerShell would report an error and nothing would run, and strict where
// a mistake could hide a command. Every loop and buffer is bounded (the
// script's size, nesting, commands, and a Budget of work shared by the
// readings of one analysis); beyond a bound the error wraps ErrTooComplex.
//
// The files: reader.go (entry points, bounds, characters), statements.go
// (statements, pipelines, commands, redirections), words.go (words,
// strings, variables), expressions.go (expressions, members, types),
// command.go (name resolution and PowerShell's wrappers), names.go
// (PowerShell's names: aliases, dynamic types and members), api.go (the
// types a caller sees).
package pwsh
