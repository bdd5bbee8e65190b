package snapshot

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/shellbox/shellbox/errdefs"
)

// DirOptions configures a Dir store.
type DirOptions struct {
	// Path is the store's directory, made (0700) if missing. Snapshots hold
	// tenants' files: it should be on a disk of its own or under the state
	// directory, not in RAM.
	Path string
}

// Dir is a Store in a directory of the host's disk, for one host:
//
//	<Path>/<tenant>/<session>/<id>.<size>.<sha256>.snap   a committed snapshot
//	<Path>/<tenant>/<session>/.tmp-<id>                  a Put in progress
//	<Path>/<tenant>/<session>/record                     the session's record
//	<Path>/<tenant>/<session>/.tmp-record-<random>       a SetRecord in progress
//
// Put writes the temporary, fsyncs it, renames it to its committed name
// and fsyncs the directory: the rename is the commit, and it carries the
// length and checksum in the name, so a snapshot and its record appear
// together or not at all, and a crash at any point leaves either the
// temporary (Sweep's) or the whole snapshot. Every path is resolved inside
// Path (os.Root): a symlink planted in the store does not lead out of it.
type Dir struct {
	root *os.Root
}

var _ Store = (*Dir)(nil)

// NewDir opens (making it if missing) the store at opts.Path. Close it when
// done.
func NewDir(opts DirOptions) (*Dir, error) {
	if opts.Path == "" {
		return nil, errdefs.Errorf(errdefs.ErrInvalid, "snapshot dir: no path")
	}
	if err := os.MkdirAll(opts.Path, 0o700); err != nil {
		return nil, fmt.Errorf("snapshot dir: %w", dirErr(err))
	}
	root, err := os.OpenRoot(opts.Path)
	if err != nil {
		return nil, fmt.Errorf("snapshot dir: %w", dirErr(err))
	}
	return &Dir{root: root}, nil
}

// Close releases the store's directory. Readers Get returned stay usable.
func (d *Dir) Close() error { return d.root.Close() }

const (
	snapSuffix = ".snap"
	tmpPrefix  = ".tmp-"
	// copyBuffer is Put's one buffer: what a Put holds in memory.
	copyBuffer = 256 << 10
)

func sessionDir(tenant, session string) string { return tenant + "/" + session }

// snapName is a committed snapshot's file name.
func snapName(info Info) string {
	return info.ID + "." + strconv.FormatInt(info.Size, 10) + "." + info.SHA256 + snapSuffix
}

// parseSnapName reads a committed snapshot's file name; ok is false for any
// other file (a temporary, something not the store's).
func parseSnapName(tenant, session, file string) (Info, bool) {
	base, found := strings.CutSuffix(file, snapSuffix)
	if !found {
		return Info{}, false
	}
	parts := strings.Split(base, ".")
	// The id's time has one dot of its own: yyyymmddThhmmss.nnnnnnnnnZ-hex.
	if len(parts) != 4 {
		return Info{}, false
	}
	id := parts[0] + "." + parts[1]
	created, err := parseID(id)
	if err != nil {
		return Info{}, false
	}
	size, err := strconv.ParseInt(parts[2], 10, 64)
	if err != nil || size < 0 || len(parts[3]) != 64 {
		return Info{}, false
	}
	return Info{Tenant: tenant, Session: session, ID: id, Size: size, SHA256: parts[3], Created: created}, true
}

