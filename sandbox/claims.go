package sandbox

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"syscall"
)

// Claim says that the pooled sandbox of Tenant created under the name
// Pooled (its Session as the runtime knows it) belongs to Session.
type Claim struct {
	Tenant, Pooled, Session string
}

// Claims records which session each claimed pool sandbox belongs to. It is
// what lets a restarted server find a claimed sandbox as its session's: the
// runtime still knows it by its pooled name.
//
// Methods are safe for concurrent use, by several processes too. Two
// invariants hold whatever the processes do at once: a pooled sandbox is
// claimed by one session at most (Claim), and a session holds one claimed
// sandbox at most (Claim returns the one it holds); a claimed sandbox is
// never retired, a retired one never claimed (Retire).
type Claims interface {
	// Claim records that pooled now belongs to session and returns the
	// pooled name of the sandbox session holds: pooled, or, if session
	// already holds another (claimed an instant before by another process
	// serving the session's first calls), that one, and pooled is left
	// unclaimed. It is atomic: of concurrent claims of one pooled sandbox
	// for different sessions exactly one succeeds, the others get
	// ErrAlreadyExists (claiming it again for the same session succeeds).
	// A pooled sandbox that is gone or retired is ErrNotFound or
	// ErrAlreadyExists.
	Claim(ctx context.Context, tenant, pooled, session string) (string, error)
	// Retire makes the unclaimed pooled sandbox unclaimable for good, so
	// that its removal cannot take a sandbox a session was just handed: a
	// pooled sandbox is removed only after Retire returned nil (the
	// Manager's pool drains and rolls do so). It is atomic against Claim:
	// a claim that landed first wins, and Retire returns ErrAlreadyExists,
	// after which the sandbox is the session's and must be left alone.
	// Retiring a gone or retired sandbox succeeds. Release, after the
	// removal, forgets the retirement.
	Retire(ctx context.Context, tenant, pooled string) error
	// Lookup returns the pooled name of the sandbox session claimed, or
	// ErrNotFound.
	Lookup(ctx context.Context, tenant, session string) (string, error)
	// List returns every claim, and every retired sandbox whose removal
	// has not ended (a crash in between) as a Claim with an empty
	// Session.
	List(ctx context.Context) ([]Claim, error)
	// Release forgets the claim or retirement of pooled, whose sandbox is
	// gone. Releasing one that does not exist is not an error.
	Release(ctx context.Context, tenant, pooled string) error
}

// ColdStarts is an optional ability of Claims shared by processes that
// serve one session's calls at once (Kubernetes replicas): it keeps a
// session from getting both a cold sandbox and a claimed pooled one, and
// two processes from creating it cold side by side. A session's first
// sandbox is either claimed (Claim) or reserved for a cold start (Cold),
// never both: the two take the session's one lock.
//
// With ColdStarts, Claim also answers held == session when the session's
// sandbox is being (or was) created cold: the claimer leaves its pooled
// sandbox unclaimed and waits for that one.
//
// DirClaims does not have it: on one host one server process serves a
// session's calls (a second shares the directory only in a restart's
// overlap, when the old one takes no new calls), and the engine refuses a
// second container of a session's name.
type ColdStarts interface {
	// Cold reserves session's cold start. held "" means this call holds
	// the reservation: create the sandbox, then call done (whatever the
	// outcome: it keeps the reservation with a sandbox that exists and
	// drops it otherwise). held == session: another process holds it
	// (its sandbox is being created, or exists): wait for that sandbox.
	// Any other held is the pooled sandbox the session claimed elsewhere.
	// A reservation whose holder died before its sandbox existed is
	// dropped once it is older than the creation could take. A holder
	// that lost it all the same (clocks apart) learns it at done:
	// ErrAlreadyExists if the session claimed a pooled sandbox meanwhile,
	// which is then the session's (remove the one made); another error if
	// done could not settle it (it stands while the sandbox exists).
	Cold(ctx context.Context, tenant, session string) (held string, done func() error, err error)
}

