package policies

import (
	"strings"

	"github.com/shellbox/shellbox/internal/clip"
)

// Commands that run commands but are not plain wrappers: a command string
// in an option (script -c, split --filter, tar --to-command, git -c
// core.pager), a program language that can start processes (awk's
// system(), sed's e), interpreters and make (code the command line does
// not show), terminal multiplexers, debuggers and job runners. Each is
// unwrapped when its command is a literal in a syntax the reader is sure
// of; else it is dynamic, or opaque (see opaqueCode) when a rule naming it
// may decide.

func opaque(why string) inner { return inner{kind: opaqueCode, why: why} }

func dynamicWhy(why string) inner { return inner{kind: dynamicInner, why: why} }

// interpreters run a program given on the command line, in a file or on
// standard input; none of it is shell the reader parses.
var interpreters = map[string]bool{
	"python": true, "python2": true, "python3": true, "pypy": true, "pypy3": true, "perl": true, "ruby": true,
	"node": true, "nodejs": true, "deno": true, "bun": true, "php": true, "lua": true, "luajit": true,
	"tclsh": true, "wish": true, "Rscript": true, "R": true, "julia": true, "guile": true, "racket": true,
	"sbcl": true, "clisp": true, "runghc": true, "runhaskell": true, "ghci": true, "java": true, "jshell": true,
	"groovy": true, "scala": true, "kotlin": true, "expect": true, "osascript": true, "swift": true,
	"dotnet-script": true, "elixir": true, "erl": true, "escript": true, "ocaml": true, "csi": true, "tcc": true,
	"gnuplot": true, "octave": true, "maxima": true, "gs": true, "ghostscript": true, "latexmk": true,
	"nodemon": true, "ts-node": true, "tsx": true, "npx": true, "pnpx": true, "bunx": true, "uvx": true, "pipx": true, "fish": true, "csh": true, "tcsh": true,
	"elvish": true, "nu": true, "xonsh": true, "rc": true, "es": true, "osh": true, "ysh": true, "oil": true,
	"dc": true, "m4": true, "gdb": true, "lldb": true, "vim": true, "vi": true, "nvim": true,
	"ex": true, "view": true, "emacs": true, "ed": true, "red": true,
	// Editors by another name: the alternatives' editor and vim builds, and
	// sensible-editor, which runs what VISUAL, EDITOR, SELECTED_EDITOR or a
	// ~/.selected_editor written earlier names.
	"editor": true, "sensible-editor": true, "vim.basic": true, "vim.tiny": true, "vim.nox": true, "gvim": true,
	"rvim": true, "vimdiff": true,
}

// makers run recipes from a file (a Makefile written first).
var makers = map[string]bool{"make": true, "gmake": true, "bmake": true, "pmake": true, "remake": true, "ninja": true,
	"just": true, "rake": true, "mk": true}

// runsAnything: commands whose way of running commands the reader does not
// follow (job runners, multiplexers, sandboxes, tracers): always dynamic.
var runsAnything = map[string]string{
	"parallel": "runs command templates", "sem": "runs command templates", "rush": "runs command templates",
	"systemd-run": "runs a command with options the reader does not follow", "firejail": "runs a command in its own sandbox",
	"bwrap": "runs a command in its own sandbox", "proot": "runs a command in its own root",
	"capsh": "runs a shell with options the reader does not follow", "nsjail": "runs a command in its own sandbox",
	"perf": "runs and records commands", "valgrind": "runs a command with options the reader does not follow",
	"pee": "runs its arguments as shell commands", "mispipe": "runs its arguments as shell commands",
	"run-parts": "runs every script of a directory", "at": "schedules commands read from standard input",
	"batch": "schedules commands read from standard input", "crontab": "schedules commands from a file",
	"entr": "runs a command with options the reader does not follow", "cpulimit": "runs a command with options the reader does not follow",
	"numactl": "runs a command with options the reader does not follow", "cgexec": "runs a command with options the reader does not follow",
	"runcon": "runs a command in another security context", "trickle": "runs a command with a preloaded library",
	"faketime": "runs a command with a preloaded library", "schedtool": "runs a command with options the reader does not follow",
	"start-stop-daemon": "runs a daemon", "daemonize": "runs a daemon", "tini": "runs a command with options the reader does not follow",
	"dumb-init": "runs a command with options the reader does not follow", "rlwrap": "runs a command with options the reader does not follow",
	"xvfb-run": "runs a command through a shell", "dtach": "runs a command in a detached terminal",
	"abduco": "runs a command in a detached terminal", "zellij": "runs commands in a terminal multiplexer",
	"byobu": "runs commands in a terminal multiplexer", "envdir": "runs a command with variables from files",
	"softlimit": "runs a command with options the reader does not follow", "chpst": "runs a command with options the reader does not follow",
	"lckdo": "runs a command with options the reader does not follow", "zrun": "runs a command on decompressed files",
	"vipe": "runs an editor", "sudoedit": "runs an editor", "xdg-open": "runs the handler of a file",
	"kubectl": "runs commands in a cluster", "docker": "runs commands in containers", "podman": "runs commands in containers",
	"nerdctl": "runs commands in containers", "ctr": "runs commands in containers", "lxc-attach": "runs commands in containers",
	"watchexec": "runs a command with options the reader does not follow", "newgrp": "starts a shell reading standard input",
	"rr": "records and runs a command", "bpftrace": "runs commands (-c, system)", "scriptlive": "replays input into a shell",
	"choom": "runs a command with options the reader does not follow", "uclampset": "runs a command with options the reader does not follow",
	"nix-shell": "runs commands in a shell it builds", "nix": "runs programs of packages", "direnv": "runs commands with variables from files",
	"aria2c": "runs commands on download events", "flatpak": "runs applications",
}

