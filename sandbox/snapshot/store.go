// Package snapshot keeps the snapshots of suspended sessions (DESIGN.md §7,
// "Durable sessions"): a session's workspace, streamed out of its sandbox,
// outlives the sandbox in a Store, and is streamed back into a new one on
// resume.
//
// Store is the one seam; two implementations: Dir, a directory on the host's
// disk (one host, the default), and S3, any S3-compatible object store (a
// fleet: any replica on any node resumes any session). Both keep the same
// promises, held by one conformance suite (snapshottest):
//
//   - A snapshot is committed only when whole. Put writes to a temporary
//     name and commits at the end of the stream; an error, a cancellation or
//     a crash before that leaves nothing visible, and the snapshots already
//     committed in force.
//   - A snapshot is verified when read. Put records the stream's sha256 and
//     length at commit; Get's reader checks both and ends with ErrCorrupt,
//     never io.EOF, when the bytes differ or are cut short.
//   - Names are per tenant and session (confine.CheckID's rule, the one every
//     layer applies); a tenant reaches only its own snapshots.
//
// The store knows nothing of what a snapshot holds (a tar, compressed or
// not): it keeps bytes, their checksum, and their order in time.
package snapshot

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/shellbox/shellbox/confine"
	"github.com/shellbox/shellbox/errdefs"
)

// Store is the SnapshotStore seam: where suspended sessions' snapshots are
// kept. Implementations are safe for concurrent use.
//
// Errors are wrapped with %w in errdefs classes: ErrInvalid for a malformed
// tenant, session or snapshot id; ErrNotFound for a snapshot that is not
// there (or is another tenant's or session's); ErrUnavailable when the store
// cannot be reached or refuses the request; ErrNoSpace when it is full; and
// the context's error, wrapped, when ctx ends first. A stream that fails the
// check on read ends with ErrCorrupt.
type Store interface {
	// Put reads r to EOF and commits it as a new snapshot of (tenant,
	// session), whose Info it returns. Each call commits a snapshot of its
	// own with a new id: Put is not idempotent, and never replaces a
	// committed snapshot. Until r's EOF the bytes are under a temporary
	// name; if r fails, ctx ends or the store fails first, Put removes what
	// it wrote (under a short context of its own, so a cancelled caller
	// still cleans up) and returns the error: r's error wrapped as it is,
	// ctx's wrapped. r is the caller's: Put does not close it. Invalid
	// names are refused before r is read.
	Put(ctx context.Context, tenant, session string, r io.Reader) (Info, error)

	// Get opens the snapshot id of (tenant, session). Its reader yields the
	// stored bytes and checks them as they pass: at the end it returns
	// io.EOF only when the length and sha256 match what Put recorded, and
	// otherwise an error wrapping ErrCorrupt that says which (too short,
	// too long, checksum). A caller must not trust the bytes before it has
	// read io.EOF (restore into a scratch place, then swap). ctx bounds the
	// reads as well as the open. The caller closes the reader.
	Get(ctx context.Context, tenant, session, id string) (io.ReadCloser, Info, error)

	// List returns the committed snapshots of (tenant, session), newest
	// first (by Created, then id), so a caller whose newest snapshot is
	// corrupt can offer the one before. No snapshots is an empty list, not
	// an error. List does not read or verify the bytes.
	List(ctx context.Context, tenant, session string) ([]Info, error)

	// Delete removes the snapshot id of (tenant, session). A snapshot that
	// is not there is success (idempotent).
	Delete(ctx context.Context, tenant, session, id string) error

	// DeleteSession removes every snapshot of (tenant, session), its record
	// and its temporaries, for a session that is gone (limits.suspendedTTL). It is
	// idempotent. A Put for the same session running at the same time may
	// fail or may commit after it: the caller serializes a session's Put
	// and DeleteSession.
	DeleteSession(ctx context.Context, tenant, session string) error

	// Sweep removes leftovers: temporaries that a crashed Put never
	// committed nor removed, last written before the time before, across
	// every tenant and session. It returns what it removed (on error, what
	// it removed so far). A Put still writing a temporary older than before
	// loses it and fails: pass a time older than any Put may take (an hour
	// ago, say). Idempotent.
	Sweep(ctx context.Context, before time.Time) ([]Leftover, error)

	// SetRecord replaces the record of (tenant, session): a small
	// document, at most MaxRecord bytes, that the session layer keeps
	// beside the snapshots (the session's state, the snapshot it resumes
	// from, its settings), where every process sharing the store reads
	// it. A reader sees the old record or the new one, whole.
	SetRecord(ctx context.Context, tenant, session string, data []byte) error

	// SwapRecord is SetRecord on a condition: it writes data only if the
	// record is still at version old (as Record returned it; "" for a
	// session that has no record), and returns the new record's version.
	// Two processes swapping from the same version cannot both succeed:
	// the check and the write are one step for every process sharing the
	// store (Dir: a lock per session on the host; S3: a conditional PUT).
	// When the record is not at old (written, made or removed since it
	// was read), nothing is written and the error wraps ErrConflict.
	//
	// A write whose answer is lost (a timeout, a retried request) is
	// recognized by reading the record back: data equal to what is there
	// is taken as this call's write. A caller whose records could be
	// equal to another writer's puts something of its own in data (a
	// random token), so that "equal" means "mine".
	SwapRecord(ctx context.Context, tenant, session, old string, data []byte) (version string, err error)

	// Record returns the record of (tenant, session) and its version, an
	// opaque token for SwapRecord that changes whenever the record's
	// content does (equal contents may have equal versions): ErrNotFound
	// when it has none.
	Record(ctx context.Context, tenant, session string) (data []byte, version string, err error)

	// Records returns the records of every session with one, of every
	// tenant when tenant is "", in no set order. A record that vanishes
	// while it is listed is left out.
	Records(ctx context.Context, tenant string) ([]Record, error)
}

