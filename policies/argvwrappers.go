package policies

import (
	"strings"

	"github.com/shellbox/shellbox/internal/clip"
)

// Wrappers that run an argv after their options (and a fixed number of
// operands: timeout's duration, chroot's new root, flock's lock file). Each
// one's option table is in argvWrappers; see optSpec for how it is read.
// An option the table does not know makes the inner command dynamic.

type argvWrapper struct {
	spec optSpec
	// lead is the number of operands before the options (setarch ARCH);
	// skip the number after them, before the command.
	lead, skip int
	// noCmd lists options after which the operands are not a command
	// (taskset -p PID, ionice -p PID, command -v NAME).
	noCmd []string
	// dynOpts lists options that make what runs unknowable (ld.so
	// --preload, fakeroot --lib, sudo -D with a relative command...).
	dynOpts []string
	// bare is what it runs with no command: inner{} (nothing), or a shell
	// reading standard input (chroot, unshare, nsenter, sudo -s).
	bare innerKind
	// bareWith lists options that make a bare call run a shell (sudo -s, -i).
	bareWith []string
	// assigns: NAME=VALUE operands set the command's environment (sudo).
	assigns bool
	// cFlag: after the operands, this word and a script (flock FILE -c CMD).
	cFlag bool
}

func unknownOpts(name string) inner {
	return inner{kind: dynamicInner, why: "has an option the reader does not know, so where its command starts is unknown"}
}

func (w *argvWrapper) unwrap(argv []string, lits []bool) inner {
	if 1+w.lead > len(argv) {
		return inner{}
	}
	for k := 1; k < 1+w.lead; k++ {
		if !lits[k] {
			return dynamic
		}
	}
	i, opts, ok := w.spec.parseOpts(argv, lits, 1+w.lead)
	if !ok {
		return unknownOpts(argv[0])
	}
	for _, o := range opts {
		if contains(w.dynOpts, o.name) {
			return inner{kind: dynamicInner, why: "is given " + o.name + ", which changes what runs"}
		}
		if contains(w.noCmd, o.name) {
			return inner{}
		}
	}
	for n := 0; n < w.skip; n++ {
		if i >= len(argv) {
			return inner{}
		}
		if !lits[i] {
			return dynamic
		}
		i++
	}
	if w.cFlag && i+1 < len(argv) && lits[i] && (argv[i] == "-c" || argv[i] == "--command") {
		return scriptOf(argv[i+1:i+2], lits[i+1:i+2], "-c")
	}
	if w.assigns {
		return envCommand(argv, lits, i, w.bareInner(opts))
	}
	if i >= len(argv) {
		return w.bareInner(opts)
	}
	return argvFrom(argv, lits, i)
}

func (w *argvWrapper) bareInner(opts []opt) inner {
	if w.bare == shellStdin || (len(w.bareWith) > 0 && hasOpt(opts, w.bareWith...)) {
		return inner{kind: shellStdin}
	}
	return inner{}
}

var gnuHelp = []string{"help", "version"}

func longs(extra ...string) []string { return append(extra, gnuHelp...) }