// unwrapRunner: the commands of this file; inner{} for every other
// command.
func unwrapRunner(name string, argv []string, lits []bool) inner {
	if why, ok := runsAnything[name]; ok && why != "" {
		if len(argv) == 2 && lits[1] && isHelp(argv[1]) {
			return inner{}
		}
		return dynamicWhy(why) // bare too: parallel, at and batch read commands from standard input
	}
	if p := argv[0]; isFdPath(p) || strings.HasPrefix(p, "/dev/") {
		return dynamicWhy("runs a program by a descriptor or /proc path, which names no known program")
	}
	switch {
	case interpreters[name] || isVersioned(name):
		if len(argv) == 2 && lits[1] && isHelp(argv[1]) {
			return inner{}
		}
		return opaque("runs a program the reader cannot read (an interpreter's code is not shell)")
	case makers[name]:
		if len(argv) == 2 && lits[1] && isHelp(argv[1]) {
			return inner{}
		}
		return opaque("runs recipes from a file the command does not show")
	case isLoader(name):
		return unwrapLoader(argv, lits)
	}
	switch name {
	case "fstab-decode":
		// fstab-decode COMMAND [ARG]...: runs COMMAND after decoding \NNN
		// octal escapes in every word (r\155 is rm).
		for k := 1; k < len(argv); k++ {
			if !lits[k] || strings.IndexByte(argv[k], '\\') >= 0 {
				return dynamicWhy("decodes \\NNN escapes in the command it runs")
			}
		}
		return argvFrom(argv, lits, 1)
	case "script":
		return unwrapScript(argv, lits)
	case "split", "gsplit":
		return unwrapLongCommand(argv, lits, []string{"filter"}, nil)
	case "tar", "gtar", "bsdtar":
		return unwrapTar(argv, lits)
	case "git":
		return unwrapGit(argv, lits)
	case "sed", "gsed":
		return unwrapSed(argv, lits)
	case "awk", "gawk", "mawk", "nawk", "original-awk", "busybox-awk":
		return unwrapAwk(argv, lits)
	case "ssh", "scp", "sftp", "slogin":
		if in := unwrapSSH(name, argv, lits); in.kind != notWrapper || name == "scp" || name == "sftp" {
			return in
		}
		// The remote command: run by the remote user's shell, read as a
		// script (the remote may be this sandbox).
		i, opts, ok := sshSpec.parseOpts(argv, lits, 1)
		switch {
		case !ok:
			return unknownOpts(name)
		case hasOpt(opts, "-N", "-V", "-G", "-Q"), i+1 >= len(argv):
			return inner{}
		}
		return scriptOf(argv[i+1:], lits[i+1:], "")
	case "rsync":
		for k := 1; k < len(argv); k++ {
			a := argv[k]
			if !lits[k] {
				return dynamic
			}
			if a == "-e" || strings.HasPrefix(a, "--rsh") || strings.HasPrefix(a, "--rsync-path") ||
				(strings.HasPrefix(a, "-") && !strings.HasPrefix(a, "--") && strings.ContainsRune(a, 'e')) {
				return dynamicWhy("runs a remote shell command given by " + clip.To(a, 40))
			}
		}
		return inner{}
	case "tmux", "screen":
		return unwrapMultiplexer(name, argv, lits)
	case "less":
		// +CMD runs less commands at start (! runs a shell, | pipes to one,
		// v an editor); a lesskey file binds keys to them.
		for k := 1; k < len(argv); k++ {
			a := argv[k]
			if !lits[k] || (strings.HasPrefix(a, "+") && strings.Trim(a, "+0123456789FGgq") != "") ||
				strings.HasPrefix(a, "-k") || strings.HasPrefix(a, "--lesskey") ||
				(strings.HasPrefix(a, "-") && !strings.HasPrefix(a, "--") && strings.ContainsRune(a, 'k')) {
				return dynamicWhy("is given start-up commands or key bindings, which may run a shell")
			}
		}
		return inner{}
	case "man":
		for k := 1; k < len(argv); k++ {
			a := argv[k]
			if !lits[k] || strings.HasPrefix(a, "--pager") || strings.HasPrefix(a, "--html") ||
				(len(a) > 1 && a[0] == '-' && a[1] != '-' && strings.ContainsAny(a, "PH")) {
				return dynamicWhy("runs a pager or browser given by " + clip.To(a, 40))
			}
		}
		return inner{}
	case "go":
		// Flags that name a program go runs; go generate runs the commands of
		// //go:generate lines (written first).
		for k := 1; k < len(argv); k++ {
			if !lits[k] {
				continue
			}
			if k == 1 && argv[k] == "generate" {
				return dynamicWhy("runs the commands of //go:generate lines, which the command does not show")
			}
			if strings.HasPrefix(argv[k], "-") && goFlagsRun(strings.TrimLeft(argv[k], "-")) {
				return dynamicWhy("is given " + clip.To(argv[k], 40) + ", which names a program go runs")
			}
		}
		return inner{}
	case "fd", "fdfind":
		for k := 1; k < len(argv); k++ {
			a := argv[k]
			if !lits[k] {
				continue
			}
			if a == "-x" || a == "--exec" || a == "-X" || a == "--exec-batch" {
				j := k + 1
				for j < len(argv) && !(lits[j] && argv[j] == ";") {
					j++
				}
				if j == k+1 {
					return inner{}
				}
				if !lits[k+1] || strings.Contains(argv[k+1], "{") {
					return dynamic
				}
				return inner{kind: runsExec, via: a, argvs: []argvLits{{argv[k+1 : j], lits[k+1 : j]}}}
			}
		}
		return inner{}
	case "rg", "ripgrep":
		return unwrapLongCommand(argv, lits, []string{"pre"}, nil)
	case "sdiff", "diff3":
		return unwrapLongCommand(argv, lits, []string{"diff-program"}, nil)
	case "hyperfine":
		return dynamicWhy("runs its arguments as shell commands")
	case "socat":
		for k := 1; k < len(argv); k++ {
			u := strings.ToUpper(argv[k])
			if !lits[k] || strings.Contains(u, "EXEC") || strings.Contains(u, "SYSTEM") {
				return dynamicWhy("runs a program given in an address")
			}
		}
		return inner{}
	case "nc", "ncat", "netcat", "nc.traditional", "nc.openbsd":
		for k := 1; k < len(argv); k++ {
			a := argv[k]
			if !lits[k] || strings.HasPrefix(a, "--exec") || strings.HasPrefix(a, "--sh-exec") ||
				strings.HasPrefix(a, "--lua-exec") || (strings.HasPrefix(a, "-") && !strings.HasPrefix(a, "--") &&
				strings.ContainsAny(a, "ec")) {
				return dynamicWhy("runs a program for connections (-e, -c, --exec)")
			}
		}
		return inner{}
	case "npm", "yarn", "pnpm", "bun":
		if len(argv) > 1 && lits[1] && (argv[1] == "exec" || argv[1] == "x" || argv[1] == "dlx") {
			return dynamicWhy("runs a package's program, which the command does not show")
		}
		return inner{}
	case "poetry", "pipenv", "uv", "pdm", "hatch", "rye", "conda", "mamba", "micromamba", "bundle", "pyenv",
		"rbenv", "nodenv", "asdf", "mise", "rtx", "pixi":
		// TOOL run|exec [--] COMMAND...: a command in a prepared environment.
		for k := 1; k < len(argv); k++ {
			if !lits[k] {
				return dynamic
			}
			if argv[k] != "run" && argv[k] != "exec" {
				if strings.HasPrefix(argv[k], "-") {
					continue
				}
				return inner{} // another subcommand
			}
			j := k + 1
			if j < len(argv) && lits[j] && argv[j] == "--" {
				j++
			}
			if j < len(argv) && (!lits[j] || strings.HasPrefix(argv[j], "-")) {
				return unknownOpts(name)
			}
			return argvFrom(argv, lits, j)
		}
		return inner{}
	case "hg":
		return dynamicWith(argv, lits, "may set a program hg runs", "--config", "--config-file")
	case "svn":
		return dynamicWith(argv, lits, "names a program svn runs", "--config-option", "--config-dir", "--editor-cmd",
			"--diff-cmd", "--diff3-cmd")
	case "jobs":
		// jobs -x COMMAND ARGS: runs the command with job specs replaced.
		for k := 1; k < len(argv); k++ {
			if lits[k] && argv[k] == "-x" {
				return argvFrom(argv, lits, k+1)
			}
		}
		return inner{}
	case "sort", "gsort":
		return unwrapLongCommand(argv, lits, []string{"compress-program"}, nil)
	case "zip":
		return unwrapLongCommand(argv, lits, []string{"unzip-command"}, []string{"-TT"})
	case "wget":
		return unwrapLongCommand(argv, lits, []string{"use-askpass"}, nil)
	case "pandoc":
		return dynamicWith(argv, lits, "runs the filter program it is given", "--filter", "-F", "--lua-filter", "-L")
	case "latex", "pdflatex", "xelatex", "lualatex", "tex", "pdftex", "luatex", "xetex", "etex":
		return dynamicWith(argv, lits, "may run shell commands (\\write18)", "-shell-escape", "--shell-escape",
			"-enable-write18", "--enable-write18", "-shell-restricted=false")
	case "fzf", "sk":
		return dynamicWith(argv, lits, "runs the commands its options bind", "--preview", "--bind", "--listen",
			"--with-shell", "--become", "--execute")
	case "sqlite3", "sqlite", "psql", "mysql", "mariadb", "duckdb":
		// Their dot- and backslash commands run shell commands.
		for k := 1; k < len(argv); k++ {
			a := argv[k]
			if !lits[k] || strings.Contains(a, ".sh") || strings.Contains(a, ".system") || strings.Contains(a, `\!`) ||
				strings.Contains(a, "|") || strings.Contains(a, ".load") || strings.Contains(a, "system ") ||
				strings.Contains(a, "edit(") || strings.HasPrefix(a, "-init") || strings.HasPrefix(a, "--init") {
				return dynamicWhy("is given commands that may run a shell or load a library")
			}
		}
		return inner{}
	case "mlr":
		for k := 1; k < len(argv); k++ {
			if !lits[k] || strings.Contains(argv[k], "system") || strings.Contains(argv[k], "exec") {
				return dynamicWhy("runs a DSL program that can start commands (system, exec)")
			}
		}
		return inner{}
	case "trap":
		return unwrapTrap(argv, lits)
	case "mapfile", "readarray":
		return unwrapMapfile(argv, lits)
	case "complete", "compgen":
		return unwrapComplete(argv, lits)
	case "enable":
		for k := 1; k < len(argv); k++ {
			if !lits[k] || (strings.HasPrefix(argv[k], "-") && strings.ContainsRune(argv[k], 'f')) {
				return dynamicWhy("loads a builtin from a shared object")
			}
		}
		return inner{}
	case "hash":
		for k := 1; k < len(argv); k++ {
			if !lits[k] || (strings.HasPrefix(argv[k], "-") && strings.ContainsRune(argv[k], 'p')) {
				return dynamicWhy("binds a command name to another program")
			}
		}
		return inner{}
	case "fc":
		return dynamicWhy("re-runs commands from the history")
	case "bind":
		for k := 1; k < len(argv); k++ {
			if !lits[k] || (strings.HasPrefix(argv[k], "-") && strings.ContainsAny(argv[k], "xf")) {
				return dynamicWhy("binds keys to commands")
			}
		}
		return inner{}
	case "shopt", "set":
		return inner{}
	}
	return inner{}
}

