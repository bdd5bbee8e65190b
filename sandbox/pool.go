package sandbox

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"
)

// PoolPrefix starts the session name of every pooled sandbox (PoolPrefix,
// the template's hash, "-", a random suffix). Sessions may not use it.
const PoolPrefix = "pool@"

// IsPooled reports whether name is a pooled sandbox's session name.
func IsPooled(name string) bool { return strings.HasPrefix(name, PoolPrefix) }

// PoolTarget is one wanted warm pool: Size ready sandboxes of Template.
type PoolTarget struct {
	// Template is the Spec of the pool's sandboxes; its Session and Owner
	// are ignored (the Manager names pooled sandboxes and owns them).
	Template Spec
	// Size is how many unclaimed sandboxes to keep ready.
	Size int
}

// TemplateHash identifies what a sandbox of spec is, whichever session it
// serves: a hash of everything in spec but Session and Owner. A session
// claims a pooled sandbox only of its own Spec's hash.
//
// The hash is of templateKey's frozen layout, not of Spec's: a release
// that only regroups Spec's fields (as confine.Resources did) keeps every
// pool's hash, where a changed hash drains and refills every warm pool and,
// during a rolling update, has the old and the new replicas miss each
// other's pools. A field added to Spec is added to templateKey
// (TestTemplateKeyCoversSpec fails until it is), which changes the hash
// once, as it must: the field is a new setting.
func TemplateHash(spec Spec) string {
	spec = spec.Clone()
	// Settings are a session's record, not a setting: a session whose
	// options make the template's spec claims from its pool (the pooled
	// sandbox keeps the template's empty record; what the session asked
	// for is what the template has).
	spec.Session, spec.Owner, spec.Settings = "", "", ""
	// Empty and nil are the same setting.
	if len(spec.Env) == 0 {
		spec.Env = nil
	}
	if len(spec.Labels) == 0 {
		spec.Labels = nil
	}
	if len(spec.AgentArgs) == 0 {
		spec.AgentArgs = nil
	}
	if len(spec.Mounts) == 0 {
		spec.Mounts = nil
	}
	// %#v prints every field, and maps in key order.
	sum := sha256.Sum256([]byte(fmt.Sprintf("%#v", templateKey(spec))))
	return hex.EncodeToString(sum[:8])
}

// templateKey is spec in the layout TemplateHash hashes: Spec's fields in
// one flat struct, in the order they had before confine.Resources grouped
// six of them. The type is named Spec, declared here, so that %#v prints
// "sandbox.Spec{...}" as it did: the hashes of earlier releases hold.
func templateKey(spec Spec) any {
	type Spec struct {
		Tenant         string
		Session        string
		Owner          string
		Image          string
		Runtime        string
		CPUs           float64
		MemoryBytes    int64
		PidsLimit      int64
		WorkspaceBytes int64
		TmpBytes       int64
		SpillBytes     int64
		Network        string
		UID, GID       int
		Env            []string
		Labels         map[string]string
		AgentArgs      []string
		Mounts         []Mount
		Settings       string
	}
	r := spec.Resources
	if r.TenantCPUs != 0 {
		// A setting added after the layout froze: only the templates
		// that set it hash anew (their sandboxes differ from the ones
		// without it: another cgroup parent).
		type SpecTenantCPUs struct {
			Spec       any
			TenantCPUs float64
		}
		spec.TenantCPUs = 0
		return SpecTenantCPUs{Spec: templateKey(spec), TenantCPUs: r.TenantCPUs}
	}
	return Spec{
		Tenant: spec.Tenant, Session: spec.Session, Owner: spec.Owner,
		Image: spec.Image, Runtime: spec.Runtime,
		CPUs: r.CPUs, MemoryBytes: r.MemoryBytes, PidsLimit: r.PidsLimit,
		WorkspaceBytes: r.WorkspaceBytes, TmpBytes: r.TmpBytes, SpillBytes: r.SpillBytes,
		Network: spec.Network, UID: spec.UID, GID: spec.GID,
		Env: spec.Env, Labels: spec.Labels, AgentArgs: spec.AgentArgs, Mounts: spec.Mounts,
		Settings: spec.Settings,
	}
}

