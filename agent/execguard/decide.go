package execguard

import (
	"crypto/sha256"
	"fmt"
	"io"
	"os"
	"path"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/shellbox/shellbox/internal/clip"
	"github.com/shellbox/shellbox/internal/cmdmatch"
)

// rules are a call's compiled exec rules.
type rules struct {
	policy string
	specs  []cmdmatch.Spec
	rules  []cmdmatch.Rule
	// named are the literal program names the rules name (command, and
	// the first word of a prefix): a file with the content of one of them
	// goes by that name too.
	named []string
}

// compile compiles set; nil or empty: no rules.
func compile(set *cmdmatch.Set) (*rules, error) {
	if set == nil || len(set.Rules) == 0 {
		return &rules{}, nil
	}
	if len(set.Rules) > cmdmatch.MaxRules {
		return nil, fmt.Errorf("%d exec rules, more than %d", len(set.Rules), cmdmatch.MaxRules)
	}
	rs := &rules{policy: set.Policy}
	seen := map[string]bool{}
	for _, s := range set.Rules {
		if s.Decision != cmdmatch.Deny && s.Decision != cmdmatch.Ask {
			return nil, fmt.Errorf("exec rule %q: decision %q is not deny or ask", s.Rule, s.Decision)
		}
		r, err := cmdmatch.Compile(s, true, nil)
		if err != nil {
			return nil, fmt.Errorf("exec rule %q: %w", s.Rule, err)
		}
		rs.specs = append(rs.specs, s)
		rs.rules = append(rs.rules, r)
		for n := range r.Names {
			if !seen[n] {
				seen[n] = true
				rs.named = append(rs.named, n)
			}
		}
		for _, p := range r.Prefixes {
			if !seen[p[0]] {
				seen[p[0]] = true
				rs.named = append(rs.named, p[0])
			}
		}
	}
	return rs, nil
}

// refusal is a rule's verdict on one exec.
type refusal struct {
	Rule, Decision, Reason string
	// Name is the name the command was matched under.
	Name string
}

// decide returns the first rule that refuses argv, run from the file at
// file (a path the guard can open, "" if unknown), or nil.
func (rs *rules) decide(names []string, argv []string, file string, ids *identities) *refusal {
	if len(rs.rules) == 0 {
		return nil
	}
	// One stat of the file for both of its content checks below.
	id, regular := statID(file)
	if r := rs.decideOne(names, argv, id, regular, file, ids); r != nil {
		return r
	}
	// The dynamic loader run as a program (ld-linux-x86-64.so.2 /bin/rm,
	// by its name or a copy's content) maps and runs another program with
	// no exec of it, after any check of its argv: refused whole.
	if isLoader(names) || (regular && ids.isLoader(file, id)) {
		return &refusal{Rule: "exec-check", Decision: cmdmatch.Deny, Name: "ld.so",
			Reason: "the dynamic loader run as a program runs another without an exec the check can see; run that program itself"}
	}
	// A multi-call binary (busybox rm): what it runs is judged too.
	if inner, ok := applet(names, argv); ok {
		return rs.decideOne(namesOf(inner, ""), inner, fileID{}, false, "", ids)
	}
	return nil
}

// decideOne matches names and argv; file, whose identity is id, is
// looked up by content when regular.
func (rs *rules) decideOne(names []string, argv []string, id fileID, regular bool, file string, ids *identities) *refusal {
	if regular && len(rs.named) > 0 {
		if n := ids.nameOf(file, id, rs.named); n != "" {
			names = append(names, n)
		}
	}
	for i := range rs.rules {
		for _, n := range names {
			if n == "" {
				continue
			}
			if rs.rules[i].Match(n, argv) {
				s := &rs.specs[i]
				return &refusal{Rule: s.Rule, Decision: s.Decision, Reason: s.Reason, Name: n}
			}
		}
	}
	return nil
}

// isLoader reports whether a name is the dynamic loader's.
func isLoader(names []string) bool {
	for _, n := range names {
		if strings.HasPrefix(n, "ld-linux") || strings.HasPrefix(n, "ld.so") || strings.HasPrefix(n, "ld-musl") {
			return true
		}
	}
	return false
}