// dynamicWith: dynamic when an option (or a prefix of a long one given
// with =) of opts is present, or a word is not a literal.
func dynamicWith(argv []string, lits []bool, why string, opts ...string) inner {
	for k := 1; k < len(argv); k++ {
		a := argv[k]
		if !lits[k] {
			return dynamicWhy("is given a word that is not a literal, and " + why)
		}
		n, _, _ := strings.Cut(a, "=")
		for _, o := range opts {
			if n == o || (strings.HasPrefix(o, "--") && len(n) > 3 && strings.HasPrefix(o, n)) ||
				(len(o) == 2 && strings.HasPrefix(a, o)) {
				return dynamicWhy(why)
			}
		}
	}
	return inner{}
}

func isHelp(a string) bool {
	switch a {
	case "--version", "-V", "-v", "--help", "-h", "-version", "version":
		return true
	}
	return false
}

// isVersioned: python3.12, perl5.36, ruby3.1, node18, php8.2, lua5.4 ...
func isVersioned(name string) bool {
	for _, p := range []string{"python", "pypy", "perl", "ruby", "php", "lua", "node", "tclsh", "wish", "guile", "pwsh"} {
		if rest, ok := strings.CutPrefix(name, p); ok && rest != "" && strings.Trim(rest, "0123456789.-") == "" {
			return p != "pwsh"
		}
	}
	return false
}

