package secrets

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"
)

// ErrNotSet is the class of a reference to a secret no source has.
var ErrNotSet = errors.New("secret not set")

// MaxValueBytes bounds a secret's value: it is sent in a header.
const MaxValueBytes = 16 << 10

// EnvPrefix is the prefix of the server's variables that are secrets:
// github-token is SHELLBOX_SECRET_GITHUB_TOKEN (upper case, '.' and '-' as
// '_'). Only these: a policy must not be able to send the server's other
// variables (its cloud credentials) to a host it names.
const EnvPrefix = "SHELLBOX_SECRET_"

// Source resolves a secret by name.
type Source interface {
	// Secret returns the value of name; an error (ErrNotSet, wrapped, or a
	// read failure) names the secret and where it looked, never a value.
	Secret(name string) (string, error)
}

// Store resolves secrets from a directory and the server's environment, in
// that order. A directory file is read again when it changes (its size,
// modification time or inode: a Kubernetes Secret volume swaps a symlink),
// so a rotated secret applies to the next request. Safe for concurrent
// use.
type Store struct {
	dir    string
	lookup func(string) (string, bool)

	mu    sync.Mutex
	cache map[string]cached // by name; at most one entry per file of dir
}

type cached struct {
	size  int64
	mtime time.Time
	ino   uint64
	value string
}

// NewStore returns a Store over dir ("" for none) and lookupEnv (nil: the
// process's environment, os.LookupEnv).
func NewStore(dir string, lookupEnv func(string) (string, bool)) *Store {
	if lookupEnv == nil {
		lookupEnv = os.LookupEnv
	}
	return &Store{dir: dir, lookup: lookupEnv, cache: map[string]cached{}}
}

// EnvName is the server variable that holds secret name.
func EnvName(name string) string {
	return EnvPrefix + strings.Map(func(r rune) rune {
		switch {
		case r == '.' || r == '-':
			return '_'
		case r >= 'a' && r <= 'z':
			return r - 'a' + 'A'
		}
		return r
	}, name)
}

// Secret implements Source.
func (s *Store) Secret(name string) (string, error) {
	if !ValidName(name) {
		return "", fmt.Errorf("secret %q: not a secret name: %w", name, ErrNotSet)
	}
	if s.dir != "" {
		v, ok, err := s.file(name)
		if err != nil {
			return "", err
		}
		if ok {
			return v, nil
		}
	}
	if v, ok := s.lookup(EnvName(name)); ok {
		if err := checkValue(v); err != nil {
			return "", fmt.Errorf("secret %q (%s): %w", name, EnvName(name), err)
		}
		return v, nil
	}
	where := "$" + EnvName(name)
	if s.dir != "" {
		where = filepath.Join(s.dir, name) + " nor " + where
	}
	return "", fmt.Errorf("secret %q: neither %s is set: %w", name, where, ErrNotSet)
}

// file reads dir/name, through the cache; ok false when there is no such
// file.
func (s *Store) file(name string) (string, bool, error) {
	p := filepath.Join(s.dir, name)
	fi, err := os.Stat(p)
	if errors.Is(err, os.ErrNotExist) {
		s.mu.Lock()
		delete(s.cache, name)
		s.mu.Unlock()
		return "", false, nil
	}
	if err != nil {
		return "", false, fmt.Errorf("secret %q: %w", name, err)
	}
	if !fi.Mode().IsRegular() {
		return "", false, fmt.Errorf("secret %q: %s is not a regular file", name, p)
	}
	key := cached{size: fi.Size(), mtime: fi.ModTime(), ino: inode(fi)}
	s.mu.Lock()
	c, ok := s.cache[name]
	s.mu.Unlock()
	if ok && c.size == key.size && c.mtime.Equal(key.mtime) && c.ino == key.ino {
		return c.value, true, nil
	}
	f, err := os.Open(p)
	if err != nil {
		return "", false, fmt.Errorf("secret %q: %w", name, err)
	}
	defer f.Close()
	b, err := io.ReadAll(io.LimitReader(f, MaxValueBytes+2))
	if err != nil {
		return "", false, fmt.Errorf("secret %q: reading %s: %w", name, p, err)
	}
	// A file written with echo or an editor ends with a newline that is
	// not part of the secret.
	b = bytes.TrimSuffix(b, []byte("\n"))
	b = bytes.TrimSuffix(b, []byte("\r"))
	v := string(b)
	if err := checkValue(v); err != nil {
		return "", false, fmt.Errorf("secret %q (%s): %w", name, p, err)
	}
	key.value = v
	s.mu.Lock()
	s.cache[name] = key
	s.mu.Unlock()
	return v, true, nil
}

// checkValue refuses what cannot go in a header. The error says what is
// wrong, not where (that would show part of the value).
func checkValue(v string) error {
	switch {
	case v == "":
		return errors.New("the value is empty")
	case len(v) > MaxValueBytes:
		return fmt.Errorf("the value is over %d bytes", MaxValueBytes)
	case strings.ContainsFunc(v, func(r rune) bool { return r < 0x20 && r != '\t' || r == 0x7f }):
		return errors.New("the value holds a control character (CR, LF, NUL, ...), which a header cannot carry")
	}
	return nil
}
