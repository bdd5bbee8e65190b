// Package sandboxtest holds what every sandbox.Runtime is tested with: an
// in-memory Fake (for the Manager's logic and for layers above it), and Run,
// the runtime conformance suite that the fake, Docker and containerd run
// unchanged (as executortest is for executors).
package sandboxtest

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/shellbox/shellbox/sandbox"
)

// Fake is an in-memory sandbox.Runtime: sandboxes are records, nothing
// runs. Its sandboxes have no agent endpoint. It keeps per-sandbox "state"
// (as a single-host runtime keeps host directories) so Sweep can be tested.
type Fake struct {
	mu    sync.Mutex
	byKey map[string]sandbox.Sandbox
	// state holds the keys whose per-sandbox state exists: made by Create,
	// dropped by Remove and Sweep (and left behind by Put's Orphan).
	state map[string]bool
	// workspace holds the keys whose per-session state (SessionState, as a
	// single-host runtime's workspace) exists: made by Create, kept by
	// Remove, dropped by RemoveSession and Sweep.
	workspace map[string]bool
	n         int

	// Creates and Removes count the calls that created or removed one;
	// Reuses the creates that found the session's workspace.
	Creates, Removes, Reuses atomic.Int32
	// CreateHook, if set, runs inside Create before the sandbox exists; an
	// error fails the Create.
	CreateHook func(spec sandbox.Spec) error
	// Now, if set, is the clock of Created (default time.Now).
	Now func() time.Time
}

// Recording is a Fake that keeps each sandbox's last use with it
// (sandbox.UseRecorder), as the Kubernetes runtime does: Get and List
// return the latest recorded in LastUsed. Records counts the records
// written.
type Recording struct {
	*Fake
	Records atomic.Int32
}

// NewRecording returns an empty Recording fake.
func NewRecording() *Recording { return &Recording{Fake: NewFake()} }

// RecordUse implements sandbox.UseRecorder: ErrNotFound if sb is gone.
func (r *Recording) RecordUse(ctx context.Context, sb sandbox.Sandbox, at time.Time) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	for k, have := range r.byKey {
		if have.ID == sb.ID {
			if at.After(have.LastUsed) {
				have.LastUsed = at
				r.byKey[k] = have
			}
			r.Records.Add(1)
			return nil
		}
	}
	return fmt.Errorf("%w: %s", sandbox.ErrNotFound, sb.ID)
}

var (
	_ sandbox.Runtime      = (*Fake)(nil)
	_ sandbox.Sweeper      = (*Fake)(nil)
	_ sandbox.SessionState = (*Fake)(nil)
)

// NewFake returns an empty Fake.
func NewFake() *Fake {
	return &Fake{byKey: map[string]sandbox.Sandbox{}, state: map[string]bool{}, workspace: map[string]bool{}}
}

func fakeKey(tenant, session string) string { return tenant + "/" + session }