// DirClaims keeps claims as files in a directory of the server's state:
// <dir>/<tenant>/<pooled>, holding the session's name. A claim is a link(2)
// of a complete temporary file to that name, which fails if the name
// exists: there is no moment at which a claim is half-made, and no two
// sessions can hold one sandbox. A symlink <dir>/<tenant>/<session> ->
// <pooled> (no session name starts with PoolPrefix) indexes it for
// Lookup, which believes it only if the claim it points to names the
// session; a crash between the claim and its index leaves a claim that
// List shows and claiming it again for the same session re-indexes
// (Manager.Adopt does). Claims of one tenant are made under an exclusive
// flock(2) of <dir>/<tenant>/.lock, so that of processes sharing the
// directory claiming different sandboxes for one session at once, the
// second finds the first's (the lock goes with a process that dies). A
// retirement (Retire) is the same link(2) of a file holding retiredMark,
// which no session is. Nothing is fsynced: a claim must survive
// the server's crash, which the page cache does; a host's crash stops
// every sandbox, and Adopt removes stopped ones with their claims.
type DirClaims struct {
	dir string
}

var _ Claims = (*DirClaims)(nil)

// maxClaimFile bounds what Lookup and List read of a claim file (a session
// id is at most 64 bytes).
const maxClaimFile = 256

// retiredMark is the content of a retired sandbox's claim file: not a
// session id (CheckID refuses '<').
const retiredMark = "<retired>"

// NewDirClaims returns the claims kept in dir, creating it (mode 0700).
func NewDirClaims(dir string) (*DirClaims, error) {
	if dir == "" {
		return nil, fmt.Errorf("%w: claims: empty directory", ErrInvalid)
	}
	abs, err := filepath.Abs(dir)
	if err != nil {
		return nil, fmt.Errorf("claims: %w", err)
	}
	if err := os.MkdirAll(abs, 0o700); err != nil {
		return nil, fmt.Errorf("claims: %w", err)
	}
	return &DirClaims{dir: abs}, nil
}

// Claim implements Claims.
func (d *DirClaims) Claim(ctx context.Context, tenant, pooled, session string) (string, error) {
	if err := CheckClaim(tenant, pooled, session); err != nil {
		return "", err
	}
	tdir := filepath.Join(d.dir, tenant)
	if err := os.MkdirAll(tdir, 0o700); err != nil {
		return "", fmt.Errorf("claims: %w", err)
	}
	unlock, err := lockDir(tdir)
	if err != nil {
		return "", err
	}
	defer unlock()
	// Under the tenant's lock nobody else claims for session meanwhile:
	// a sandbox the session holds already is its answer.
	if held, err := d.Lookup(ctx, tenant, session); err == nil {
		return held, nil
	} else if !errors.Is(err, ErrNotFound) {
		return "", err
	}
	if err := linkClaim(tdir, pooled, session); err != nil {
		if errors.Is(err, ErrAlreadyExists) {
			return "", fmt.Errorf("%w: pooled sandbox %s/%s is claimed already", ErrAlreadyExists, tenant, pooled)
		}
		return "", err
	}
	// The index: a fresh symlink renamed over whatever stale one the
	// session's earlier sandbox left.
	var rnd [8]byte
	_, _ = rand.Read(rnd[:]) // crypto/rand.Read never fails (Go 1.24)
	link := filepath.Join(tdir, ".index-"+hex.EncodeToString(rnd[:]))
	if err := os.Symlink(pooled, link); err != nil {
		return "", fmt.Errorf("claims: index: %w", err)
	}
	if err := os.Rename(link, filepath.Join(tdir, session)); err != nil {
		os.Remove(link)
		return "", fmt.Errorf("claims: index: %w", err)
	}
	return pooled, nil
}

