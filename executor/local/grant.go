package local

import (
	"bytes"
	"path"
	"path/filepath"
	"slices"
	"strings"
)

// Network grants bound to trees.
//
// A call granted the network permission carries a credential
// (Spec.EgressGrant) for the sandbox's egress proxy. Were it in the
// command's environment, every process of the sandbox user could read it
// from /proc/<pid>/environ and use it: a background task of another call
// among them. So the executor keeps it: the proxy attributes each
// connection to the processes holding its socket and asks Grant, with their
// supplementary groups and cgroups, which credential they carry. A
// credential belongs to a tree only through what tracks it, unforgeable,
// inherited by every process of the tree and by nothing else: its tag
// (tagtree.go), or its cgroup where the executor made one (under gVisor, whose
// cgroupfs a sandbox's agent may write). No command can join a cgroup: its
// cgroup.procs is root's, 0644. A grant ends when the tree does: the
// supervisor forgets it before the cgroup can go back to the pool
// (proc.treeGone), and afterExit before the tag can be handed out again. A
// command tracked by neither (a process group alone) has no grant at all:
// it fails closed.

// grantCgroup names the cgroup of a granted tree as /proc/<pid>/cgroup
// shows it: the hierarchy's line (v2: "0::<path>"; v1: the one listing
// ctrl) and the path in it.
type grantCgroup struct {
	v2   bool
	ctrl string
	path string // "": no cgroup
}

// cgroupOf returns how /proc/<pid>/cgroup names c; ok false when c is not
// under its mount.
func cgroupOf(c *cgroup) (grantCgroup, bool) {
	rel, err := filepath.Rel(c.h.mount.dir, c.path)
	if err != nil || rel == "." || rel == ".." || strings.HasPrefix(rel, "../") {
		return grantCgroup{}, false
	}
	return grantCgroup{v2: c.h.v2, ctrl: c.h.ctrl, path: path.Join(c.h.mount.root, filepath.ToSlash(rel))}, true
}

// holds reports whether cgroups, the content of a /proc/<pid>/cgroup, puts
// the process in g (not in a cgroup below it: a command cannot make one).
func (g grantCgroup) holds(cgroups []byte) bool {
	if g.path == "" {
		return false
	}
	for _, line := range bytes.Split(cgroups, []byte("\n")) {
		f := bytes.SplitN(line, []byte(":"), 3)
		if len(f) != 3 {
			continue
		}
		var mine bool
		if g.v2 {
			mine = string(f[0]) == "0" && len(f[1]) == 0
		} else {
			mine = slices.Contains(strings.Split(string(f[1]), ","), g.ctrl)
		}
		if mine {
			return string(f[2]) == g.path
		}
	}
	return false
}

// Grant returns the network grant (Spec.EgressGrant) of the live command
// whose tree a process belongs to, from its supplementary groups (its tag
// among them) and its /proc/<pid>/cgroup; "" when there is none.
func (e *Executor) Grant(groups []uint32, cgroups []byte) string {
	e.mu.Lock()
	defer e.mu.Unlock()
	for p := range e.running {
		if p.grant == "" {
			continue
		}
		if p.tag != 0 && slices.Contains(groups, p.tag) || p.grantCg.holds(cgroups) {
			return p.grant
		}
	}
	return ""
}

// grantTree gives p's tree the grant g, if its tree can be told from the
// others (a tag or a cgroup). Under e.mu.
func (p *proc) grantTree(g string) {
	if p.tag != 0 {
		p.grant = g
		return
	}
	if p.cg != nil {
		if cg, ok := cgroupOf(p.cg); ok {
			p.grant, p.grantCg = g, cg
		}
	}
}

// forgetGrant ends p's grant: called once its tree is gone (or given up on),
// before its cgroup or tag can be another command's.
func (e *Executor) forgetGrant(p *proc) {
	e.mu.Lock()
	p.grant, p.grantCg = "", grantCgroup{}
	e.mu.Unlock()
}