// poolName returns a fresh pooled session name of template hash h.
func poolName(h string) string {
	var rnd [4]byte
	_, _ = rand.Read(rnd[:]) // crypto/rand.Read never fails (Go 1.24)
	return PoolPrefix + h + "-" + hex.EncodeToString(rnd[:])
}

// poolHash is the template hash in a pooled session name ("" if none).
func poolHash(name string) string {
	rest, ok := strings.CutPrefix(name, PoolPrefix)
	if !ok {
		return ""
	}
	h, _, ok := strings.Cut(rest, "-")
	if !ok {
		return ""
	}
	return h
}

// warmPools owns the warm pools: their ready sandboxes, the pooled
// sandboxes being created, and the runtime names of every pooled sandbox
// this Manager has (claimed ones too). It fills and drains the pools
// (Fill), hands a ready sandbox to a session (claim, pool_claim.go) and
// learns what other processes made or claimed (syncPooled).
//
// mu guards pools and every pool's fields, named, syncs, lastSync and
// syncing. It is never held across a runtime or claims call, and nothing
// else is locked under it; lifecycle.adopt takes it inside lifecycle.mu.
//
// A claimed pooled sandbox is a session's, with a lifecycle entry under
// the session's name, while its pooled name stays in named here: the two
// owners key it by different names, so no question needs both locks at
// once. It is in named from before its entry exists (a claim takes it from
// a ready list, heldSandbox and Adopt mark it) until after the sandbox is
// removed (lifecycle.destroy forgets it), so Adopt's sweep, which asks
// both owners, keeps its state throughout.
type warmPools struct {
	*engine
	adm *admission
	// destroy removes a session's sandbox (lifecycle.destroy): a claimed
	// pooled sandbox that is not ready is removed as the session's.
	destroy func(ctx context.Context, k key, sb Sandbox) error
	kick    chan struct{} // a claim, once it ends, wakes FillEvery

	mu sync.Mutex
	// pools are the warm pools by poolKey; named are the runtime names
	// (tenant, pooled session) of every pooled sandbox this Manager has or
	// is creating, claimed ones included, so Adopt's sweep keeps their
	// state.
	pools map[string]*pool
	named map[key]bool
	// syncs are the syncPooled passes under way (poolSync).
	syncs map[*poolSync]struct{}
	// lastSync is when syncPooled last listed the runtime.
	lastSync time.Time
	// syncing is closed when the latest syncPooled pass under way ends;
	// nil when none runs. A claim that finds its pool empty while a pass
	// lists waits for that pass rather than start cold.
	syncing chan struct{}
}

func newWarmPools(g *engine, adm *admission) *warmPools {
	return &warmPools{engine: g, adm: adm, kick: make(chan struct{}, 1),
		pools: map[string]*pool{}, named: map[key]bool{}, syncs: map[*poolSync]struct{}{}}
}

// pool is one warm pool as the Manager keeps it. Guarded by warmPools.mu.
type pool struct {
	tenant, hash string
	template     Spec
	// size is the wanted number of ready sandboxes; 0 for a pool no target
	// names (adopted sandboxes before the first Fill), which Fill drains.
	size int
	// ready are claimable sandboxes, oldest first; creating counts
	// creations under way.
	ready    []Sandbox
	creating int
	// filled: a Fill of this Manager named the pool (it keeps the pool's
	// size). A pool only found (Adopt, syncPooled) is another process's
	// to fill and drain: a sandbox put back is kept.
	filled bool
}

// syncEvery bounds how often a claim that finds no ready sandbox looks for
// pooled sandboxes another process made. A claim that finds none while a
// look is under way waits for its outcome: in a burst of new sessions on a
// process that does not fill the pools (a replica that is not the elected
// one) all but the first claim would otherwise start cold while the first
// one lists what the filler made.
const syncEvery = time.Second

func poolKey(tenant, hash string) string { return tenant + "/" + hash }