// applet is what a multi-call binary among names runs with argv.
func applet(names []string, argv []string) ([]string, bool) {
	for _, n := range names {
		if (n == "busybox" || n == "toybox") && len(argv) > 1 {
			return argv[1:], true
		}
	}
	return nil, false
}

// message is the line a refused command's stderr gets.
func (rs *rules) message(r *refusal, argv []string, killed bool) string {
	what := "refused"
	if killed {
		what = "killed"
	}
	var b strings.Builder
	fmt.Fprintf(&b, "shellbox: exec of `%s` %s by policy %s/%s", clipArgv(argv, 200), what, rs.policy, r.Rule)
	if r.Decision == cmdmatch.Ask {
		b.WriteString(" (ask: the reader did not see this command; run it as a call of its own, where it can be approved)")
	} else if r.Reason != "" {
		fmt.Fprintf(&b, ": %s", clip.To(r.Reason, 200))
	}
	b.WriteByte('\n')
	return b.String()
}

// namesOf are the names a command goes by: the basenames of argv[0] and of
// the path it was run by.
func namesOf(argv []string, file string) []string {
	out := make([]string, 0, 3)
	if len(argv) > 0 {
		out = append(out, path.Base(argv[0]))
	}
	if file != "" {
		if b := path.Base(file); len(out) == 0 || b != out[0] {
			out = append(out, b)
		}
	}
	return out
}

func clipArgv(argv []string, n int) string { return clip.To(strings.Join(argv, " "), n) }

// The programs' standard directories, where a rule's name is looked up
// for its content (a sandbox image's PATH).
var binDirs = []string{"/usr/local/sbin", "/usr/local/bin", "/usr/sbin", "/usr/bin", "/sbin", "/bin"}

// maxHashBytes bounds the files hashed: a program larger than this is not
// recognized by content.
const maxHashBytes = 256 << 20

// fileID is what says a file has not changed since it was hashed.
type fileID struct {
	dev, ino     uint64
	size         int64
	mtime, ctime syscall.Timespec
}

func idOf(st *syscall.Stat_t) fileID {
	return fileID{dev: st.Dev, ino: st.Ino, size: st.Size, mtime: st.Mtim, ctime: st.Ctim}
}

// identities recognizes the content of named programs: a name's files in
// binDirs are hashed once (and again if they change), and a file run under
// another name is hashed only when its size is one of theirs.
type identities struct {
	mu     sync.Mutex
	byName map[string][]program // name -> its files' contents
	hashes map[fileID][32]byte  // bounded: maxHashes
}

type program struct {
	id   fileID
	hash [32]byte
}

const maxHashes = 4096

func newIdentities() *identities {
	return &identities{byName: map[string][]program{}, hashes: map[fileID][32]byte{}}
}

// statID is the identity of file, and whether it is a regular file
// (false: not one, or it cannot be stat'ed, or file is "").
func statID(file string) (fileID, bool) {
	if file == "" {
		return fileID{}, false
	}
	var st syscall.Stat_t
	if err := syscall.Stat(file, &st); err != nil || st.Mode&syscall.S_IFMT != syscall.S_IFREG {
		return fileID{}, false
	}
	return idOf(&st), true
}

// nameOf returns the name among names whose program has file's content
// (file's identity, as stat'ed, is id), "" if none.
func (ids *identities) nameOf(file string, id fileID, names []string) string {
	ids.mu.Lock()
	defer ids.mu.Unlock()
	var h [32]byte
	hashed := false
	for _, n := range names {
		for _, p := range ids.programs(n) {
			if p.id.size != id.size {
				continue
			}
			if p.id == id {
				return n
			}
			if !hashed {
				var ok bool
				if h, ok = ids.hash(file, id); !ok {
					// The size of a program a rule names, and unreadable:
					// what cannot be told apart is taken for it.
					return n
				}
				hashed = true
			}
			if h == p.hash {
				return n
			}
		}
	}
	return ""
}

// loaderPaths are where images keep the dynamic loader.
var loaderPaths = []string{"/lib64/ld-linux-x86-64.so.2", "/lib/x86_64-linux-gnu/ld-linux-x86-64.so.2",
	"/usr/lib64/ld-linux-x86-64.so.2", "/usr/lib/x86_64-linux-gnu/ld-linux-x86-64.so.2", "/lib/ld-musl-x86_64.so.1"}

