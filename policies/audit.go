package policies

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"
	"unicode/utf8"
)

// Record is one audited decision: one JSON line of the audit log.
type Record struct {
	Time          time.Time `json:"time"`
	Tenant        string    `json:"tenant"`
	Session       string    `json:"session"`
	Tool          string    `json:"tool"`
	Command       string    `json:"command"`
	Workdir       string    `json:"workdir,omitempty"`
	Background    bool      `json:"background,omitempty"`
	Decision      Decision  `json:"decision"`
	Rule          string    `json:"rule"`
	Reason        string    `json:"reason,omitempty"`
	SimpleCommand string    `json:"simpleCommand,omitempty"`
	// Escalation lists the sandbox_permissions asked for, Justification why.
	Escalation    []string `json:"escalation,omitempty"`
	Justification string   `json:"justification,omitempty"`
	// Approval, Approver: set when an ask was decided (or expired).
	Approval string `json:"approval,omitempty"`
	Approver string `json:"approver,omitempty"`
	// Egress is set on the record of one HTTP request a sandbox sent on a
	// connection the egress relay terminated (Tool ToolEgress, Command
	// "METHOD host/path").
	Egress *EgressRequest `json:"egress,omitempty"`
}

// ToolEgress is the Tool of an egress request's record.
const ToolEgress = "egress"

// EgressRequest is what the audit keeps of one relayed HTTP request:
// never a header's value, never the query (either may carry a token).
type EgressRequest struct {
	Host     string `json:"host"`
	Method   string `json:"method"`
	Path     string `json:"path"`
	Status   int    `json:"status"`
	BytesOut int64  `json:"bytesOut"` // the request's body
	BytesIn  int64  `json:"bytesIn"`  // the response's body
	// DurationMs is from the request's head read to its answer sent.
	DurationMs float64 `json:"durationMs"`
	// Credentials are the names of those injected into it.
	Credentials []string `json:"credentials,omitempty"`
	// Rule is where the HTTP rule that decided is written
	// (sandbox.network.http[0].rules[2], or ….default), RuleText the rule
	// itself; unset when the host has no rules.
	Rule     string `json:"rule,omitempty"`
	RuleText string `json:"ruleText,omitempty"`
}

// Bounds of one audit line. Each field is clipped to its bound as JSON
// encodes it (a "<" takes 6 bytes there, "\u003c"), so a record's line
// stays under maxAuditLine whatever its fields hold: the bounds below add up
// to about 30 KiB. A clipped field ends in "…[clipped: N bytes]", N its
// length before. Readers skip (and count) a line longer than maxAuditLine,
// one an older writer or another program may have left, and read on.
const (
	maxAuditLine    = 64 << 10
	maxAuditCommand = 16 << 10
	maxAuditText    = 2 << 10
	maxAuditField   = 256
	maxAuditPerms   = 16
)

func (r Record) clipped() Record {
	r.Tenant, r.Session, r.Tool = clipJSON(r.Tenant, maxAuditField), clipJSON(r.Session, maxAuditField), clipJSON(r.Tool, maxAuditField)
	r.Rule, r.Approval, r.Approver = clipJSON(r.Rule, maxAuditField), clipJSON(r.Approval, maxAuditField), clipJSON(r.Approver, maxAuditField)
	r.Command = clipJSON(r.Command, maxAuditCommand)
	if r.Egress != nil {
		e := *r.Egress
		e.Host, e.Method, e.Path = clipJSON(e.Host, maxAuditField), clipJSON(e.Method, maxAuditField), clipJSON(e.Path, maxAuditText)
		e.Rule, e.RuleText = clipJSON(e.Rule, maxAuditField), clipJSON(e.RuleText, maxAuditText)
		if len(e.Credentials) > maxAuditPerms {
			e.Credentials = e.Credentials[:maxAuditPerms]
		}
		r.Egress = &e
	}
	r.Workdir = clipJSON(r.Workdir, maxAuditText)
	r.Reason, r.SimpleCommand = clipJSON(r.Reason, maxAuditText), clipJSON(r.SimpleCommand, maxAuditText)
	r.Justification = clipJSON(r.Justification, maxAuditText)
	if len(r.Escalation) > maxAuditPerms {
		r.Escalation = r.Escalation[:maxAuditPerms]
	}
	perms := make([]string, len(r.Escalation))
	for i, p := range r.Escalation {
		perms[i] = clipJSON(p, maxAuditField)
	}
	r.Escalation = perms
	return r
}