// isLoader: the dynamic loader run as a program (ld-linux-x86-64.so.2 /bin/rm x).
func isLoader(name string) bool {
	return name == "ld.so" || strings.HasPrefix(name, "ld-linux") || strings.HasPrefix(name, "ld-musl") ||
		(strings.HasPrefix(name, "ld-") && strings.Contains(name, ".so")) || strings.HasPrefix(name, "ld64.so")
}

func unwrapLoader(argv []string, lits []bool) inner {
	spec := &loaderSpec
	i, opts, ok := spec.parseOpts(argv, lits, 1)
	switch {
	case !ok:
		return unknownOpts(argv[0])
	case hasOpt(opts, "--preload", "--audit", "--library-path"):
		return dynamicWhy("loads libraries into the program it runs")
	case hasOpt(opts, "--list", "--verify", "--help", "--version", "--list-tunables", "--list-diagnostics"):
		return inner{}
	}
	return argvFrom(argv, lits, i)
}

// unwrapScript: util-linux script runs -c's command with the shell, or an
// interactive shell reading standard input. Its options may follow the
// typescript file.
func unwrapScript(argv []string, lits []bool) inner {
	spec := &scriptSpec
	var cmd *opt
	for i := 1; i < len(argv); {
		j, opts, ok := spec.parseOpts(argv, lits, i)
		if !ok {
			return unknownOpts("script")
		}
		for k := range opts {
			if opts[k].name == "-c" || opts[k].name == "--command" {
				cmd = &opts[k]
			}
			if opts[k].name == "--help" || opts[k].name == "--version" {
				return inner{}
			}
		}
		i = j + 1 // the typescript file
	}
	if cmd == nil {
		return inner{kind: shellStdin}
	}
	return inner{kind: runsScript, scripts: []string{cmd.val}, via: "-c"}
}

// unwrapLongCommand finds long options (abbreviated or not, =value or
// value) whose value is a shell command (split --filter): their scripts, or
// dynamic when one is not a literal. short lists short options that do the
// same.
func unwrapLongCommand(argv []string, lits []bool, longNames []string, short []string) inner {
	var in inner
	for k := 1; k < len(argv); k++ {
		if !lits[k] {
			if strings.HasPrefix(argv[k], "-") {
				return dynamic
			}
			continue
		}
		a := argv[k]
		if a == "--" {
			break
		}
		val, has := "", false
		switch {
		case strings.HasPrefix(a, "--"):
			n, v, eq := strings.Cut(a[2:], "=")
			if n == "" || !prefixOfAny(n, longNames) {
				continue
			}
			val, has = v, eq
		case contains(short, a):
		default:
			continue
		}
		if !has {
			if k+1 >= len(argv) || !lits[k+1] {
				return dynamicWhy("runs a command given by a word that is not a literal")
			}
			k++
			val = argv[k]
		}
		in.kind = runsScript
		in.scripts = append(in.scripts, val)
		in.via = a
	}
	return in
}

func prefixOfAny(n string, names []string) bool {
	for _, x := range names {
		if strings.HasPrefix(x, n) {
			return true
		}
	}
	return false
}