// Put implements Store.
func (d *Dir) Put(ctx context.Context, tenant, session string, r io.Reader) (Info, error) {
	if err := checkSession(tenant, session); err != nil {
		return Info{}, err
	}
	info := newInfo(tenant, session)
	fail := func(err error) (Info, error) {
		return Info{}, fmt.Errorf("snapshot %s: put: %w", name(tenant, session, info.ID), err)
	}
	dir := sessionDir(tenant, session)
	if err := d.mkdirs(tenant, session); err != nil {
		return fail(dirErr(err))
	}
	tmp := dir + "/" + tmpPrefix + info.ID
	f, err := d.root.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return fail(dirErr(err))
	}
	committed := false
	defer func() {
		if !committed {
			f.Close()
			d.root.Remove(tmp)
		}
	}()
	pr := newPutReader(ctx, r)
	if _, err := io.CopyBuffer(onlyWriter{f}, pr, make([]byte, copyBuffer)); err != nil {
		return fail(pr.failure(dirErr(err)))
	}
	if err := f.Sync(); err != nil {
		return fail(dirErr(err))
	}
	if err := f.Close(); err != nil {
		return fail(dirErr(err))
	}
	if err := ctx.Err(); err != nil {
		return fail(err)
	}
	info.Size, info.SHA256 = pr.n, pr.sum()
	if err := d.root.Rename(tmp, dir+"/"+snapName(info)); err != nil {
		return fail(dirErr(err))
	}
	committed = true
	// The rename is durable once the directory is.
	if err := d.syncDir(dir); err != nil {
		return fail(dirErr(err))
	}
	return info, nil
}

// onlyWriter hides *os.File's ReadFrom, so io.CopyBuffer reads through
// the one buffer it is given (and the putReader sees every byte).
type onlyWriter struct{ io.Writer }

// mkdirs makes <tenant>/<session> and fsyncs the parents of what it made,
// so a committed snapshot's directory entry cannot vanish in a crash.
func (d *Dir) mkdirs(tenant, session string) error {
	dir := sessionDir(tenant, session)
	if _, err := d.root.Stat(dir); err == nil {
		return nil
	}
	if err := d.root.MkdirAll(dir, 0o700); err != nil {
		return err
	}
	if err := d.syncDir(tenant); err != nil {
		return err
	}
	return d.syncDir(".")
}

func (d *Dir) syncDir(dir string) error {
	f, err := d.root.Open(dir)
	if err != nil {
		return err
	}
	defer f.Close()
	return f.Sync()
}

// Get implements Store.
func (d *Dir) Get(ctx context.Context, tenant, session, id string) (io.ReadCloser, Info, error) {
	if _, err := checkSnapshot(tenant, session, id); err != nil {
		return nil, Info{}, err
	}
	info, err := d.find(tenant, session, id)
	if err != nil {
		return nil, Info{}, fmt.Errorf("snapshot %s: get: %w", name(tenant, session, id), err)
	}
	f, err := d.root.Open(sessionDir(tenant, session) + "/" + snapName(info))
	if err != nil {
		return nil, Info{}, fmt.Errorf("snapshot %s: get: %w", name(tenant, session, id), dirErr(err))
	}
	return newVerifier(ctx, f, info, dirErr), info, nil
}

// find returns the committed snapshot id of (tenant, session).
func (d *Dir) find(tenant, session, id string) (Info, error) {
	infos, err := d.list(tenant, session)
	if err != nil {
		return Info{}, err
	}
	for _, info := range infos {
		if info.ID == id {
			return info, nil
		}
	}
	return Info{}, errdefs.Errorf(errdefs.ErrNotFound, "no such snapshot")
}

// List implements Store.
func (d *Dir) List(ctx context.Context, tenant, session string) ([]Info, error) {
	if err := checkSession(tenant, session); err != nil {
		return nil, err
	}
	infos, err := d.list(tenant, session)
	if err != nil {
		return nil, fmt.Errorf("snapshot %s/%s: list: %w", tenant, session, err)
	}
	return infos, nil
}

func (d *Dir) list(tenant, session string) ([]Info, error) {
	entries, err := fs.ReadDir(d.root.FS(), sessionDir(tenant, session))
	if errors.Is(err, fs.ErrNotExist) {
		return []Info{}, nil
	}
	if err != nil {
		return nil, dirErr(err)
	}
	infos := []Info{}
	for _, e := range entries {
		if info, ok := parseSnapName(tenant, session, e.Name()); ok && e.Type().IsRegular() {
			infos = append(infos, info)
		}
	}
	slices.SortFunc(infos, newest)
	return infos, nil
}