// Retire implements Claims: the claim file of a retired sandbox holds
// retiredMark, made by the same link(2) as a claim, so of a Claim and a
// Retire at once one wins.
func (d *DirClaims) Retire(_ context.Context, tenant, pooled string) error {
	if err := CheckID("tenant", tenant); err != nil {
		return err
	}
	if !IsPooled(pooled) || CheckID("session", pooled) != nil {
		return fmt.Errorf("%w: %q is not a pooled sandbox's name", ErrInvalid, pooled)
	}
	tdir := filepath.Join(d.dir, tenant)
	if err := os.MkdirAll(tdir, 0o700); err != nil {
		return fmt.Errorf("claims: %w", err)
	}
	if err := linkClaim(tdir, pooled, retiredMark); errors.Is(err, ErrAlreadyExists) {
		return fmt.Errorf("%w: pooled sandbox %s/%s is claimed: not retiring it", ErrAlreadyExists, tenant, pooled)
	} else if err != nil {
		return err
	}
	return nil
}

// linkClaim makes <tdir>/<pooled> hold content, atomically: ErrAlreadyExists
// if it holds something else, nil if it holds content already.
func linkClaim(tdir, pooled, content string) error {
	var rnd [8]byte
	_, _ = rand.Read(rnd[:]) // crypto/rand.Read never fails (Go 1.24)
	// Temporary names start with a dot, which no tenant, session or pooled
	// name does: List skips them, and a crash leaves only such a file.
	tmp := filepath.Join(tdir, ".claim-"+hex.EncodeToString(rnd[:]))
	f, err := os.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_EXCL|syscall.O_NOFOLLOW, 0o600)
	if err != nil {
		return fmt.Errorf("claims: %w", err)
	}
	defer os.Remove(tmp)
	_, err = f.WriteString(content)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("claims: %w", err)
	}
	final := filepath.Join(tdir, pooled)
	if err := os.Link(tmp, final); err != nil {
		if !errors.Is(err, fs.ErrExist) {
			return fmt.Errorf("claims: %w", err)
		}
		if held, rerr := readClaim(final); rerr != nil || held != content {
			return ErrAlreadyExists
		}
	}
	return nil
}

// lockDir takes the exclusive flock of dir's .lock file and returns its
// release.
func lockDir(dir string) (func(), error) {
	f, err := os.OpenFile(filepath.Join(dir, ".lock"), os.O_RDWR|os.O_CREATE|syscall.O_NOFOLLOW, 0o600)
	if err != nil {
		return nil, fmt.Errorf("claims: lock: %w", err)
	}
	for {
		err = syscall.Flock(int(f.Fd()), syscall.LOCK_EX)
		if !errors.Is(err, syscall.EINTR) {
			break
		}
	}
	if err != nil {
		f.Close()
		return nil, fmt.Errorf("claims: lock: %w", err)
	}
	return func() { f.Close() }, nil // closing the file drops the lock
}

// Lookup implements Claims.
func (d *DirClaims) Lookup(ctx context.Context, tenant, session string) (string, error) {
	if err := CheckID("tenant", tenant); err != nil {
		return "", err
	}
	if err := CheckID("session", session); err != nil || IsPooled(session) {
		return "", fmt.Errorf("%w: no claim of session %s/%s", ErrNotFound, tenant, session)
	}
	tdir := filepath.Join(d.dir, tenant)
	pooled, err := os.Readlink(filepath.Join(tdir, session))
	if errors.Is(err, fs.ErrNotExist) || errors.Is(err, syscall.EINVAL) {
		return "", fmt.Errorf("%w: no claim of session %s/%s", ErrNotFound, tenant, session)
	}
	if err != nil {
		return "", fmt.Errorf("claims: %w", err)
	}
	if !IsPooled(pooled) || CheckID("session", pooled) != nil {
		return "", fmt.Errorf("%w: no claim of session %s/%s", ErrNotFound, tenant, session)
	}
	held, err := readClaim(filepath.Join(tdir, pooled))
	if errors.Is(err, fs.ErrNotExist) || err == nil && held != session {
		// A stale index: the claim was released (or is another's).
		return "", fmt.Errorf("%w: no claim of session %s/%s", ErrNotFound, tenant, session)
	}
	if err != nil {
		return "", fmt.Errorf("claims: %w", err)
	}
	return pooled, nil
}