// PoolStatus is one pool's state (Pools).
type PoolStatus struct {
	Tenant, Hash    string
	Size            int
	Ready, Creating int
}

// status is Manager.Pools.
func (w *warmPools) status() []PoolStatus {
	w.mu.Lock()
	defer w.mu.Unlock()
	var out []PoolStatus
	for _, p := range w.pools {
		out = append(out, PoolStatus{Tenant: p.tenant, Hash: p.hash, Size: p.size, Ready: len(p.ready), Creating: p.creating})
	}
	return out
}

// FillReport says what one Fill did.
type FillReport struct {
	// Created and Removed are pooled sandboxes made ready and removed
	// (drained: their template is no longer wanted, or the pool shrank).
	Created, Removed int
	// Claimed are sandboxes Fill would have removed but found claimed by
	// a session meanwhile (by another process), and left to it.
	Claimed int
	// Missing is how many ready sandboxes the pools still lack (no
	// creation slot was free, or creations failed).
	Missing int
}

// fill is Manager.Fill: it syncs with the runtime, plans (sizes, the
// ready sandboxes to drain, the creations to start), drains, creates.
func (w *warmPools) fill(ctx context.Context, targets []PoolTarget) (FillReport, error) {
	var rep FillReport
	want, err := w.wanted(targets)
	if err != nil {
		return rep, err
	}
	if len(want) > 0 || len(w.status()) > 0 {
		// Claims by other processes since the last pass leave the pools,
		// so they are counted short and refilled.
		if err := w.syncPooled(ctx); err != nil {
			w.cfg.Logger.Warn("listing pooled sandboxes", "err", err)
		}
	}
	victims, jobs := w.plan(want)
	w.drain(ctx, victims, &rep)
	created, err := w.start(ctx, jobs)
	rep.Created = created
	rep.Missing = w.missing()
	return rep, err
}

// wanted checks targets and returns the pools they want by poolKey, with
// their templates completed (the Manager's owner, a pooled session).
func (w *warmPools) wanted(targets []PoolTarget) (map[string]PoolTarget, error) {
	want := map[string]PoolTarget{}
	for _, t := range targets {
		if t.Size <= 0 {
			continue
		}
		if w.cfg.Claims == nil {
			return nil, fmt.Errorf("%w: warm pools need a claims store (Config.Claims)", ErrInvalid)
		}
		spec := t.Template.Clone()
		spec.Session, spec.Owner = PoolPrefix+"template", w.cfg.Owner
		if err := spec.Validate(); err != nil {
			return nil, fmt.Errorf("pool of tenant %s: %w", spec.Tenant, err)
		}
		t.Template = spec
		want[poolKey(spec.Tenant, TemplateHash(spec))] = t
	}
	return want, nil
}

// fillJob is one pooled sandbox of p that Fill plans to create.
type fillJob struct {
	p    *pool
	spec Spec
}

// plan sets every pool's size to what want says (0: drained), takes the
// ready sandboxes beyond it out (victims, to remove), and counts the
// missing ones as creating at once (jobs), so a concurrent Fill does not
// plan the same sandboxes.
func (w *warmPools) plan(want map[string]PoolTarget) (victims []Sandbox, jobs []fillJob) {
	w.mu.Lock()
	defer w.mu.Unlock()
	for k, p := range w.pools {
		t, ok := want[k]
		size := 0
		if ok {
			size = t.Size
		}
		p.size, p.filled = size, true
		if n := len(p.ready) - size; n > 0 {
			// The newest go first: the oldest have waited longest to be
			// used, and are the same template.
			for _, sb := range p.ready[len(p.ready)-n:] {
				victims = append(victims, sb)
				w.pooledChanged(key{sb.Tenant, sb.Session})
			}
			p.ready = p.ready[:len(p.ready)-n]
		}
		if !ok && p.creating == 0 {
			delete(w.pools, k)
		}
	}
	for k, t := range want {
		p := w.pools[k]
		if p == nil {
			p = &pool{tenant: t.Template.Tenant, hash: TemplateHash(t.Template), size: t.Size, filled: true}
			w.pools[k] = p
		}
		p.template = t.Template // adopted pools have none yet
		for range p.size - len(p.ready) - p.creating {
			jobs = append(jobs, fillJob{p, p.template})
			p.creating++
		}
	}
	return victims, jobs
}