// Delete implements Store.
func (d *Dir) Delete(ctx context.Context, tenant, session, id string) error {
	if _, err := checkSnapshot(tenant, session, id); err != nil {
		return err
	}
	info, err := d.find(tenant, session, id)
	if errors.Is(err, errdefs.ErrNotFound) {
		return nil
	}
	if err == nil {
		dir := sessionDir(tenant, session)
		if err = d.root.Remove(dir + "/" + snapName(info)); err == nil || errors.Is(err, fs.ErrNotExist) {
			err = d.syncDir(dir)
		}
	}
	if err != nil {
		return fmt.Errorf("snapshot %s: delete: %w", name(tenant, session, id), dirErr(err))
	}
	return nil
}

// DeleteSession implements Store.
func (d *Dir) DeleteSession(ctx context.Context, tenant, session string) error {
	if err := checkSession(tenant, session); err != nil {
		return err
	}
	// Under the record lock: a swap holding it (its version read) cannot
	// rename a record into the directory after RemoveAll listed it, which
	// would leave a record naming snapshots that are gone; one waiting
	// for it finds the lock file unlinked and starts over.
	err := d.withRecordLock(ctx, tenant, session, func() error {
		return d.root.RemoveAll(sessionDir(tenant, session))
	})
	if err == nil {
		// The tenant's directory goes with its last session; a Put making
		// another session's directory at the same time keeps it.
		if rerr := d.root.Remove(tenant); rerr == nil {
			err = d.syncDir(".")
		} else {
			err = d.syncDir(tenant)
			if errors.Is(err, fs.ErrNotExist) {
				err = nil
			}
		}
	}
	if err != nil {
		return fmt.Errorf("snapshot %s/%s: delete session: %w", tenant, session, dirErr(err))
	}
	return nil
}

// Sweep implements Store: temporaries (.tmp-*) modified before before.
func (d *Dir) Sweep(ctx context.Context, before time.Time) ([]Leftover, error) {
	var swept []Leftover
	fsys := d.root.FS()
	tenants, err := fs.ReadDir(fsys, ".")
	if err != nil {
		return nil, fmt.Errorf("snapshot dir: sweep: %w", dirErr(err))
	}
	for _, t := range tenants {
		if !t.IsDir() {
			continue
		}
		sessions, err := fs.ReadDir(fsys, t.Name())
		if err != nil {
			return swept, fmt.Errorf("snapshot dir: sweep: %w", dirErr(err))
		}
		for _, s := range sessions {
			if !s.IsDir() {
				continue
			}
			if err := ctx.Err(); err != nil {
				return swept, fmt.Errorf("snapshot dir: sweep: %w", err)
			}
			dir := path.Join(t.Name(), s.Name())
			entries, err := fs.ReadDir(fsys, dir)
			if err != nil {
				return swept, fmt.Errorf("snapshot dir: sweep: %w", dirErr(err))
			}
			for _, e := range entries {
				if !strings.HasPrefix(e.Name(), tmpPrefix) || !e.Type().IsRegular() {
					continue
				}
				fi, err := e.Info()
				if err != nil || !fi.ModTime().Before(before) {
					continue // gone meanwhile, or recent
				}
				p := path.Join(dir, e.Name())
				if err := d.root.Remove(p); err != nil && !errors.Is(err, fs.ErrNotExist) {
					return swept, fmt.Errorf("snapshot dir: sweep: %w", dirErr(err))
				}
				swept = append(swept, Leftover{Name: p, Size: fi.Size(), Modified: fi.ModTime()})
			}
		}
	}
	return swept, nil
}

// dirErr classifies a filesystem error: a full disk or quota is ErrNoSpace,
// a missing file ErrNotFound, anything else (permissions, I/O) ErrUnavailable.
func dirErr(err error) error {
	switch {
	case err == nil:
		return nil
	case errors.Is(err, context.Canceled), errors.Is(err, context.DeadlineExceeded), errors.Is(err, ErrConflict):
		return err
	case errors.Is(err, syscall.ENOSPC), errors.Is(err, syscall.EDQUOT):
		return errdefs.Errorf(errdefs.ErrNoSpace, "%w", err)
	case errors.Is(err, fs.ErrNotExist):
		return errdefs.Errorf(errdefs.ErrNotFound, "%w", err)
	}
	return errdefs.Errorf(errdefs.ErrUnavailable, "%w", err)
}