// isLoader reports whether file (a regular file whose identity is id) has
// the content of the image's dynamic loader (or its size, and cannot be
// read).
func (ids *identities) isLoader(file string, id fileID) bool {
	ids.mu.Lock()
	defer ids.mu.Unlock()
	for _, p := range ids.programsAt("\x00loader", loaderPaths) { // no program name has a NUL
		if p.id.size != id.size {
			continue
		}
		if p.id == id {
			return true
		}
		h, ok := ids.hash(file, id)
		return !ok || h == p.hash
	}
	return false
}

// programs are name's files in binDirs (each distinct file once).
func (ids *identities) programs(name string) []program {
	if ps, ok := ids.byName[name]; ok {
		return ps // looked up before (programsAt): no paths to build
	}
	paths := make([]string, len(binDirs))
	for i, d := range binDirs {
		paths[i] = d + "/" + name
	}
	return ids.programsAt(name, paths)
}

// programsAt are the distinct files at paths, known as key. A multi-call
// binary (busybox: a link to it, or a file of several hard links) is left
// out: its content is every applet's, and its applets are read by name
// (applet).
func (ids *identities) programsAt(key string, paths []string) []program {
	// The sandbox's root file system is read-only: a name's files are
	// looked up once.
	if ps, ok := ids.byName[key]; ok {
		return ps
	}
	var ps []program
	for _, f := range paths {
		var st syscall.Stat_t
		if err := syscall.Stat(f, &st); err != nil || st.Mode&syscall.S_IFMT != syscall.S_IFREG {
			continue
		}
		if st.Nlink > 2 {
			continue
		}
		if real, err := filepath.EvalSymlinks(f); err == nil {
			if b := filepath.Base(real); b == "busybox" || b == "toybox" {
				continue
			}
		}
		id := idOf(&st)
		dup := false
		for _, p := range ps {
			dup = dup || p.id == id
		}
		if dup {
			continue
		}
		if h, ok := ids.hash(f, id); ok {
			ps = append(ps, program{id: id, hash: h})
		}
	}
	if len(ids.byName) < maxHashes {
		ids.byName[key] = ps
	}
	return ps
}

// hash is the SHA-256 of file, whose identity is id; ok is false when it
// cannot be read whole or is larger than maxHashBytes.
func (ids *identities) hash(file string, id fileID) ([32]byte, bool) {
	if h, ok := ids.hashes[id]; ok {
		return h, true
	}
	if id.size > maxHashBytes {
		return [32]byte{}, false
	}
	// Not blocking: the file may have been swapped for a FIFO since its
	// stat, and an open of that would wait for a writer, holding every
	// exec of the sandbox; what is opened must be the file stat saw.
	f, err := os.OpenFile(file, os.O_RDONLY|syscall.O_NONBLOCK, 0)
	if err != nil {
		return [32]byte{}, false
	}
	defer f.Close()
	var st syscall.Stat_t
	if err := syscall.Fstat(int(f.Fd()), &st); err != nil || st.Mode&syscall.S_IFMT != syscall.S_IFREG || idOf(&st) != id {
		return [32]byte{}, false
	}
	hw := sha256.New()
	if n, err := io.Copy(hw, io.LimitReader(f, maxHashBytes+1)); err != nil || n != id.size {
		return [32]byte{}, false
	}
	var h [32]byte
	copy(h[:], hw.Sum(nil))
	if time.Since(time.Unix(id.ctime.Unix())) < racyCtime {
		// Not kept (git's "racily clean"): a change in the same tick
		// of a coarse clock (Linux before 6.13's multigrain timestamps,
		// a file system of second granularity) gets the same ctime and
		// mtime, and a rewrite in place to the same size the same
		// identity, whose kept hash would pass a named program's bytes
		// written over this file. Hashed again at each exec meanwhile.
		return h, true
	}
	if len(ids.hashes) >= maxHashes {
		clear(ids.hashes)
	}
	ids.hashes[id] = h
	return h, true
}

// racyCtime is how old a file's ctime must be for its hash to be kept:
// more than a file system's coarsest timestamp granularity (1 s) and a
// clock tick.
const racyCtime = 2 * time.Second