var argvWrappers = map[string]*argvWrapper{
	"exec":    {spec: optSpec{short: "cl", shortArg: "a"}},
	"builtin": {},
	"nohup":   {spec: optSpec{long: longs()}},
	"setsid":  {spec: optSpec{short: "cfwhV", long: longs("ctty", "fork", "wait")}},
	"time": {spec: optSpec{short: "apqvV", shortArg: "fo", long: longs("append", "portability", "verbose", "quiet"),
		longArg: []string{"format", "output"}}},
	"stdbuf": {spec: optSpec{shortArg: "ioe", long: longs(), longArg: []string{"input", "output", "error"}}},
	"nice":   {spec: optSpec{shortArg: "n", long: longs(), longArg: []string{"adjustment"}, digits: true}},
	"ionice": {spec: optSpec{short: "thV", shortArg: "cnpPu", long: longs("ignore"),
		longArg: []string{"class", "classdata", "pid", "pgid", "uid"}}, noCmd: []string{"-p", "-P", "-u", "--pid", "--pgid", "--uid"}},
	"timeout": {spec: optSpec{short: "fpv", shortArg: "ks", long: longs("foreground", "preserve-status", "verbose"),
		longArg: []string{"kill-after", "signal"}}, skip: 1},
	"chroot": {spec: optSpec{long: longs("skip-chdir"), longArg: []string{"groups", "userspec"}}, skip: 1, bare: shellStdin},
	"sudo": {spec: optSpec{short: "AbBEeHiKklnPSsVv", shortArg: "aCcDgpRrtTUu", shortOpt: "h",
		long: []string{"askpass", "background", "bell", "edit", "set-home", "help", "login", "remove-timestamp",
			"reset-timestamp", "list", "non-interactive", "preserve-groups", "stdin", "shell", "version", "validate"},
		longArg: []string{"auth-type", "close-from", "login-class", "chdir", "group", "host", "prompt", "chroot",
			"role", "type", "command-timeout", "other-user", "user"},
		longOpt: []string{"preserve-env"}},
		noCmd: []string{"-e", "--edit"}, bareWith: []string{"-s", "-i", "--shell", "--login"}, assigns: true},
	"doas": {spec: optSpec{short: "Lns", shortArg: "aCu"}, bareWith: []string{"-s"}},
	"flock": {spec: optSpec{short: "sexnoFuhV", shortArg: "wE",
		long:    longs("shared", "exclusive", "nonblock", "nonblocking", "close", "no-fork", "unlock", "verbose"),
		longArg: []string{"timeout", "wait", "conflict-exit-code"}}, skip: 1, cFlag: true},
	"taskset": {spec: optSpec{short: "acphV", long: longs("all-tasks", "cpu-list", "pid")},
		noCmd: []string{"-p", "--pid"}, skip: 1},
	"setpriv": {spec: optSpec{short: "dhV", long: longs("dump", "clear-groups", "init-groups", "keep-groups", "nnp",
		"no-new-privs", "reset-env"),
		longArg: []string{"ambient-caps", "bounding-set", "groups", "inh-caps", "rgid", "egid", "regid", "ruid", "euid",
			"reuid", "securebits", "pdeathsig", "selinux-label", "apparmor-profile", "landlock-access", "landlock-rule", "ptracer"}}},
	"unshare": {spec: optSpec{short: "frchV", shortArg: "SGRw", shortOpt: "muinpUCT",
		long: longs("fork", "map-root-user", "map-current-user", "map-auto", "keep-caps"),
		longArg: []string{"setgroups", "propagation", "map-user", "map-group", "map-users", "map-groups", "root", "wd",
			"setuid", "setgid", "monotonic", "boottime", "load-interp"},
		longOpt: []string{"mount", "uts", "ipc", "net", "pid", "user", "cgroup", "time", "mount-proc", "kill-child", "mount-binfmt"}},
		bare: shellStdin},
	"nsenter": {spec: optSpec{short: "aFZcehV", shortArg: "tSGN", shortOpt: "muinpUCTrwW",
		long:    longs("all", "no-fork", "preserve-credentials", "follow-context", "join-cgroup", "env", "user-parent", "keep-caps"),
		longArg: []string{"target", "setuid", "setgid", "net-socket"},
		longOpt: []string{"mount", "uts", "ipc", "net", "pid", "user", "cgroup", "time", "root", "wd", "wdns"}},
		bare: shellStdin},
	"chrt": {spec: optSpec{short: "abdfiorepvmhVR", shortArg: "TPD",
		long: longs("all-tasks", "batch", "deadline", "fifo", "idle", "other", "rr", "ext", "reset-on-fork", "pid",
			"verbose", "max"),
		longArg: []string{"sched-runtime", "sched-period", "sched-deadline"}},
		noCmd: []string{"-p", "--pid", "-m", "--max"}, skip: 1},
	"prlimit": {spec: optSpec{shortArg: "po", shortOpt: "cdefilmnqrstuvxy", long: longs("noheadings", "raw", "verbose"),
		longArg: []string{"pid", "output"},
		longOpt: []string{"core", "data", "nice", "fsize", "sigpending", "memlock", "rss", "nofile", "msgqueue",
			"rtprio", "stack", "cpu", "nproc", "as", "locks", "rttime"}},
		noCmd: []string{"-p", "--pid"}},
	"fakeroot": {spec: optSpec{short: "uhv", shortArg: "lsib", long: longs("unknown-is-real"),
		longArg: []string{"lib", "faked", "fd-base"}}, dynOpts: []string{"-l", "--lib", "--faked"}, bare: shellStdin},
	"pkexec":  {spec: optSpec{long: longs("disable-internal-agent", "keep-cwd"), longArg: []string{"user"}}, bare: shellStdin},
	"sshpass": {spec: optSpec{short: "evhV", shortArg: "fdpP"}},
	"strace": {spec: optSpec{short: "AcCdDfFhiknqrtTvVwxyzZ", shortArg: "abeEIoOpPsSuUX"},
		dynOpts: []string{"-o"}, noCmd: nil},
	"ltrace":    {spec: optSpec{short: "cfhiLrStTV", shortArg: "bADeFlnopsuxw"}, dynOpts: []string{"-o"}},
	"gosu":      {skip: 1},
	"su-exec":   {skip: 1},
	"setuidgid": {skip: 1},
	"eatmydata": {},
	"nocache":   {},
	"catchsegv": {},
	"pgrphack":  {},
	"chronic":   {spec: optSpec{short: "ev"}},
	"ifne":      {spec: optSpec{short: "n"}},
	"unbuffer":  {spec: optSpec{short: "p"}},
	"torsocks": {spec: optSpec{short: "idhq", shortArg: "uapP", long: longs("shell", "isolate", "quiet", "debug"),
		longArg: []string{"user", "pass", "address", "port"}}},
	"proxychains":      {spec: optSpec{short: "q", shortArg: "f"}},
	"proxychains4":     {spec: optSpec{short: "q", shortArg: "f"}},
	"dbus-run-session": {spec: optSpec{long: longs(), longArg: []string{"config-file", "dbus-daemon"}}},
	"setarch": {spec: optSpec{short: "RFZLXBISTv3", long: longs("addr-no-randomize", "fdpic-funcptrs", "mmap-page-zero",
		"addr-compat-layout", "read-implies-exec", "32bit", "short-inode", "whole-seconds", "sticky-timeouts", "3gb",
		"4gb", "uname-2.6", "verbose", "list", "show")}, lead: 1, bare: shellStdin},
}