// recordFile is a session's record in its directory; recordLock the file
// whose flock(2) serializes the writes of the record.
const (
	recordFile = "record"
	recordLock = ".record-lock"
)

// SetRecord implements Store: under the session's record lock, a
// temporary, fsynced, renamed over the record, the directory fsynced.
func (d *Dir) SetRecord(ctx context.Context, tenant, session string, data []byte) error {
	if err := checkRecord(tenant, session, data); err != nil {
		return err
	}
	err := d.withRecordLock(ctx, tenant, session, func() error {
		return d.writeRecord(tenant, session, data)
	})
	if err != nil {
		return fmt.Errorf("snapshot %s/%s: set record: %w", tenant, session, dirErr(err))
	}
	return nil
}

// SwapRecord implements Store: under the session's record lock, the
// record is read and compared with old, then written as SetRecord does.
// Every write of a record takes the lock, so none can land between the
// comparison and the rename. A record that is data already is taken as
// this call's write (Store's rule for a write whose answer was lost; here
// a caller's retry). A crash at any step leaves the record old or
// new, whole (the rename is the commit), a temporary for Sweep, and no
// lock held: the kernel drops a dead process's flock.
func (d *Dir) SwapRecord(ctx context.Context, tenant, session, old string, data []byte) (string, error) {
	if err := checkRecord(tenant, session, data); err != nil {
		return "", err
	}
	fail := func(err error) (string, error) {
		return "", fmt.Errorf("snapshot %s/%s: swap record: %w", tenant, session, dirErr(err))
	}
	p := sessionDir(tenant, session) + "/" + recordFile
	if old != "" {
		// A record that is gone was removed since old: no need to make
		// its directory again for the lock.
		if _, err := d.root.Lstat(p); errors.Is(err, fs.ErrNotExist) {
			return fail(fmt.Errorf("%w: the record at version %.12s is gone", ErrConflict, old))
		}
	}
	err := d.withRecordLock(ctx, tenant, session, func() error {
		cur, err := d.readRecord(p)
		switch {
		case errors.Is(err, errdefs.ErrNotFound):
			if old != "" {
				return fmt.Errorf("%w: the record at version %.12s is gone", ErrConflict, old)
			}
		case err != nil:
			return err
		case bytes.Equal(cur, data):
			return nil // the record is data already: this call's, retried
		case old == "":
			return fmt.Errorf("%w: a record was made meanwhile", ErrConflict)
		case recordVersion(cur) != old:
			return fmt.Errorf("%w: version %.12s, not %.12s", ErrConflict, recordVersion(cur), old)
		}
		return d.writeRecord(tenant, session, data)
	})
	if err != nil {
		return fail(err)
	}
	return recordVersion(data), nil
}

// recordVersion is a Dir record's version: its content's sha256.
func recordVersion(data []byte) string {
	s := sha256.Sum256(data)
	return hex.EncodeToString(s[:])
}

// withRecordLock runs f holding the session's record lock: flock(2) on
// <tenant>/<session>/.record-lock, opened through the root without
// following a symlink there. DeleteSession may unlink the lock file under
// a holder, and a waiter would then hold a lock on a file nobody else
// opens: the lock taken, the file must still be the one at the path, or
// it is taken again. ctx bounds the wait.
func (d *Dir) withRecordLock(ctx context.Context, tenant, session string, f func() error) error {
	p := sessionDir(tenant, session) + "/" + recordLock
	for {
		if err := ctx.Err(); err != nil {
			return err // a directory removed under every try
		}
		if err := d.mkdirs(tenant, session); err != nil {
			return err
		}
		lf, err := d.root.OpenFile(p, os.O_RDWR|os.O_CREATE|syscall.O_NOFOLLOW, 0o600)
		if errors.Is(err, fs.ErrNotExist) {
			continue // its directory went meanwhile (DeleteSession)
		}
		if err != nil {
			return err
		}
		if err := flock(ctx, lf); err != nil {
			lf.Close()
			return err
		}
		held, err1 := lf.Stat()
		now, err2 := d.root.Lstat(p)
		if err1 == nil && err2 == nil && os.SameFile(held, now) {
			defer lf.Close() // closing drops the lock
			return f()
		}
		lf.Close()
		if err1 != nil {
			return err1
		}
		if err2 != nil && !errors.Is(err2, fs.ErrNotExist) {
			return err2
		}
	}
}