// unwrapTar: GNU tar runs commands from --to-command, --use-compress-program
// (-I), --rsh-command, --info-script/--new-volume-script (-F), --rmt-command
// and --checkpoint-action=exec=. Literal ones are parsed; a short cluster
// or an old-style key with I or F, and anything not literal, is dynamic.
func unwrapTar(argv []string, lits []bool) inner {
	var in inner
	for k := 1; k < len(argv); k++ {
		a := argv[k]
		if !lits[k] {
			return dynamic
		}
		if a == "--" {
			break
		}
		switch {
		case strings.HasPrefix(a, "--"):
			n, v, eq := strings.Cut(a[2:], "=")
			if n == "" {
				continue
			}
			if prefixOfAny(n, []string{"checkpoint-action"}) && len(n) >= 4 {
				if !eq {
					if k+1 >= len(argv) || !lits[k+1] {
						return dynamic
					}
					k++
					v = argv[k]
				}
				if act, ok := strings.CutPrefix(v, "exec="); ok {
					in.kind, in.via = runsScript, "--checkpoint-action"
					in.scripts = append(in.scripts, act)
				} else if strings.Contains(v, "exec") {
					return dynamicWhy("runs a checkpoint action the reader does not follow")
				}
				continue
			}
			if len(n) < 3 || !prefixOfAny(n, []string{"to-command", "use-compress-program", "rsh-command", "info-script",
				"new-volume-script", "rmt-command"}) {
				continue
			}
			if !eq {
				if k+1 >= len(argv) || !lits[k+1] {
					return dynamic
				}
				k++
				v = argv[k]
			}
			in.kind, in.via = runsScript, "--"+n
			in.scripts = append(in.scripts, v)
		case k == 1 && !strings.HasPrefix(a, "-"), strings.HasPrefix(a, "-") && len(a) > 1:
			if strings.ContainsAny(a, "IF") {
				return dynamicWhy("is given -I or -F, which run a program")
			}
		}
	}
	return in
}

// safeGitConfig: configuration keys (by prefix) that never name a program.
var safeGitConfig = []string{"user.", "color.", "advice.", "init.defaultbranch", "safe.directory", "core.autocrlf",
	"core.quotepath", "core.filemode", "core.ignorecase", "core.longpaths", "core.safecrlf", "core.eol",
	"commit.gpgsign", "tag.gpgsign", "pull.rebase", "pull.ff", "push.default", "push.autosetupremote",
	"fetch.prune", "merge.ff", "rebase.autostash", "log.", "format.pretty", "column.", "i18n.", "http.sslverify",
	"protocol.version", "checkout.", "diff.renames", "diff.algorithm", "status.", "submodule.recurse",
	"maintenance.auto", "gc.auto", "feature.", "index.", "pack.", "transfer.fsckobjects", "blame.", "grep.",
	"url.", "remote.origin.url", "branch."}

func gitKeySafe(kv string) bool {
	k, _, _ := strings.Cut(kv, "=")
	k = strings.ToLower(k)
	for _, s := range safeGitConfig {
		if strings.HasPrefix(k, s) {
			return true
		}
	}
	return false
}

// unwrapGit: git's global options (-c with a key that may name a program,
// --config-env, --exec-path=), `git config` setting such a key (a program
// a later git runs), and subcommands that run commands (submodule foreach,
// rebase --exec, bisect run, filter-branch, difftool -x, grep -O, and the
// remote-helper program options).
func unwrapGit(argv []string, lits []bool) inner {
	spec := &gitSpec
	i, opts, ok := spec.parseOpts(argv, lits, 1)
	if !ok {
		return unknownOpts("git")
	}
	for _, o := range opts {
		switch {
		case o.name == "-c" && !gitKeySafe(o.val):
			return dynamicWhy("sets configuration " + clip.To(o.val, 60) + ", which may name a program git runs")
		case o.name == "--config-env", o.name == "--exec-path" && o.has:
			return dynamicWhy("is given " + o.name + ", which changes the programs git runs")
		}
	}
	if i >= len(argv) {
		return inner{}
	}
	sub, rest, rlits := argv[i], argv[i+1:], lits[i+1:]
	for k, a := range rest {
		if !rlits[k] || sub == "rebase" {
			continue
		}
		// git takes any unambiguous prefix of a long option (--receive=,
		// --exe=): a prefix of one that runs a program may be it (but
		// --to and --cc, format-patch's own options).
		name, _, _ := strings.Cut(a, "=")
		if len(name) < 3 || !strings.HasPrefix(name, "--") || name == "--to" || name == "--cc" {
			continue
		}
		for _, p := range []string{"--upload-pack", "--receive-pack", "--exec", "--extcmd", "--open-files-in-pager",
			"--tool", "--sendmail-cmd", "--to-cmd", "--cc-cmd", "--header-cmd"} {
			if strings.HasPrefix(p, name) {
				return dynamicWhy("is given " + p + ", which runs a program")
			}
		}
	}
	switch sub {
	case "config":
		// git config [--global|--local|...] KEY VALUE, git config set KEY VALUE.
		var ops []string
		for k, a := range rest {
			if !rlits[k] {
				return dynamic
			}
			if !strings.HasPrefix(a, "-") {
				ops = append(ops, a)
			}
		}
		if len(ops) > 0 && (ops[0] == "set" || ops[0] == "--add") {
			ops = ops[1:]
		}
		if len(ops) >= 2 && !gitKeySafe(ops[0]) {
			return dynamicWhy("sets configuration " + clip.To(ops[0], 60) + ", which may name a program a later git runs")
		}
		return inner{}
	case "submodule":
		for k, a := range rest {
			if a == "foreach" && rlits[k] {
				j := k + 1
				for j < len(rest) && rlits[j] && strings.HasPrefix(rest[j], "-") {
					j++
				}
				return scriptOf(rest[j:], rlits[j:], "submodule foreach")
			}
		}
	case "rebase":
		in := unwrapLongCommand(append([]string{"rebase"}, rest...), append([]bool{true}, rlits...), []string{"exec"}, []string{"-x"})
		if in.kind != notWrapper {
			return in
		}
		for k, a := range rest {
			if rlits[k] && strings.HasPrefix(a, "-") && !strings.HasPrefix(a, "--") && strings.ContainsRune(a, 'x') {
				return dynamicWhy("is given -x, which runs a command")
			}
		}
	case "bisect":
		if len(rest) > 0 && rlits[0] && rest[0] == "run" {
			return argvFrom(rest, rlits, 1)
		}
	case "filter-branch", "filter-repo", "difftool", "mergetool", "send-email", "instaweb", "daemon", "archimport",
		"cvsimport", "svn", "p4", "credential", "web--browse", "sh-setup", "remote-ext", "var", "hook":
		return dynamicWhy("`git " + sub + "` runs programs the reader does not follow")
	case "grep":
		for k, a := range rest {
			if rlits[k] && strings.HasPrefix(a, "-O") {
				return dynamicWhy("is given -O, which runs a pager")
			}
		}
	case "clone", "fetch", "pull", "ls-remote", "push", "archive":
		for k, a := range rest {
			if rlits[k] && (a == "-u" && sub != "push" || (sub == "clone" || sub == "ls-remote") && shortCluster(a, 'u')) {
				// clone and ls-remote -u is --upload-pack, also clustered
				// (-qu) or attached (-u'rm x'); push -u is --set-upstream.
				return dynamicWhy("is given a remote program to run")
			}
			if rlits[k] && strings.HasPrefix(a, "ext::") {
				return dynamicWhy("fetches through the ext:: transport, which runs a command")
			}
		}
	}
	return inner{}
}