func init() {
	// setarch's personality names run as setarch ARCH.
	for _, n := range []string{"linux32", "linux64", "i386", "x86_64", "uname26"} {
		w := *argvWrappers["setarch"]
		w.lead = 0
		argvWrappers[n] = &w
	}
}

// unwrapXargs: GNU xargs (findutils): -e, -i and -l take an argument only
// attached, --eof, --replace and --max-lines only after =.
func unwrapXargs(argv []string, lits []bool) inner {
	spec := &xargsSpec
	i, opts, ok := spec.parseOpts(argv, lits, 1)
	if !ok {
		return unknownOpts("xargs")
	}
	if i >= len(argv) {
		return inner{kind: runsArgv, argvs: []argvLits{{[]string{"echo"}, []bool{true}}}}
	}
	in := argvFrom(argv, lits, i)
	for _, o := range opts {
		repl := ""
		switch o.name {
		case "-I":
			repl = o.val
		case "-i", "--replace":
			repl = "{}"
			if o.has {
				repl = o.val
			}
		}
		if repl != "" && strings.Contains(argv[i], repl) {
			// The command name is replaced by what xargs reads.
			return dynamic
		}
	}
	return in
}

// unwrapWatch: procps watch runs its words joined by sh -c, or with -x
// as an argv.
func unwrapWatch(argv []string, lits []bool) inner {
	spec := &watchSpec
	i, opts, ok := spec.parseOpts(argv, lits, 1)
	if !ok {
		return unknownOpts("watch")
	}
	if hasOpt(opts, "-x", "--exec") {
		return argvFrom(argv, lits, i)
	}
	return scriptOf(argv[i:], lits[i:], "")
}