// flockPoll is how often a lock held by another is tried again: holders
// keep it for one small write.
const flockPoll = 2 * time.Millisecond

// flock takes f's exclusive flock(2), trying again until ctx ends.
func flock(ctx context.Context, f *os.File) error {
	for wait := flockPoll; ; wait = min(2*wait, 50*time.Millisecond) {
		err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB)
		if err == nil {
			return nil
		}
		if !errors.Is(err, syscall.EWOULDBLOCK) && !errors.Is(err, syscall.EINTR) {
			return &fs.PathError{Op: "flock", Path: f.Name(), Err: err}
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("waiting for the record's lock: %w", ctx.Err())
		case <-time.After(wait):
		}
	}
}

// writeRecord writes the record as a temporary, fsynced, renamed over the
// record, the directory fsynced. The caller holds the record lock.
func (d *Dir) writeRecord(tenant, session string, data []byte) error {
	dir := sessionDir(tenant, session)
	tmp := dir + "/" + tmpPrefix + recordFile + "-" + newID(time.Now())
	f, err := d.root.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return err
	}
	_, err = f.Write(data)
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = d.root.Rename(tmp, dir+"/"+recordFile)
	}
	if err != nil {
		d.root.Remove(tmp)
		return err
	}
	return d.syncDir(dir)
}

// Record implements Store.
func (d *Dir) Record(ctx context.Context, tenant, session string) ([]byte, string, error) {
	if err := checkSession(tenant, session); err != nil {
		return nil, "", err
	}
	data, err := d.readRecord(sessionDir(tenant, session) + "/" + recordFile)
	if err != nil {
		return nil, "", fmt.Errorf("snapshot %s/%s: record: %w", tenant, session, err)
	}
	return data, recordVersion(data), nil
}

// readRecord reads a record file, at most MaxRecord bytes of it.
func (d *Dir) readRecord(p string) ([]byte, error) {
	f, err := d.root.Open(p)
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return nil, errdefs.Errorf(errdefs.ErrNotFound, "no record")
		}
		return nil, dirErr(err)
	}
	defer f.Close()
	data, err := io.ReadAll(io.LimitReader(f, MaxRecord+1))
	if err != nil {
		return nil, dirErr(err)
	}
	if len(data) > MaxRecord {
		return nil, errdefs.Errorf(errdefs.ErrUnavailable, "record %s: more than %d bytes: not one SetRecord wrote", p, MaxRecord)
	}
	return data, nil
}

// Records implements Store.
func (d *Dir) Records(ctx context.Context, tenant string) ([]Record, error) {
	fail := func(err error) ([]Record, error) {
		return nil, fmt.Errorf("snapshot dir: records: %w", err)
	}
	fsys := d.root.FS()
	var tenants []string
	if tenant != "" {
		if err := checkTenant(tenant); err != nil {
			return nil, err
		}
		tenants = []string{tenant}
	} else {
		entries, err := fs.ReadDir(fsys, ".")
		if err != nil {
			return fail(dirErr(err))
		}
		for _, e := range entries {
			if e.IsDir() && checkTenant(e.Name()) == nil {
				tenants = append(tenants, e.Name())
			}
		}
	}
	out := []Record{}
	for _, t := range tenants {
		sessions, err := fs.ReadDir(fsys, t)
		if errors.Is(err, fs.ErrNotExist) {
			continue
		}
		if err != nil {
			return fail(dirErr(err))
		}
		for _, s := range sessions {
			if !s.IsDir() || checkSession(t, s.Name()) != nil {
				continue
			}
			if err := ctx.Err(); err != nil {
				return fail(err)
			}
			data, err := d.readRecord(path.Join(t, s.Name(), recordFile))
			if errors.Is(err, errdefs.ErrNotFound) {
				continue
			}
			if err != nil {
				return fail(err)
			}
			out = append(out, Record{Tenant: t, Session: s.Name(), Data: data})
		}
	}
	return out, nil
}