// Record is a session's record as Records lists it.
type Record struct {
	Tenant, Session string
	Data            []byte
}

// MaxRecord bounds a session's record.
const MaxRecord = 64 << 10

// checkRecord checks a record's names and size.
func checkRecord(tenant, session string, data []byte) error {
	if err := checkSession(tenant, session); err != nil {
		return err
	}
	if len(data) > MaxRecord {
		return errdefs.Errorf(errdefs.ErrInvalid, "snapshot: record of %s/%s: %d bytes, more than %d", tenant, session, len(data), MaxRecord)
	}
	return nil
}

// Info describes a committed snapshot.
type Info struct {
	Tenant, Session string
	// ID names the snapshot within its session: the time Put began and a
	// random suffix, so ids sort by time and never collide.
	ID string
	// Size is the stream's length in bytes.
	Size int64
	// SHA256 is the stream's sha256, lowercase hex.
	SHA256 string
	// Created is when Put began (UTC), the time the snapshot's content is
	// from; it orders List.
	Created time.Time
}

// Leftover is a temporary Sweep removed.
type Leftover struct {
	// Name is where it was: a path under a Dir's root, an object key (or
	// "key (upload ID)" for an unfinished multipart upload) in an S3 bucket.
	Name string
	// Size in bytes, when the store knows it (0 for an unfinished upload).
	Size int64
	// Modified is when it was last written (or its upload started).
	Modified time.Time
}

// ErrConflict: a SwapRecord found the record changed since the version it
// was given (another process wrote, made or removed it); nothing was
// written. Read the record again and decide anew.
var ErrConflict = errors.New("snapshot record changed meanwhile")

// ErrCorrupt: a snapshot's bytes do not match the length or checksum Put
// recorded (truncated, altered, or its data lost). The snapshot is not to be
// restored; the one before it (List) may be.
var ErrCorrupt = errors.New("snapshot corrupt")

// checkSession checks a tenant and session id by confine's rule: they become
// a path component (Dir) or key segment (S3), so no '/', no "..", bounded.
func checkSession(tenant, session string) error {
	if err := checkTenant(tenant); err != nil {
		return err
	}
	if err := confine.CheckID("session", session); err != nil {
		return errdefs.Errorf(errdefs.ErrInvalid, "snapshot: invalid %v (want %s)", err, confine.IDRule)
	}
	return nil
}

// checkTenant checks a tenant id by confine's rule.
func checkTenant(tenant string) error {
	if err := confine.CheckID("tenant", tenant); err != nil {
		return errdefs.Errorf(errdefs.ErrInvalid, "snapshot: invalid %v (want %s)", err, confine.IDRule)
	}
	return nil
}

// checkSnapshot checks tenant, session and a snapshot id, and returns the
// time the id carries.
func checkSnapshot(tenant, session, id string) (time.Time, error) {
	if err := checkSession(tenant, session); err != nil {
		return time.Time{}, err
	}
	t, err := parseID(id)
	if err != nil {
		return time.Time{}, errdefs.Errorf(errdefs.ErrInvalid, "snapshot: invalid snapshot id %q: %v", id, err)
	}
	return t, nil
}

// idTime is the time part of an id: fixed width, so ids sort as their times.
const idTime = "20060102T150405.000000000Z"

// idRandom is the hex length of an id's random suffix.
const idRandom = 12

// newID returns a fresh snapshot id for a Put begun at now.
func newID(now time.Time) string {
	var b [idRandom / 2]byte
	_, _ = rand.Read(b[:]) // crypto/rand.Read never fails (Go 1.24+)
	return now.UTC().Format(idTime) + "-" + hex.EncodeToString(b[:])
}

// newInfo starts the Info of a Put begun now: a new id, and Created as the
// id carries it (List reads it back from there).
func newInfo(tenant, session string) Info {
	id := newID(time.Now())
	created, _ := parseID(id)
	return Info{Tenant: tenant, Session: session, ID: id, Created: created}
}

// parseID checks an id newID made and returns its time.
func parseID(id string) (time.Time, error) {
	ts, suffix, ok := strings.Cut(id, "-")
	if !ok || len(ts) != len(idTime) || len(suffix) != idRandom {
		return time.Time{}, fmt.Errorf("want <%s>-<%d hex digits>", idTime, idRandom)
	}
	for _, c := range suffix {
		if !strings.ContainsRune("0123456789abcdef", c) {
			return time.Time{}, fmt.Errorf("want <%s>-<%d hex digits>", idTime, idRandom)
		}
	}
	t, err := time.Parse(idTime, ts)
	if err != nil {
		return time.Time{}, fmt.Errorf("want <%s>-<%d hex digits>", idTime, idRandom)
	}
	return t, nil
}

// newest orders infos newest first: by Created, then by id.
func newest(a, b Info) int {
	if c := b.Created.Compare(a.Created); c != 0 {
		return c
	}
	return strings.Compare(b.ID, a.ID)
}

// cleanupTimeout bounds the removal of a failed Put's temporary, which runs
// under a context of its own: the caller's may be the reason it failed.
const cleanupTimeout = 30 * time.Second

// cleanupContext returns a context for cleaning up after ctx's operation:
// ctx's values, not its cancellation, bounded by cleanupTimeout.
func cleanupContext(ctx context.Context) (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.WithoutCancel(ctx), cleanupTimeout)
}

// name is a snapshot's name in messages: tenant/session/id.
func name(tenant, session, id string) string { return tenant + "/" + session + "/" + id }