// unwrapSu: su/runuser -c/--command/--session-command run a script with
// the user's shell; runuser -u USER runs an argv; -s/--shell picks the shell
// that reads it. Options may follow the user (su root -c CMD).
func unwrapSu(name string, argv []string, lits []bool) inner {
	spec := &suSpec
	var script *opt
	user, first := false, -1
	for i := 1; i < len(argv); {
		j, opts, ok := spec.parseOpts(argv, lits, i)
		if !ok {
			return unknownOpts(name)
		}
		for k, o := range opts {
			switch o.name {
			case "-s", "--shell":
				if sh := o.val; !isShellPath(sh) {
					return inner{kind: dynamicInner, why: "runs the shell " + clip.To(sh, 80) + ", which the reader does not know"}
				}
			case "-c", "--command", "--session-command":
				script = &opts[k]
			case "-u", "--user":
				user = true
			}
		}
		if j > 0 && j <= len(argv) && argv[j-1] == "--" && lits[j-1] || j >= len(argv) {
			if first < 0 {
				first = j
			}
			break
		}
		if first < 0 {
			first = j
		}
		if name == "runuser" && user {
			break // runuser -u USER COMMAND...
		}
		i = j + 1 // the user, or the shell's arguments
	}
	if name == "runuser" && user && first >= 0 && first < len(argv) {
		return argvFrom(argv, lits, first)
	}
	if script != nil {
		return inner{kind: runsScript, scripts: []string{script.val}, via: "-c"}
	}
	return inner{kind: shellStdin}
}

func isShellPath(p string) bool {
	switch p {
	case "/bin/sh", "/bin/bash", "/usr/bin/bash", "/usr/bin/sh", "/bin/dash", "/usr/bin/dash", "sh", "bash", "dash":
		return true
	}
	return false
}

// unwrapSource: source/. runs a file in the current shell. The reader sees
// its script only for standard input fed a here-document or here-string;
// any other file is a script written first (or a descriptor it cannot
// read).
func unwrapSource(argv []string, lits []bool) inner {
	i := 1
	if i < len(argv) && lits[i] && argv[i] == "--" {
		i++
	}
	switch {
	case i >= len(argv):
		return inner{}
	case !lits[i]:
		return dynamic // source <(...)
	}
	return scriptFile(argv[i])
}

// scriptFile is what a shell or source running the script file p runs.
func scriptFile(p string) inner {
	switch {
	case isStdinPath(p):
		return inner{kind: shellStdin}
	case isFdPath(p):
		return inner{kind: dynamicInner, why: "reads a script from the file descriptor " + clip.To(p, 80) + ", which the reader does not follow"}
	}
	return inner{kind: opaqueCode, why: "runs the script file " + clip.To(p, 80) + ", which the command does not show"}
}

func isStdinPath(p string) bool {
	switch p {
	case "/dev/stdin", "/proc/self/fd/0", "/dev/fd/0", "/proc/thread-self/fd/0", "-":
		return true
	}
	return false
}

// isFdPath: a path that names an open file descriptor or a process's file
// (/dev/fd/3, /proc/self/fd/3, /proc/123/fd/3, /dev/tcp/...).
func isFdPath(p string) bool {
	return strings.HasPrefix(p, "/dev/fd/") || strings.HasPrefix(p, "/proc/") || strings.HasPrefix(p, "/dev/tcp/") ||
		strings.HasPrefix(p, "/dev/udp/") || p == "/dev/stdout" || p == "/dev/stderr"
}

// unwrapShell: a POSIX shell runs -c's script, a here-document or
// here-string on its standard input, or a script file (written first: the
// reader cannot see it). --rcfile/--init-file run a file too.
func unwrapShell(argv []string, lits []bool) inner {
	hasC, stdin := false, false
	i := 1
	for i < len(argv) {
		if !lits[i] {
			return inner{kind: dynamicInner, why: "runs a script given by a word that is not a literal"}
		}
		a := argv[i]
		if a == "--" || a == "-" {
			i++
			break
		}
		if strings.HasPrefix(a, "--") {
			switch a {
			case "--rcfile", "--init-file":
				return inner{kind: dynamicInner, why: "runs the start-up file " + a + " names"}
			case "--help", "--version":
				return inner{}
			case "--login", "--noediting", "--noprofile", "--norc", "--posix", "--restricted", "--verbose",
				"--debugger", "--dump-po-strings", "--dump-strings", "--pretty-print":
			default:
				return unknownOpts(argv[0])
			}
			i++
			continue
		}
		if len(a) > 1 && (a[0] == '-' || a[0] == '+') {
			i++
			for j := 1; j < len(a); j++ {
				switch a[j] {
				case 'c':
					hasC = true
				case 's':
					stdin = true
				case 'o', 'O':
					i++
				}
			}
			continue
		}
		break
	}
	switch {
	case hasC:
		if i >= len(argv) {
			return inner{}
		}
		return scriptOf(argv[i:i+1], lits[i:i+1], "-c")
	case stdin || i >= len(argv):
		return inner{kind: shellStdin}
	}
	return scriptFile(argv[i])
}