// clipJSON shortens s so that its JSON string body (quotes aside) takes at
// most n bytes, cutting between characters and marking the cut with
// "…[clipped: N bytes]", N being len(s); s itself when it fits.
func clipJSON(s string, n int) string {
	size := 0
	for i := 0; i < len(s); {
		r, w := utf8.DecodeRuneInString(s[i:])
		size += jsonRuneLen(r, w)
		i += w
	}
	if size <= n {
		return s
	}
	marker := fmt.Sprintf("…[clipped: %d bytes]", len(s))
	keep, used, i := n-len(marker), 0, 0
	for i < len(s) {
		r, w := utf8.DecodeRuneInString(s[i:])
		if used+jsonRuneLen(r, w) > keep {
			break
		}
		used += jsonRuneLen(r, w)
		i += w
	}
	return s[:i] + marker
}

// jsonRuneLen is the bytes encoding/json writes for the rune r, which took
// w bytes of the string: 6 for an escape ("\u003c", "\ufffd" for a byte
// that is not UTF-8), 2 for a short one ("\n", "\"").
func jsonRuneLen(r rune, w int) int {
	switch {
	case r == '"', r == '\\', r == '\b', r == '\f', r == '\n', r == '\r', r == '\t':
		return 2
	case r == utf8.RuneError && w == 1, r < 0x20, r == '<', r == '>', r == '&', r == '\u2028', r == '\u2029':
		return 6
	}
	return w
}

// AuditOptions bound the audit log.
type AuditOptions struct {
	// MaxBytes rotates the log when a line would take it past this size
	// (default 64 MiB).
	MaxBytes int64
	// MaxFiles is how many rotated files are kept: FILE.1 (newest) to
	// FILE.<MaxFiles> (default 5).
	MaxFiles int
}

// Audit appends decisions to a JSON-lines file, one fsync per line, and
// rotates it by size. It is safe for concurrent use.
type Audit struct {
	path string
	opts AuditOptions

	mu   sync.Mutex
	f    *os.File
	size int64
}

// OpenAudit opens (creating) the audit log at path.
func OpenAudit(path string, opts AuditOptions) (*Audit, error) {
	if opts.MaxBytes <= 0 {
		opts.MaxBytes = 64 << 20
	}
	if opts.MaxFiles <= 0 {
		opts.MaxFiles = 5
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o750); err != nil {
		return nil, fmt.Errorf("audit: %w", err)
	}
	a := &Audit{path: path, opts: opts}
	if err := a.open(); err != nil {
		return nil, err
	}
	return a, nil
}

func (a *Audit) open() error {
	f, err := os.OpenFile(a.path, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o640)
	if err != nil {
		return fmt.Errorf("audit: %w", err)
	}
	fi, err := f.Stat()
	if err != nil {
		f.Close()
		return fmt.Errorf("audit: %w", err)
	}
	a.f, a.size = f, fi.Size()
	return nil
}

// Path is the log's file.
func (a *Audit) Path() string { return a.path }

// Write appends r as one line and syncs it to disk before returning.
func (a *Audit) Write(r Record) error {
	line, err := json.Marshal(r.clipped())
	if err != nil {
		return fmt.Errorf("audit: %w", err)
	}
	if len(line) >= maxAuditLine {
		// The field bounds make this unreachable; a line the readers
		// would skip must not be written as if it were recorded.
		return fmt.Errorf("audit: a record of %d bytes, over the %d-byte line bound", len(line), maxAuditLine)
	}
	line = append(line, '\n')
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.f == nil {
		return errors.New("audit: closed")
	}
	if a.size > 0 && a.size+int64(len(line)) > a.opts.MaxBytes {
		if err := a.rotate(); err != nil {
			return err
		}
	}
	n, err := a.f.Write(line)
	a.size += int64(n)
	if err != nil {
		return fmt.Errorf("audit: %w", err)
	}
	if err := a.f.Sync(); err != nil {
		return fmt.Errorf("audit: %w", err)
	}
	return nil
}

