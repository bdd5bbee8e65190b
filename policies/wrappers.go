package policies

import (
	"strings"
	"unicode/utf8"

	"github.com/shellbox/shellbox/internal/clip"
)

// Wrappers: commands that run other commands. Rules see what they run, so
// `sudo rm`, `env rm`, `xargs rm`, `find . -exec rm {} +` and `bash -c "rm"`
// are all an rm to a rule that names rm. Option parsing follows the GNU and
// sudo manuals closely enough to find the command operand; a word that is not
// a literal where an option or the command could be makes the inner command
// dynamic (never allowed by a static rule).

type innerKind int

const (
	notWrapper   innerKind = iota
	runsArgv               // runs an argv (env, sudo, nice, timeout, xargs, ...)
	runsExec               // find -exec: runs argvs and acts itself
	runsScript             // runs shell scripts (bash -c, eval, su -c, alias values)
	shellStdin             // a shell reading its script from standard input
	runsPwsh               // runs pwsh scripts (pwsh -Command)
	pwshStdin              // pwsh reading its script from standard input
	dynamicInner           // runs something rules cannot see
	// opaqueCode: runs code the command does not show (a script file, an
	// interpreter's program, a Makefile). The one mark of that class: the
	// command itself is matched, a rule that names it decides, else the
	// policy's opaque decision applies.
	opaqueCode
)

type argvLits struct {
	argv []string
	lits []bool
}

type inner struct {
	kind    innerKind
	argvs   []argvLits
	scripts []string
	via     string // shown after the wrapper's name: "-c", "-exec"
	// acts: the command does something itself besides running what it
	// wraps (tar --to-command, git submodule foreach, sed): it takes the
	// default like any command when no rule matches it.
	acts bool
	why  string // dynamicInner: what rules cannot see, after the wrapper's name
}

// dynamic: a word that decides what the wrapper runs is not a literal.
var dynamic = inner{kind: dynamicInner, why: "runs a command given by a word that is not a literal"}

func argvFrom(argv []string, lits []bool, i int) inner {
	if i >= len(argv) {
		return inner{}
	}
	return inner{kind: runsArgv, argvs: []argvLits{{argv[i:], lits[i:]}}}
}

// unwrap says what the command argv (whose basename is name) runs.
func unwrap(name string, argv []string, lits []bool) inner {
	if w := argvWrappers[name]; w != nil {
		return w.unwrap(argv, lits)
	}
	switch name {
	case "--":
		// time -p -- CMD: the parser leaves bash's -- as the command.
		return argvFrom(argv, lits, 1)
	case "env":
		return unwrapEnv(argv, lits, 0)
	case "command":
		i, opts, ok := commandSpec.parseOpts(argv, lits, 1)
		switch {
		case !ok:
			return unknownOpts(name)
		case hasOpt(opts, "-v", "-V"):
			return inner{} // command -v: a lookup, runs nothing
		}
		return argvFrom(argv, lits, i)
	case "xargs":
		return unwrapXargs(argv, lits)
	case "find":
		return unwrapFind(argv, lits)
	case "eval":
		return scriptOf(argv[1:], lits[1:], "")
	case "watch":
		return unwrapWatch(argv, lits)
	case "alias":
		var in inner
		for i, a := range argv[1:] {
			if !lits[i+1] {
				return dynamic
			}
			if _, v, ok := strings.Cut(a, "="); ok {
				in.kind = runsScript
				in.scripts = append(in.scripts, v)
			}
		}
		return in
	case "su", "runuser":
		return unwrapSu(name, argv, lits)
	case "sg":
		// sg GROUP [-c] COMMAND: the command is run by /bin/sh -c.
		i := 2
		if i < len(argv) && lits[i] && argv[i] == "-c" {
			i++
		}
		if len(argv) < 2 || !lits[1] {
			return dynamic
		}
		if i >= len(argv) {
			return inner{kind: shellStdin}
		}
		return scriptOf(argv[i:], lits[i:], "-c")
	case "source", ".":
		return unwrapSource(argv, lits)
	case "busybox", "toybox":
		if len(argv) > 1 && lits[1] && strings.HasPrefix(argv[1], "-") {
			return inner{} // --list, --install, --help
		}
		return argvFrom(argv, lits, 1)
	case "bash", "sh", "dash", "zsh", "ksh", "ash", "mksh", "rbash", "ksh93", "pdksh", "yash", "posh", "bash5":
		return unwrapShell(argv, lits)
	case "pwsh", "powershell", "pwsh-preview", "pwsh-lts", "pwsh.exe", "powershell.exe":
		return unwrapPwsh(argv, lits)
	}
	in := unwrapRunner(name, argv, lits)
	in.acts = name != "trap"
	return in
}

