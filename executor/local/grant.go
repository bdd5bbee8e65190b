package local

import "slices"

// Network grants bound to trees.
//
// A call granted the network permission carries a credential
// (Spec.EgressGrant) for the sandbox's egress proxy. Were it in the
// command's environment, every process of the sandbox user could read it
// from /proc/<pid>/environ and use it: a background task of another call
// among them. So the executor keeps it: the proxy attributes each
// connection to the processes holding its socket and asks Grant, with their
// supplementary groups, which credential they carry. A credential belongs
// to a tree only through its tag (tag.go): unforgeable, inherited by every
// process of the tree and by nothing else. It ends when the tree does
// (afterExit forgets it before the tag can be handed out again), and a
// command without a tag (a cgroup tracks it, or no TagGroups) has no grant
// at all: it fails closed.

// Grant returns the network grant (Spec.EgressGrant) of the live command
// whose tag is among groups, the supplementary groups of a process; "" when
// there is none.
func (e *Executor) Grant(groups []uint32) string {
	if e.tags == nil {
		return ""
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	for p := range e.running {
		if p.tag != 0 && p.grant != "" && slices.Contains(groups, p.tag) {
			return p.grant
		}
	}
	return ""
}

// forgetGrant ends p's grant: called once its tree is gone (or given up on),
// before its tag is freed.
func (e *Executor) forgetGrant(p *proc) {
	e.mu.Lock()
	p.grant = ""
	e.mu.Unlock()
}