// unwrapSed: GNU sed's e command and the e flag of s run shell commands; so
// does a script from a file the reader cannot see. --sandbox refuses them.
func unwrapSed(argv []string, lits []bool) inner {
	var scripts []string
	script := false // a -e or -f was given
	for k := 1; k < len(argv); k++ {
		a := argv[k]
		if !lits[k] {
			if !script {
				return dynamicWhy("runs a sed script that is not a literal")
			}
			continue
		}
		switch {
		case a == "--sandbox":
			return inner{}
		case a == "--":
			if !script && k+1 < len(argv) {
				if !lits[k+1] {
					return dynamicWhy("runs a sed script that is not a literal")
				}
				scripts = append(scripts, argv[k+1])
			}
			k = len(argv)
		case a == "-e" || a == "--expression":
			if k+1 >= len(argv) || !lits[k+1] {
				return dynamicWhy("runs a sed script that is not a literal")
			}
			k++
			scripts, script = append(scripts, argv[k]), true
		case strings.HasPrefix(a, "--expression="):
			scripts, script = append(scripts, strings.TrimPrefix(a, "--expression=")), true
		case a == "-f" || strings.HasPrefix(a, "--file") || (strings.HasPrefix(a, "-") && !strings.HasPrefix(a, "--") && strings.ContainsRune(a, 'f')):
			return dynamicWhy("runs a sed script from a file the command does not show (its e command runs shell commands)")
		case strings.HasPrefix(a, "-") && !strings.HasPrefix(a, "--") && len(a) > 1:
			// A cluster: -n, -i[SUFFIX], -E, -s, -z, -u, -l N, and -e SCRIPT.
			if j := strings.IndexByte(a, 'e'); j > 0 && !strings.Contains(a[:j], "i") {
				if j+1 < len(a) {
					scripts = append(scripts, a[j+1:])
				} else {
					if k+1 >= len(argv) || !lits[k+1] {
						return dynamicWhy("runs a sed script that is not a literal")
					}
					k++
					scripts = append(scripts, argv[k])
				}
				script = true
			} else if strings.HasSuffix(a, "l") {
				k++
			}
		case strings.HasPrefix(a, "-"):
			if a == "--line-length" {
				k++
			}
		case !script:
			scripts, script = append(scripts, a), true
		}
	}
	for _, s := range scripts {
		if sedRuns(s) {
			return dynamicWhy("runs a sed script with the e command or flag, which runs shell commands")
		}
	}
	return inner{}
}

// sedRuns reports whether a GNU sed script may run a command: an e
// command, an s command with the e flag, or a script the scanner cannot
// follow (it then answers true).
func sedRuns(s string) bool {
	k := 0
	skipSpace := func() {
		for k < len(s) && (s[k] == ' ' || s[k] == '\t' || s[k] == ';' || s[k] == '\n') {
			k++
		}
	}
	// delimited reads up to the unescaped delimiter d; false if unterminated.
	delimited := func(d byte) bool {
		for k < len(s) {
			c := s[k]
			k++
			switch {
			case c == '\\':
				k++
			case c == d:
				return true
			case c == '\n' && d != '\n':
				return false
			}
		}
		return false
	}
	toEOL := func() {
		for k < len(s) && s[k] != '\n' {
			if s[k] == '\\' {
				k++
			}
			k++
		}
	}
	address := func() bool {
		for {
			switch {
			case k < len(s) && (s[k] >= '0' && s[k] <= '9' || s[k] == '$' || s[k] == '~' || s[k] == '+'):
				k++
			case k < len(s) && s[k] == '/':
				k++
				if !delimited('/') {
					return false
				}
				for k < len(s) && (s[k] == 'I' || s[k] == 'M') {
					k++
				}
			case k+1 < len(s) && s[k] == '\\':
				d := s[k+1]
				k += 2
				if !delimited(d) {
					return false
				}
			case k < len(s) && (s[k] == ',' || s[k] == ' ' || s[k] == '!'):
				k++
			default:
				return true
			}
		}
	}
	for steps := 0; steps < 10000; steps++ {
		skipSpace()
		if k >= len(s) {
			return false
		}
		if s[k] == '#' {
			toEOL()
			continue
		}
		if !address() || k >= len(s) {
			return k < len(s)
		}
		c := s[k]
		k++
		switch c {
		case '{', '}', '=', 'd', 'D', 'g', 'G', 'h', 'H', 'l', 'n', 'N', 'p', 'P', 'x', 'z', 'F':
		case 'q', 'Q', 'L':
			for k < len(s) && s[k] >= '0' && s[k] <= '9' || k < len(s) && s[k] == ' ' {
				k++
			}
		case 'a', 'i', 'c', 'r', 'R', 'w', 'W', 'b', 't', 'T', ':', 'v':
			if c == 'b' || c == 't' || c == 'T' || c == ':' || c == 'v' {
				for k < len(s) && s[k] != ';' && s[k] != '\n' && s[k] != '}' {
					k++
				}
				continue
			}
			toEOL()
		case 's', 'y':
			if k >= len(s) || s[k] == '\\' || s[k] == '\n' {
				return true
			}
			d := s[k]
			k++
			if !delimited(d) || !delimited(d) {
				return true
			}
			if c == 'y' {
				continue
			}
			for k < len(s) && s[k] != ';' && s[k] != '\n' && s[k] != '}' {
				switch s[k] {
				case 'e':
					return true
				case 'w', 'W':
					toEOL() // a file name to the end of the line
					continue
				}
				k++
			}
		default: // e, and anything the scanner does not know
			return true
		}
	}
	return true
}