// pwshSwitches are pwsh's command-line switches in the order its parser
// tries them (CommandLineParameterParser.cs): a word matches a switch when it
// is a prefix of the name at least as long as the shortest form.
var pwshSwitches = []struct {
	name, short string
	kind        byte // 's' switch, 'v' takes a value, 'c' -Command, 'w' -CommandWithArgs, 'f' -File, 'e' encoded, 'x' no script, 'd' reads commands elsewhere, 'n' -NoExit
}{
	{"version", "v", 'x'}, {"help", "h", 'x'}, {"?", "?", 'x'}, {"login", "l", 's'}, {"noexit", "noe", 'n'},
	{"noprofile", "nop", 's'}, {"nologo", "nol", 's'}, {"noninteractive", "noni", 's'},
	{"socketservermode", "so", 'd'}, {"v2socketservermode", "v2so", 'd'}, {"servermode", "s", 'd'},
	{"namedpipeservermode", "nam", 'd'}, {"sshservermode", "sshs", 'd'},
	{"noprofileloadtime", "noprofileloadtime", 's'}, {"interactive", "i", 's'},
	{"configurationfile", "configurationfile", 'v'}, {"configurationname", "config", 'v'},
	{"custompipename", "cus", 'v'}, {"commandwithargs", "commandwithargs", 'w'}, {"cwa", "cwa", 'w'},
	{"command", "c", 'c'}, {"windowstyle", "w", 'v'}, {"file", "f", 'f'}, {"outputformat", "o", 'v'},
	{"of", "o", 'v'}, {"inputformat", "inp", 'v'}, {"if", "if", 'v'}, {"executionpolicy", "ex", 'v'},
	{"ep", "ep", 'v'}, {"encodedcommand", "e", 'e'}, {"ec", "e", 'e'}, {"encodedarguments", "encodeda", 'e'},
	{"ea", "ea", 'e'}, {"settingsfile", "settings", 'v'}, {"sta", "sta", 's'}, {"mta", "mta", 's'},
	{"workingdirectory", "wo", 'v'}, {"wd", "wd", 'v'},
	{"removeworkingdirectorytrailingcharacter", "removeworkingdirectorytrailingcharacter", 's'},
	{"token", "to", 'v'}, {"utctimestamp", "utc", 'v'},
}

// unwrapPwsh says what the pwsh CLI runs: -Command's words joined (a pwsh
// script), -CommandWithArgs's script, nothing rules cannot see for a
// script file (-File, or the first word that is not a switch: pwsh is the
// command), and its standard input when no script is given.
func unwrapPwsh(argv []string, lits []bool) inner {
	noExit := false
	for i := 1; i < len(argv); i++ {
		if !lits[i] {
			return inner{kind: dynamicInner, why: "runs a script given by a word that is not a literal"}
		}
		a := strings.TrimSpace(argv[i])
		if a == "" {
			continue
		}
		r, n := utf8.DecodeRuneInString(a)
		if !isDash(r) && r != '/' {
			return inner{} // a script file
		}
		key := a[n:]
		if r2, n2 := utf8.DecodeRuneInString(key); key != "" && r2 == r {
			key = key[n2:]
		}
		key = pwshFold(key)
		kind := byte('f') // an unknown switch: pwsh takes it for the script file
		for _, s := range pwshSwitches {
			if len(key) >= len(s.short) && strings.HasPrefix(s.name, key) {
				kind = s.kind
				break
			}
		}
		switch kind {
		case 'x', 'f':
			if kind == 'f' && i+1 < len(argv) && argv[i+1] == "-" {
				return inner{kind: pwshStdin}
			}
			return inner{}
		case 'n':
			noExit = true
		case 'v':
			i++
		case 'd':
			return inner{kind: dynamicInner, why: "reads commands rules cannot see"}
		case 'e':
			return inner{kind: dynamicInner, why: "runs an encoded command rules cannot read"}
		case 'c', 'w':
			rest, rlits := argv[i+1:], lits[i+1:]
			if kind == 'w' && len(rest) > 1 {
				rest, rlits = rest[:1], rlits[:1]
			}
			switch {
			case len(rest) == 0:
				return inner{}
			case rest[0] == "-":
				return inner{kind: pwshStdin}
			case noExit:
				return inner{kind: dynamicInner, why: "-NoExit reads more commands from standard input"}
			}
			in := scriptOf(rest, rlits, "-c")
			if in.kind == runsScript {
				in.kind = runsPwsh
			}
			return in
		}
	}
	return inner{kind: pwshStdin} // no script: commands from standard input
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

// scriptOf joins words into one script, as eval does.
func scriptOf(words []string, lits []bool, via string) inner {
	if len(words) == 0 {
		return inner{}
	}
	for _, l := range lits {
		if !l {
			return inner{kind: dynamicInner, via: via, why: "runs a script that is not a literal"}
		}
	}
	return inner{kind: runsScript, scripts: []string{strings.Join(words, " ")}, via: via}
}

// envCommand skips env's (and sudo's) NAME=VALUE operands; bare is what
// runs when no command follows.
func envCommand(argv []string, lits []bool, i int, bare inner) inner {
	for ; i < len(argv); i++ {
		if !lits[i] {
			return dynamic
		}
		k, _, ok := strings.Cut(argv[i], "=")
		if !ok || k == "" {
			break
		}
		if hijacks(k) {
			return inner{kind: dynamicInner, why: "sets " + clip.To(k, 80) + ", which changes what runs"}
		}
	}
	if i >= len(argv) {
		return bare
	}
	return argvFrom(argv, lits, i)
}

func unwrapFind(argv []string, lits []bool) inner {
	in := inner{kind: runsExec, via: "-exec"}
	for i := 1; i < len(argv); i++ {
		switch argv[i] {
		case "-exec", "-execdir", "-ok", "-okdir":
		default:
			continue
		}
		j := i + 1
		for j < len(argv) && !(lits[j] && (argv[j] == ";" || argv[j] == "+")) {
			j++
		}
		if j > i+1 {
			cmd := argvLits{argv[i+1 : j], append([]bool(nil), lits[i+1:j]...)}
			if strings.Contains(cmd.argv[0], "{}") {
				cmd.lits[0] = false // runs the files it finds
			}
			in.argvs = append(in.argvs, cmd)
		}
		i = j
	}
	if len(in.argvs) == 0 {
		return inner{}
	}
	return in
}

var commandSpec = &optSpec{short: "pvV"}