// drain removes the ready sandboxes plan took out, counting them in rep.
func (w *warmPools) drain(ctx context.Context, victims []Sandbox, rep *FillReport) {
	for _, sb := range victims {
		err := w.removePooled(ctx, sb, "pool drained")
		switch {
		case errors.Is(err, ErrAlreadyExists):
			// Claimed by another process since it was listed ready: a
			// session's now, left alone (removePooled logged it).
			rep.Claimed++
		case err != nil:
			w.cfg.Logger.Warn("removing pooled sandbox", "tenant", sb.Tenant, "name", sb.Session, "err", err)
		default:
			rep.Removed++
		}
	}
}

// start runs the planned creations, as many at a time as creation slots
// are free while no session waits for one (the rest are no longer counted
// as creating), and returns once they end: how many were made ready.
func (w *warmPools) start(ctx context.Context, jobs []fillJob) (created int, _ error) {
	var errs []error
	done := make(chan error)
	started := 0
	for i, j := range jobs {
		// A cancelled ctx (the caller stopped leading) creates nothing
		// more: another process keeps the pools now.
		var release func()
		ok := false
		if ctx.Err() == nil {
			release, ok = w.adm.tryAcquire()
		}
		if !ok {
			w.mu.Lock()
			for _, j := range jobs[i:] {
				j.p.creating--
			}
			w.mu.Unlock()
			break
		}
		spec := j.spec.Clone()
		spec.Session = poolName(j.p.hash)
		w.markNamed(key{spec.Tenant, spec.Session})
		started++
		go func() {
			err := w.createPooled(ctx, j.p, spec)
			release() // before Fill returns: its slot is free then
			done <- err
		}()
	}
	for range started {
		if err := <-done; err != nil {
			errs = append(errs, err)
		} else {
			created++
		}
	}
	return created, errors.Join(errs...)
}

// missing is how many ready sandboxes the pools lack.
func (w *warmPools) missing() int {
	w.mu.Lock()
	defer w.mu.Unlock()
	n := 0
	for _, p := range w.pools {
		n += max(p.size-len(p.ready)-p.creating, 0)
	}
	return n
}

// fillEvery is Manager.FillEvery.
func (w *warmPools) fillEvery(ctx context.Context, targets func() []PoolTarget, interval time.Duration) {
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		rep, err := w.fill(ctx, targets())
		if err != nil {
			w.cfg.Logger.Warn("filling warm pools", "err", err)
		}
		if rep.Missing > 0 && rep.Created > 0 && ctx.Err() == nil {
			continue
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		case <-w.kick:
		}
	}
}

// createPooled creates one sandbox of p, whose name spec.Session is in
// w.named already, and makes it ready to claim (or removes it if p no
// longer wants it).
func (w *warmPools) createPooled(parent context.Context, p *pool, spec Spec) error {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(parent), w.cfg.CreateTimeout)
	defer cancel()
	sb, err := w.cfg.Runtime.Create(ctx, spec)
	if err == nil {
		err = w.ready(ctx, sb)
		if err == nil && w.cfg.Prepare != nil {
			err = w.cfg.Prepare(ctx, sb)
		}
		if err != nil {
			err = w.discard(ctx, sb, err)
		}
	}
	w.mu.Lock()
	p.creating--
	w.pooledChanged(key{spec.Tenant, spec.Session})
	if err != nil {
		delete(w.named, key{spec.Tenant, spec.Session})
		w.mu.Unlock()
		return fmt.Errorf("pooled sandbox of tenant %s: %w", spec.Tenant, err)
	}
	keep := w.pools[poolKey(p.tenant, p.hash)] == p && len(p.ready) < p.size
	if keep {
		p.ready = append(p.ready, sb)
	}
	if w.pools[poolKey(p.tenant, p.hash)] == p && p.size == 0 && p.creating == 0 && len(p.ready) == 0 {
		delete(w.pools, poolKey(p.tenant, p.hash))
	}
	w.mu.Unlock()
	if !keep {
		if err := w.removePooled(ctx, sb, "pool drained"); err != nil && !errors.Is(err, ErrAlreadyExists) {
			return err
		}
		return nil
	}
	w.cfg.Logger.Info("pooled sandbox created", "tenant", sb.Tenant, "name", sb.Session, "id", sb.ID)
	return nil
}