// unwrapAwk: awk's system(), pipes to and from commands (print | "cmd",
// "cmd" | getline) and gawk's @load run programs; so may a program file.
func unwrapAwk(argv []string, lits []bool) inner {
	var progs []string
	prog := false
	for k := 1; k < len(argv); k++ {
		a := argv[k]
		if !lits[k] {
			if !prog {
				return dynamicWhy("runs an awk program that is not a literal")
			}
			continue
		}
		switch {
		case a == "--":
			if !prog && k+1 < len(argv) {
				if !lits[k+1] {
					return dynamicWhy("runs an awk program that is not a literal")
				}
				progs, prog = append(progs, argv[k+1]), true
			}
			k = len(argv)
		case a == "-i" && k+1 < len(argv) && lits[k+1] && argv[k+1] == "inplace", a == "--include=inplace":
			if a == "-i" {
				k++ // gawk's in-place editing library
			}
		case strings.HasPrefix(a, "-W") || strings.HasPrefix(a, "--exec"):
			v := strings.TrimPrefix(a, "-W")
			if v == "" && k+1 < len(argv) {
				k++
				v = argv[k]
			}
			if !lits[k] || strings.Contains(v, "exe") || strings.HasPrefix(a, "--exec") {
				return dynamicWhy("runs an awk program from a file the command does not show (awk can start commands)")
			}
		case a == "-f" || a == "-i" || a == "-l" || a == "-E" || strings.HasPrefix(a, "--file") ||
			strings.HasPrefix(a, "--include") || strings.HasPrefix(a, "--load") || strings.HasPrefix(a, "--exec") ||
			(strings.HasPrefix(a, "-f") && len(a) > 2) || strings.HasPrefix(a, "-l") || strings.HasPrefix(a, "-i") ||
			strings.HasPrefix(a, "-E"):
			return dynamicWhy("runs an awk program from a file the command does not show (awk can start commands)")
		case a == "-e" || a == "--source":
			if k+1 >= len(argv) || !lits[k+1] {
				return dynamicWhy("runs an awk program that is not a literal")
			}
			k++
			progs, prog = append(progs, argv[k]), true
		case strings.HasPrefix(a, "--source="):
			progs, prog = append(progs, strings.TrimPrefix(a, "--source=")), true
		case a == "-v" || a == "-F":
			k++
		case strings.HasPrefix(a, "-"):
		case !prog:
			progs, prog = append(progs, a), true
		}
	}
	for _, p := range progs {
		if strings.Contains(p, "system") || strings.ContainsRune(p, '|') || strings.Contains(p, "@load") {
			return dynamicWhy("runs an awk program that can start commands (system, pipes)")
		}
	}
	return inner{}
}

// unwrapSSH: ssh runs local commands through ProxyCommand, LocalCommand,
// KnownHostsCommand and loads providers; -F reads a config that may set
// them; scp and sftp run the program -S names.
func unwrapSSH(name string, argv []string, lits []bool) inner {
	for k := 1; k < len(argv); k++ {
		a := argv[k]
		if !lits[k] {
			if k > 0 && argv[k-1] == "-o" {
				return dynamic
			}
			continue
		}
		if !strings.HasPrefix(a, "-") || strings.HasPrefix(a, "--") {
			continue
		}
		var val string
		for j := 1; j < len(a); j++ {
			c := a[j]
			if strings.IndexByte("oFSIJ", c) >= 0 || (name == "ssh" && strings.IndexByte("bcDEeiLlmOpQRWwBP", c) >= 0) ||
				(name != "ssh" && strings.IndexByte("ciDlPo", c) >= 0) {
				val = a[j+1:]
				if val == "" && k+1 < len(argv) {
					if !lits[k+1] {
						return dynamic
					}
					k++
					val = argv[k]
				}
				switch {
				case c == 'F', c == 'I', (c == 'S' || c == 'D') && name != "ssh":
					return dynamicWhy("is given -" + string(c) + ", which names a program, library or config to load")
				case c == 'o':
					key, _, _ := strings.Cut(strings.TrimSpace(val), "=")
					key, _, _ = strings.Cut(key, " ")
					switch strings.ToLower(key) {
					case "proxycommand", "localcommand", "permitlocalcommand", "knownhostscommand", "pkcs11provider",
						"securitykeyprovider", "match", "include", "sshaskpass", "controlpath", "remotecommand":
						return dynamicWhy("is given -o " + clip.To(key, 40) + ", which runs a local program")
					}
				}
				break
			}
		}
	}
	return inner{}
}

