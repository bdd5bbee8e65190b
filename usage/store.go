package usage

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"time"

	"github.com/shellbox/shellbox/confine"
	"github.com/shellbox/shellbox/errdefs"
)

// Store keeps buckets where every process sharing it reads them. Add
// appends: two buckets of the same key are summed by whoever reads them.
// Implementations are safe for concurrent use.
type Store interface {
	// Add appends buckets. ErrInvalid: a bucket's tenant or session does
	// not pass confine.CheckID.
	Add(ctx context.Context, buckets []Bucket) error
	// Query calls fn with each bucket f selects, unsummed, in no set
	// order, as it reads them (a year of a tenant's buckets is never held
	// at once); an error of fn ends it.
	Query(ctx context.Context, f Filter, fn func(Bucket) error) error
}

// Dir is a Store in a host directory: <Path>/<tenant>/<YYYY-MM-DD>.jsonl,
// one JSON bucket a line, appended with O_APPEND (each Add writes its
// lines of one file in one write, so lines of processes appending at once
// never interleave on a local file system).
type Dir struct {
	Path string
}

var _ Store = (*Dir)(nil)

const dayLayout = "2006-01-02"

// Add implements Store.
func (d *Dir) Add(ctx context.Context, buckets []Bucket) error {
	files := map[string]*bytes.Buffer{}
	for _, b := range buckets {
		if err := checkNames(b.Tenant, b.Session); err != nil {
			return err
		}
		p := filepath.Join(d.Path, b.Tenant, b.Hour.UTC().Format(dayLayout)+".jsonl")
		if files[p] == nil {
			files[p] = &bytes.Buffer{}
		}
		line, err := json.Marshal(b)
		if err != nil {
			return err
		}
		files[p].Write(append(line, '\n'))
	}
	for p, buf := range files {
		if err := ctx.Err(); err != nil {
			return err
		}
		if err := os.MkdirAll(filepath.Dir(p), 0o700); err != nil {
			return fmt.Errorf("usage: %w", err)
		}
		f, err := os.OpenFile(p, os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o600)
		if err != nil {
			return fmt.Errorf("usage: %w", err)
		}
		_, werr := f.Write(buf.Bytes())
		if err := errors.Join(werr, f.Close()); err != nil {
			return fmt.Errorf("usage: %s: %w", p, err)
		}
	}
	return nil
}

// maxDays bounds a query's range: the files it opens per tenant.
const maxDays = 400

// Query implements Store. It reads the files of the days f spans; a line
// that does not parse (a write cut by a crash) is skipped.
func (d *Dir) Query(ctx context.Context, f Filter, fn func(Bucket) error) error {
	if !f.To.After(f.From) {
		return nil
	}
	if f.To.Sub(f.From) > maxDays*24*time.Hour {
		return errdefs.Errorf(errdefs.ErrInvalid, "usage: a range of more than %d days", maxDays)
	}
	tenants := []string{f.Tenant}
	if f.Tenant == "" {
		ents, err := os.ReadDir(d.Path)
		if err != nil && !errors.Is(err, fs.ErrNotExist) {
			return fmt.Errorf("usage: %w", err)
		}
		tenants = tenants[:0]
		for _, e := range ents {
			if e.IsDir() && confine.ValidID(e.Name()) {
				tenants = append(tenants, e.Name())
			}
		}
	} else if err := checkNames(f.Tenant, "x"); err != nil {
		return err
	}
	for _, t := range tenants {
		for day := f.From.UTC().Truncate(24 * time.Hour); day.Before(f.To); day = day.Add(24 * time.Hour) {
			if err := ctx.Err(); err != nil {
				return err
			}
			if err := readDay(filepath.Join(d.Path, t, day.Format(dayLayout)+".jsonl"), f, fn); err != nil {
				return err
			}
		}
	}
	return nil
}

func readDay(p string, f Filter, fn func(Bucket) error) error {
	file, err := os.Open(p)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("usage: %w", err)
	}
	defer file.Close()
	return scanBuckets(file, p, f, fn)
}

// scanBuckets calls fn with each Bucket of r (one JSON object a line, at
// most 64 KiB each; a line that does not parse is skipped) that f
// matches; name names r in errors. It is how both stores read their files.
func scanBuckets(r io.Reader, name string, f Filter, fn func(Bucket) error) error {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 4096), 64<<10)
	for sc.Scan() {
		var b Bucket
		if json.Unmarshal(sc.Bytes(), &b) != nil || !f.match(b) {
			continue
		}
		if err := fn(b); err != nil {
			return err
		}
	}
	if err := sc.Err(); err != nil {
		return fmt.Errorf("usage: %s: %w", name, err)
	}
	return nil
}

func checkNames(tenant, session string) error {
	for _, id := range [][2]string{{"tenant", tenant}, {"session", session}} {
		if err := confine.CheckID(id[0], id[1]); err != nil {
			return errdefs.Errorf(errdefs.ErrInvalid, "usage: invalid %v (want %s)", err, confine.IDRule)
		}
	}
	return nil
}

// Memory is a Store in memory, for tests and the local backend. The zero
// value is empty and ready.
type Memory struct {
	mu      sync.Mutex
	buckets []Bucket
}

// Add implements Store.
func (m *Memory) Add(_ context.Context, bs []Bucket) error {
	for _, b := range bs {
		if err := checkNames(b.Tenant, b.Session); err != nil {
			return err
		}
	}
	m.mu.Lock()
	m.buckets = append(m.buckets, bs...)
	m.mu.Unlock()
	return nil
}

// Query implements Store.
func (m *Memory) Query(_ context.Context, f Filter, fn func(Bucket) error) error {
	m.mu.Lock()
	bs := slices.Clone(m.buckets)
	m.mu.Unlock()
	for _, b := range bs {
		if f.match(b) {
			if err := fn(b); err != nil {
				return err
			}
		}
	}
	return nil
}