// List implements Claims.
func (d *DirClaims) List(context.Context) ([]Claim, error) {
	tenants, err := os.ReadDir(d.dir)
	if err != nil {
		return nil, fmt.Errorf("claims: %w", err)
	}
	var out []Claim
	for _, t := range tenants {
		if !t.IsDir() || CheckID("tenant", t.Name()) != nil {
			continue
		}
		cs, err := d.tenantClaims(t.Name())
		if err != nil {
			return nil, err
		}
		out = append(out, cs...)
	}
	return out, nil
}

// Release implements Claims.
func (d *DirClaims) Release(_ context.Context, tenant, pooled string) error {
	if err := CheckID("tenant", tenant); err != nil {
		return err
	}
	if !IsPooled(pooled) || CheckID("session", pooled) != nil {
		return fmt.Errorf("%w: %q is not a pooled sandbox's name", ErrInvalid, pooled)
	}
	tdir := filepath.Join(d.dir, tenant)
	session, rerr := readClaim(filepath.Join(tdir, pooled))
	if err := os.Remove(filepath.Join(tdir, pooled)); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("claims: %w", err)
	}
	// Its index goes after it, if it still points to it.
	if rerr == nil && CheckID("session", session) == nil && !IsPooled(session) {
		idx := filepath.Join(tdir, session)
		if to, err := os.Readlink(idx); err == nil && to == pooled {
			if err := os.Remove(idx); err != nil && !errors.Is(err, fs.ErrNotExist) {
				return fmt.Errorf("claims: index: %w", err)
			}
		}
	}
	return nil
}

// tenantClaims reads a tenant's claim files (a retired sandbox's with an
// empty Session); malformed ones are skipped.
func (d *DirClaims) tenantClaims(tenant string) ([]Claim, error) {
	tdir := filepath.Join(d.dir, tenant)
	ents, err := os.ReadDir(tdir)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("claims: %w", err)
	}
	var out []Claim
	for _, e := range ents {
		name := e.Name()
		if !e.Type().IsRegular() || !IsPooled(name) || CheckID("session", name) != nil {
			continue
		}
		session, err := readClaim(filepath.Join(tdir, name))
		if errors.Is(err, fs.ErrNotExist) {
			continue // released meanwhile
		}
		if err != nil {
			return nil, err
		}
		switch {
		case session == retiredMark:
			session = ""
		case CheckID("session", session) != nil:
			continue
		}
		out = append(out, Claim{Tenant: tenant, Pooled: name, Session: session})
	}
	return out, nil
}

func readClaim(path string) (string, error) {
	f, err := os.OpenFile(path, os.O_RDONLY|syscall.O_NOFOLLOW, 0)
	if err != nil {
		return "", err
	}
	defer f.Close()
	b, err := io.ReadAll(io.LimitReader(f, maxClaimFile))
	if err != nil {
		return "", fmt.Errorf("claims: %w", err)
	}
	return strings.TrimSpace(string(b)), nil
}

// CheckClaim checks the names of a claim, as every Claims does: a tenant,
// a pooled sandbox's name, and a session that is not one (ErrInvalid).
func CheckClaim(tenant, pooled, session string) error {
	if err := CheckID("tenant", tenant); err != nil {
		return err
	}
	if err := CheckID("session", pooled); err != nil || !IsPooled(pooled) {
		return fmt.Errorf("%w: %q is not a pooled sandbox's name", ErrInvalid, pooled)
	}
	if err := CheckID("session", session); err != nil {
		return err
	}
	if IsPooled(session) {
		return fmt.Errorf("%w: session %q: names starting with %q are reserved for warm pools", ErrInvalid, session, PoolPrefix)
	}
	return nil
}