// rotate shifts FILE.i to FILE.i+1 (dropping the oldest) and FILE to
// FILE.1, then starts a new FILE.
func (a *Audit) rotate() error {
	if err := a.f.Close(); err != nil {
		return fmt.Errorf("audit: rotate: %w", err)
	}
	a.f = nil
	_ = os.Remove(fmt.Sprintf("%s.%d", a.path, a.opts.MaxFiles))
	for i := a.opts.MaxFiles - 1; i >= 1; i-- {
		from := fmt.Sprintf("%s.%d", a.path, i)
		if err := os.Rename(from, fmt.Sprintf("%s.%d", a.path, i+1)); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return fmt.Errorf("audit: rotate: %w", err)
		}
	}
	if err := os.Rename(a.path, a.path+".1"); err != nil {
		return fmt.Errorf("audit: rotate: %w", err)
	}
	if err := a.open(); err != nil {
		return err
	}
	// The renames must be durable too, or a crash could lose a file.
	if d, err := os.Open(filepath.Dir(a.path)); err == nil {
		_ = d.Sync()
		d.Close()
	}
	return nil
}

// Close closes the log.
func (a *Audit) Close() error {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.f == nil {
		return nil
	}
	err := a.f.Close()
	a.f = nil
	return err
}

// ReadAudit returns the last n records of the audit log at path (rotated
// files included, oldest first), of tenant only if tenant is not empty.
// Lines that are not records (garbled, or longer than the line bound) are
// skipped and counted in skipped; only an I/O error fails the read.
func ReadAudit(path string, n int, tenant string) (recs []Record, skipped int, err error) {
	if n <= 0 {
		return nil, 0, nil
	}
	files, err := auditFiles(path)
	if err != nil {
		return nil, 0, err
	}
	ring := make([]Record, 0, min(n, 1024))
	start := 0 // ring is full once len == n; start is its oldest
	for _, file := range files {
		f, err := os.Open(file)
		if err != nil {
			if errors.Is(err, fs.ErrNotExist) {
				continue // rotated away while we read
			}
			return nil, skipped, fmt.Errorf("audit: %w", err)
		}
		long, err := eachLine(bufio.NewReaderSize(f, maxAuditLine+1), func(line []byte) {
			var r Record
			if err := json.Unmarshal(line, &r); err != nil {
				skipped++
				return
			}
			if tenant != "" && r.Tenant != tenant {
				return
			}
			if len(ring) < n {
				ring = append(ring, r)
			} else {
				ring[start] = r
				start = (start + 1) % n
			}
		})
		skipped += long
		f.Close()
		if err != nil {
			return nil, skipped, fmt.Errorf("audit: %s: %w", file, err)
		}
	}
	return append(ring[start:], ring[:start]...), skipped, nil
}

// auditFiles lists path's rotated files oldest first, then path.
func auditFiles(path string) ([]string, error) {
	matches, err := filepath.Glob(globEscape(path) + ".*")
	if err != nil {
		return nil, fmt.Errorf("audit: %w", err)
	}
	type rotated struct {
		file string
		n    int
	}
	var rs []rotated
	for _, m := range matches {
		if k, err := strconv.Atoi(strings.TrimPrefix(m, path+".")); err == nil && k > 0 {
			rs = append(rs, rotated{m, k})
		}
	}
	slices.SortFunc(rs, func(a, b rotated) int { return b.n - a.n })
	out := make([]string, 0, len(rs)+1)
	for _, r := range rs {
		out = append(out, r.file)
	}
	if _, err := os.Stat(path); err == nil {
		out = append(out, path)
	} else if len(out) == 0 {
		return nil, fmt.Errorf("audit: %w", err)
	}
	return out, nil
}

func globEscape(s string) string {
	var b strings.Builder
	for _, r := range s {
		if strings.ContainsRune(`*?[\`, r) {
			b.WriteByte('\\')
		}
		b.WriteRune(r)
	}
	return b.String()
}

// eachLine calls fn with each non-blank line r holds, without its newline,
// the last one even if unterminated. A line longer than r's buffer is not
// passed: it is read past and counted in long. Only a read error stops it.
func eachLine(r *bufio.Reader, fn func(line []byte)) (long int, err error) {
	for {
		line, err := r.ReadSlice('\n')
		if errors.Is(err, bufio.ErrBufferFull) {
			long++
			for errors.Is(err, bufio.ErrBufferFull) {
				_, err = r.ReadSlice('\n')
			}
			line = nil
		}
		if line = bytes.TrimSpace(line); len(line) > 0 {
			fn(line)
		}
		if errors.Is(err, io.EOF) {
			return long, nil
		}
		if err != nil {
			return long, err
		}
	}
}