// unwrapEnv: GNU env. -S (also in a cluster: -vS, -iS) splits its string
// into words that take the place of the -S word: they may be options,
// NAME=VALUE or the command.
func unwrapEnv(argv []string, lits []bool, depth int) inner {
	spec := &envSpec
	i, opts, ok := spec.parseOpts(argv, lits, 1)
	if !ok {
		return unknownOpts("env")
	}
	for _, o := range opts {
		if o.name != "-S" && o.name != "--split-string" {
			continue
		}
		words, ok := splitEnvString(o.val)
		if !ok || depth >= maxWrapperDepth {
			return inner{kind: dynamicInner, via: "-S", why: "splits a string with escapes or variables the reader does not expand"}
		}
		// The split words, then the words after the options.
		nargv := append(append([]string{argv[0]}, words...), argv[i:]...)
		nlits := make([]bool, len(nargv))
		for k := range nlits {
			nlits[k] = k < len(words)+1 || lits[i+k-len(words)-1]
		}
		in := unwrapEnv(nargv, nlits, depth+1)
		if in.via == "" {
			in.via = "-S"
		}
		return in
	}
	if i < len(argv) && lits[i] && argv[i] == "-" { // env - : -i
		i++
	}
	return envCommand(argv, lits, i, inner{})
}

// splitEnvString splits env -S's string: whitespace separates words, and
// '...' and "..." quote. Escapes (\_ is a space, \c ends it), ${VAR} and #
// comments are not read: ok is false.
func splitEnvString(s string) ([]string, bool) {
	if strings.ContainsAny(s, "\\$#") {
		return nil, false
	}
	var words []string
	var b strings.Builder
	in, quote := false, byte(0)
	for k := 0; k < len(s); k++ {
		c := s[k]
		switch {
		case quote != 0:
			if c == quote {
				quote = 0
			} else {
				b.WriteByte(c)
			}
		case c == '\'' || c == '"':
			quote, in = c, true
		case c == ' ' || c == '\t' || c == '\n' || c == '\v' || c == '\f' || c == '\r':
			if in {
				words = append(words, b.String())
				b.Reset()
				in = false
			}
		default:
			b.WriteByte(c)
			in = true
		}
	}
	if quote != 0 {
		return nil, false
	}
	if in {
		words = append(words, b.String())
	}
	return words, true
}

var xargsSpec = optSpec{short: "0oprtx", shortArg: "adEILnPs", shortOpt: "eil",
	long:    longs("null", "interactive", "no-run-if-empty", "open-tty", "verbose", "exit", "show-limits"),
	longArg: []string{"arg-file", "delimiter", "max-args", "max-procs", "max-chars", "process-slot-var"},
	longOpt: []string{"eof", "replace", "max-lines"}}

var watchSpec = optSpec{short: "bcCeghprtwx", shortArg: "nq", shortOpt: "d",
	long: longs("beep", "color", "no-color", "errexit", "chgexit", "precise", "no-rerun", "no-title", "no-wrap",
		"no-linewrap", "exec"),
	longArg: []string{"interval", "equexit"}, longOpt: []string{"differences"}}

var suSpec = optSpec{short: "flmpPT", shortArg: "cgGswu",
	long:    longs("login", "preserve-environment", "pty", "no-pty", "fast"),
	longArg: []string{"command", "session-command", "group", "supp-group", "shell", "whitelist-environment", "user"}}

var envSpec = optSpec{short: "0iv", shortArg: "aCSu",
	long:    longs("ignore-environment", "null", "debug", "list-signal-handling"),
	longArg: []string{"argv0", "chdir", "split-string", "unset"},
	longOpt: []string{"block-signal", "default-signal", "ignore-signal"}}