// Create implements sandbox.Runtime.
func (f *Fake) Create(ctx context.Context, spec sandbox.Spec) (sandbox.Sandbox, error) {
	if err := spec.Validate(); err != nil {
		return sandbox.Sandbox{}, err
	}
	if f.CreateHook != nil {
		if err := f.CreateHook(spec); err != nil {
			return sandbox.Sandbox{}, err
		}
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	k := fakeKey(spec.Tenant, spec.Session)
	if old, ok := f.byKey[k]; ok {
		if old.Owner == "" {
			return sandbox.Sandbox{}, fmt.Errorf("%w: %s is held by something shellbox did not create", sandbox.ErrConflict, k)
		}
		return sandbox.Sandbox{}, fmt.Errorf("%w: %s", sandbox.ErrAlreadyExists, k)
	}
	f.Creates.Add(1)
	f.n++
	sb := sandbox.Sandbox{
		ID: fmt.Sprintf("c%d", f.n), Tenant: spec.Tenant, Session: spec.Session, Owner: spec.Owner,
		Runtime: spec.Runtime, Image: spec.Image, Network: spec.Network, Mounts: spec.Mounts,
		Settings: spec.Settings, State: sandbox.StateRunning, Created: f.now(),
	}
	f.byKey[k] = sb
	f.state[k] = true
	if f.workspace[k] {
		f.Reuses.Add(1)
	}
	f.workspace[k] = true
	return sb, nil
}

func (f *Fake) now() time.Time {
	if f.Now != nil {
		return f.Now()
	}
	return time.Now()
}

// Get implements sandbox.Runtime.
func (f *Fake) Get(ctx context.Context, tenant, session string) (sandbox.Sandbox, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	sb, ok := f.byKey[fakeKey(tenant, session)]
	switch {
	case !ok:
		return sandbox.Sandbox{}, fmt.Errorf("%w: %s/%s", sandbox.ErrNotFound, tenant, session)
	case sb.Owner == "":
		return sandbox.Sandbox{}, fmt.Errorf("%w: %s/%s is held by something shellbox did not create", sandbox.ErrConflict, tenant, session)
	}
	return sb, nil
}

// List implements sandbox.Runtime.
func (f *Fake) List(ctx context.Context, owner string) ([]sandbox.Sandbox, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	var out []sandbox.Sandbox
	for _, sb := range f.byKey {
		if sb.Owner != "" && (owner == "" || sb.Owner == owner) {
			out = append(out, sb)
		}
	}
	return out, nil
}

// Remove implements sandbox.Runtime.
func (f *Fake) Remove(ctx context.Context, id string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	for k, sb := range f.byKey {
		if sb.ID == id {
			delete(f.byKey, k)
			delete(f.state, k)
			f.Removes.Add(1)
		}
	}
	return nil
}

// RemoveSession implements sandbox.SessionState.
func (f *Fake) RemoveSession(ctx context.Context, tenant, session string) (bool, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	k := fakeKey(tenant, session)
	had := f.workspace[k]
	delete(f.workspace, k)
	return had, nil
}

// Sweep implements sandbox.Sweeper: per-sandbox state, then workspaces
// (named "workspace:<tenant>/<session>").
func (f *Fake) Sweep(ctx context.Context, owner string, live func(tenant, session string) bool) ([]string, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	var out []string
	for _, set := range []struct {
		m      map[string]bool
		prefix string
	}{{f.state, ""}, {f.workspace, "workspace:"}} {
		for k := range set.m {
			sb, ok := f.byKey[k]
			if ok && sb.Owner != owner {
				continue // another owner's sandbox uses it
			}
			tenant, session := splitKey(k)
			if live(tenant, session) {
				continue
			}
			delete(set.m, k)
			out = append(out, set.prefix+k)
		}
	}
	return out, nil
}

func splitKey(k string) (string, string) {
	for i := range len(k) {
		if k[i] == '/' {
			return k[:i], k[i+1:]
		}
	}
	return k, ""
}

// Put plants a sandbox as if an earlier server had created it (an empty
// Owner plants something shellbox did not create), with its per-sandbox
// state. It returns the sandbox with its ID.
func (f *Fake) Put(sb sandbox.Sandbox) sandbox.Sandbox {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.n++
	sb.ID = fmt.Sprintf("c%d", f.n)
	k := fakeKey(sb.Tenant, sb.Session)
	f.byKey[k] = sb
	f.state[k] = true
	return sb
}

// Orphan plants per-sandbox state with no sandbox (a host directory whose
// container was removed while no server ran).
func (f *Fake) Orphan(tenant, session string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.state[fakeKey(tenant, session)] = true
}

// Vanish removes a sandbox behind the Manager's back (docker rm -f): its
// per-sandbox state and the session's workspace stay.
func (f *Fake) Vanish(tenant, session string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	delete(f.byKey, fakeKey(tenant, session))
}

// Kill marks a sandbox exited (its agent died, or its memory limit took it).
func (f *Fake) Kill(tenant, session string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	k := fakeKey(tenant, session)
	if sb, ok := f.byKey[k]; ok {
		sb.State = sandbox.StateExited
		f.byKey[k] = sb
	}
}

// HasWorkspace reports whether the session's workspace exists.
func (f *Fake) HasWorkspace(tenant, session string) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.workspace[fakeKey(tenant, session)]
}

// Workspace plants a session's workspace (an earlier session's, or one
// whose sandbox was removed while no server ran).
func (f *Fake) Workspace(tenant, session string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.workspace[fakeKey(tenant, session)] = true
}

// HasState reports whether the per-sandbox state of tenant/session exists.
func (f *Fake) HasState(tenant, session string) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.state[fakeKey(tenant, session)]
}