// unwrapMultiplexer: tmux and screen run shell commands in new sessions,
// windows and panes, send keys to shells and read configuration files:
// dynamic, except a lone listing or killing command.
func unwrapMultiplexer(name string, argv []string, lits []bool) inner {
	safe := map[string]bool{"ls": true, "list-sessions": true, "list-windows": true, "list-panes": true, "lsw": true,
		"lsp": true, "has-session": true, "has": true, "kill-session": true, "kill-server": true, "kill-window": true,
		"kill-pane": true, "capture-pane": true, "capturep": true}
	if name == "screen" {
		safe = map[string]bool{"-ls": true, "-list": true, "-wipe": true, "-v": true, "--version": true}
	}
	k := 1
	if name == "tmux" {
		// Global options that only name a server: -L NAME, -S PATH.
		for k+1 < len(argv) && lits[k] && (argv[k] == "-L" || argv[k] == "-S") {
			k += 2
		}
	}
	if k < len(argv) && lits[k] && safe[argv[k]] {
		for j := k + 1; j < len(argv); j++ {
			if !lits[j] || strings.HasSuffix(argv[j], ";") {
				return dynamicWhy("runs commands in a terminal multiplexer")
			}
		}
		return inner{}
	}
	return dynamicWhy("runs commands in a terminal multiplexer")
}

// unwrapTrap: trap's action is a script bash runs later; -p, -l and a
// reset (-, or ”) run nothing.
func unwrapTrap(argv []string, lits []bool) inner {
	i := 1
	for i < len(argv) && lits[i] && (argv[i] == "-p" || argv[i] == "-l" || argv[i] == "-P" || argv[i] == "--") {
		if argv[i] != "--" {
			return inner{}
		}
		i++
	}
	if i+1 >= len(argv) {
		return inner{} // trap, trap SIG: prints
	}
	if !lits[i] {
		return dynamicWhy("sets an action that is not a literal")
	}
	if argv[i] == "-" || argv[i] == "" {
		return inner{}
	}
	return inner{kind: runsScript, scripts: []string{argv[i]}, via: ""}
}

// unwrapMapfile: mapfile/readarray -C CALLBACK runs the callback (with the
// index and the line appended) every -c lines.
func unwrapMapfile(argv []string, lits []bool) inner {
	spec := &mapfileSpec
	_, opts, ok := spec.parseOpts(argv, lits, 1)
	if !ok {
		return unknownOpts(argv[0])
	}
	var in inner
	for _, o := range opts {
		if o.name == "-C" {
			in.kind, in.via = runsScript, "-C"
			in.scripts = append(in.scripts, o.val)
		}
	}
	return in
}

// unwrapComplete: complete/compgen -C COMMAND runs a command, -W WORDS is
// expanded by bash (command substitutions included) when used, -F names a
// function (its body is read where it is defined).
func unwrapComplete(argv []string, lits []bool) inner {
	var in inner
	for k := 1; k < len(argv); k++ {
		a := argv[k]
		if !lits[k] {
			if k > 0 && (argv[k-1] == "-C" || argv[k-1] == "-W") {
				return dynamicWhy("is given a command or word list that is not a literal")
			}
			continue
		}
		if !strings.HasPrefix(a, "-") || len(a) < 2 {
			continue
		}
		for j := 1; j < len(a); j++ {
			c := a[j]
			if strings.IndexByte("oAGWFCXPS", c) < 0 {
				continue
			}
			val := a[j+1:]
			if val == "" && k+1 < len(argv) {
				if !lits[k+1] {
					return dynamicWhy("is given a command or word list that is not a literal")
				}
				k++
				val = argv[k]
			}
			switch c {
			case 'C':
				in.kind, in.via = runsScript, "-C"
				in.scripts = append(in.scripts, val)
			case 'W':
				if strings.ContainsAny(val, "$`") {
					return dynamicWhy("is given a word list that bash expands (and may run) later")
				}
			}
			break
		}
	}
	return in
}

var loaderSpec = optSpec{long: longs("list", "verify", "inhibit-cache", "list-tunables", "list-diagnostics"),
	longArg: []string{"library-path", "preload", "audit", "argv0", "inhibit-rpath", "glibc-hwcaps-prepend", "glibc-hwcaps-mask"}}

var scriptSpec = optSpec{short: "aefqhV", shortArg: "cEIOBTmo", shortOpt: "t",
	long:    longs("append", "return", "flush", "force", "quiet"),
	longArg: []string{"command", "echo", "log-in", "log-out", "log-io", "log-timing", "logging-format", "output-limit"},
	longOpt: []string{"timing"}}

var gitSpec = optSpec{short: "pPvh", shortArg: "Cc",
	long: longs("paginate", "no-pager", "bare", "no-replace-objects", "literal-pathspecs", "glob-pathspecs",
		"noglob-pathspecs", "icase-pathspecs", "no-optional-locks", "no-advice", "html-path", "man-path", "info-path",
		"no-lazy-fetch"),
	longArg: []string{"git-dir", "work-tree", "namespace", "super-prefix", "config-env", "list-cmds", "attr-source"},
	longOpt: []string{"exec-path"}}

var mapfileSpec = optSpec{short: "t", shortArg: "dnOsuCc"}

var sshSpec = optSpec{short: "46AaCfGgKkMNnqsTtVvXxYy", shortArg: "BbcDEeFIiJLlmOoPpQRSWw"}

// shortCluster reports whether a is a cluster of short options holding c
// (-qu, -uX): getopt reads letters up to the first that takes a value.
func shortCluster(a string, c byte) bool {
	if len(a) < 2 || a[0] != '-' || a[1] == '-' {
		return false
	}
	return strings.IndexByte(a[1:], c) >= 0
}