// removePooled removes an unclaimed pooled sandbox: it retires it first
// (Claims.Retire), so that a sandbox another process claimed since this
// one listed it as ready is never removed: then Retire says
// ErrAlreadyExists and the sandbox is left to its session, not counted
// here any more.
func (w *warmPools) removePooled(ctx context.Context, sb Sandbox, reason string) error {
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), w.cfg.RemoveTimeout)
	defer cancel()
	if w.cfg.Claims != nil {
		if err := w.cfg.Claims.Retire(rctx, sb.Tenant, sb.Session); err != nil {
			if errors.Is(err, ErrAlreadyExists) {
				w.cfg.Logger.Info("pooled sandbox claimed meanwhile: not removed", "reason", reason, "tenant", sb.Tenant, "name", sb.Session, "id", sb.ID)
			}
			return fmt.Errorf("removing pooled sandbox %s/%s: %w", sb.Tenant, sb.Session, err)
		}
	}
	// Its state too (engine.removeSandbox): drained, rolled or found dead, a
	// pooled sandbox left its workspace's host tmpfs mounted until the
	// next server start.
	if err := w.removeSandbox(rctx, sb, sb.Session); err != nil {
		return err
	}
	if w.cfg.Claims != nil {
		// The retirement goes after the sandbox: a crash in between leaves
		// a retired sandbox, which Adopt removes.
		if err := w.cfg.Claims.Release(rctx, sb.Tenant, sb.Session); err != nil {
			w.cfg.Logger.Warn("releasing a retired pooled sandbox", "tenant", sb.Tenant, "name", sb.Session, "err", err)
		}
	}
	w.forget(key{sb.Tenant, sb.Session})
	w.cfg.Logger.Info("pooled sandbox removed", "reason", reason, "tenant", sb.Tenant, "name", sb.Session, "id", sb.ID)
	return nil
}

// adopt puts a running, unclaimed pooled sandbox found at Adopt in its
// template's pool (of size 0 until Fill says what it wants), and reports
// whether it did.
func (w *warmPools) adopt(sb Sandbox) bool {
	h := poolHash(sb.Session)
	if sb.State != StateRunning || h == "" || w.cfg.Claims == nil || CheckID("tenant", sb.Tenant) != nil {
		return false
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	k := poolKey(sb.Tenant, h)
	p := w.pools[k]
	if p == nil {
		p = &pool{tenant: sb.Tenant, hash: h}
		w.pools[k] = p
	}
	for _, r := range p.ready {
		if r.ID == sb.ID {
			return true
		}
	}
	p.ready = append(p.ready, sb)
	w.named[key{sb.Tenant, sb.Session}] = true
	w.pooledChanged(key{sb.Tenant, sb.Session})
	return true
}

// markNamed notes k (tenant, pooled name) as a pooled sandbox this
// Manager has; forget, as one it no longer has.
func (w *warmPools) markNamed(k key) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.named[k] = true
	w.pooledChanged(k)
}

func (w *warmPools) forget(k key) {
	w.mu.Lock()
	defer w.mu.Unlock()
	delete(w.named, k)
	w.pooledChanged(k)
}

// knowsName reports whether k (tenant, pooled name) is a pooled sandbox
// this Manager has or is creating.
func (w *warmPools) knowsName(k key) bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.named[k]
}

// kickFill wakes FillEvery, without waiting.
func (w *warmPools) kickFill() {
	select {
	case w.kick <- struct{}{}:
	default:
	}
}
