package server

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"embed"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net/http"
	"net/url"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/shellbox/shellbox/approval"
	"github.com/shellbox/shellbox/executor"
)

// The console's assets: plain HTML, CSS and JavaScript, no build step.
//
//go:embed ui
var uiFiles embed.FS

// ConsoleConfig configures the operator console served at /ui.
type ConsoleConfig struct {
	// OperatorTokens are sha256:<hex> hashes of operator tokens, which see
	// and decide for every tenant in the console. They are console logins,
	// and read every tenant's GET /v1/usage; the rest of the REST API and
	// /mcp do not take them.
	OperatorTokens []string
	// ReadAudit, if set, returns the last n records of the audit log (of
	// tenant alone unless tenant is ""), oldest first.
	ReadAudit func(n int, tenant string) ([]AuditRecord, error)
	// SessionTTL is how long a console login lasts (default 12 h).
	SessionTTL time.Duration
}

// AuditRecord is one audited policy decision (policies.Record's fields).
type AuditRecord struct {
	Time          time.Time `json:"time"`
	Tenant        string    `json:"tenant"`
	Session       string    `json:"session"`
	Tool          string    `json:"tool"`
	Command       string    `json:"command"`
	Workdir       string    `json:"workdir,omitempty"`
	Background    bool      `json:"background,omitempty"`
	Decision      string    `json:"decision"`
	Rule          string    `json:"rule"`
	Reason        string    `json:"reason,omitempty"`
	Escalation    []string  `json:"escalation,omitempty"`
	Justification string    `json:"justification,omitempty"`
	Approval      string    `json:"approval,omitempty"`
	Approver      string    `json:"approver,omitempty"`
}

// Console bounds.
const (
	consoleCookie      = "shellbox_console"
	maxConsoleSessions = 1024
	maxConsoleBody     = 8 << 10
	maxPeekBytes       = 64 << 10
	maxAuditLines      = 1000
	maxDecidedShown    = 50
)

// cspHeader: everything from this origin, nothing inline, nothing framed.
const cspHeader = "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self'; connect-src 'self'; " +
	"object-src 'none'; base-uri 'none'; form-action 'self'; frame-ancestors 'none'"

// console is the operator console: static pages, and a JSON API of their
// own under /ui/api authenticated by a cookie naming a server-side login.
//
// Why a cookie and not sessionStorage: the cookie is HttpOnly, so script
// (an injection we failed to prevent) cannot read the login, and it holds a
// random login id, not the bearer token, so it is useless elsewhere and
// dies with logout or the process. SameSite=Strict keeps other sites'
// requests from carrying it; every POST also needs the login's CSRF token
// in X-CSRF-Token and, when the browser sends one, a same-origin Origin.
type console struct {
	s         *Server
	cfg       ConsoleConfig
	operators tokens
	started   time.Time
	// failed bounds failed logins, per client.
	failed *failedLogins

	mu     sync.Mutex
	logins map[string]*login
}

// login is one console login.
type login struct {
	operator bool
	tenant   string
	csrf     string
	expires  time.Time
}

func (l *login) label() string {
	if l.operator {
		return "operator"
	}
	return "tenant:" + l.tenant
}

type loginKey struct{}

func newConsole(s *Server, cfg ConsoleConfig, tenantTokens map[[32]byte]string) (*console, error) {
	if cfg.SessionTTL <= 0 {
		cfg.SessionTTL = 12 * time.Hour
	}
	c := &console{s: s, cfg: cfg, started: time.Now(), logins: map[string]*login{},
		failed: newFailedLogins()}
	for _, h := range cfg.OperatorTokens {
		sum, err := parseTokenHash(h)
		if err != nil {
			return nil, fmt.Errorf("server: operator token: %w", err)
		}
		if t, dup := tenantTokens[sum]; dup {
			return nil, fmt.Errorf("server: an operator token hash is also a token of tenant %s", t)
		}
		c.operators = append(c.operators, tokenEntry{sum: sum})
	}
	return c, nil
}

// register adds the console's routes to mux.
func (c *console) register(mux *http.ServeMux) {
	static, _ := fs.Sub(uiFiles, "ui")
	files := http.StripPrefix("/ui/static/", http.FileServerFS(static))
	mux.Handle("GET /ui", c.headers(http.RedirectHandler("/ui/", http.StatusFound)))
	mux.Handle("GET /ui/static/", c.headers(files))
	mux.Handle("/ui/", c.headers(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/ui/" || (r.Method != http.MethodGet && r.Method != http.MethodHead) {
			writeError(w, http.StatusNotFound, "not_found", fmt.Sprintf("no route for %s %s", r.Method, clip(r.URL.Path, 200)))
			return
		}
		b, err := fs.ReadFile(static, "index.html")
		if err != nil {
			writeError(w, http.StatusInternalServerError, "internal", "console assets missing")
			return
		}
		w.Header().Set("Content-Type", "text/html; charset=utf-8")
		w.Write(b)
	})))
	mux.Handle("POST /ui/api/login", c.headers(http.HandlerFunc(c.login)))
	mux.Handle("POST /ui/api/logout", c.headers(c.auth(c.logout)))
	mux.Handle("GET /ui/api/me", c.headers(c.auth(c.me)))
	mux.Handle("GET /ui/api/overview", c.headers(c.auth(c.overview)))
	mux.Handle("GET /ui/api/tasks/{tenant}/{session}/{id}", c.headers(c.auth(c.peek)))
	mux.Handle("GET /ui/api/audit", c.headers(c.auth(c.audit)))
	mux.Handle("GET /ui/api/usage", c.headers(c.auth(c.usage)))
	mux.Handle("POST /ui/api/approvals/{tenant}/{id}/approve", c.headers(c.auth(c.decide(true))))
	mux.Handle("POST /ui/api/approvals/{tenant}/{id}/deny", c.headers(c.auth(c.decide(false))))
}

// headers sets the console's security headers on every answer.
func (c *console) headers(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h := w.Header()
		h.Set("Content-Security-Policy", cspHeader)
		h.Set("X-Content-Type-Options", "nosniff")
		h.Set("X-Frame-Options", "DENY")
		h.Set("Referrer-Policy", "no-referrer")
		h.Set("Cross-Origin-Opener-Policy", "same-origin")
		h.Set("Cross-Origin-Resource-Policy", "same-origin")
		h.Set("Cache-Control", "no-store")
		next.ServeHTTP(w, r)
	})
}

// sameOrigin refuses a state-changing request another site's page made:
// by Sec-Fetch-Site, or by an Origin that is not this host.
func sameOrigin(r *http.Request) bool {
	if sfs := r.Header.Get("Sec-Fetch-Site"); sfs != "" && sfs != "same-origin" && sfs != "none" {
		return false
	}
	if o := r.Header.Get("Origin"); o != "" {
		u, err := url.Parse(o)
		if err != nil || u.Host != r.Host {
			return false
		}
	}
	return true
}

func randomToken() string {
	var b [32]byte
	rand.Read(b[:])
	return fmt.Sprintf("%x", b)
}

// loginRequest is the body of POST /ui/api/login.
type loginRequest struct {
	Token string `json:"token"`
}

func (c *console) login(w http.ResponseWriter, r *http.Request) {
	if !sameOrigin(r) {
		c.s.countError("csrf")
		writeError(w, http.StatusForbidden, "csrf", "cross-site request refused")
		return
	}
	// Only JSON: a cross-site form cannot send it without a preflight.
	if mt, _, _ := strings.Cut(r.Header.Get("Content-Type"), ";"); !strings.EqualFold(strings.TrimSpace(mt), "application/json") {
		writeError(w, http.StatusUnsupportedMediaType, "unsupported_media_type", "send application/json")
		return
	}
	var req loginRequest
	raw, err := io.ReadAll(http.MaxBytesReader(w, r.Body, maxConsoleBody))
	if err != nil || json.Unmarshal(raw, &req) != nil {
		writeError(w, http.StatusBadRequest, "malformed_json", `want {"token": "..."}`)
		return
	}
	tok := strings.TrimSpace(req.Token)
	// Once a client's failures have used its budget, its logins wait,
	// right or wrong: a guess that happens to be right gets no answer of
	// its own. Other clients' logins are not affected.
	client := loginClientOf(r)
	if c.failed.blocked(client) {
		w.Header().Set("Retry-After", "1")
		writeError(w, http.StatusTooManyRequests, "rate_limited", "too many failed logins; wait a moment")
		return
	}
	tenant, isTenant := c.s.tokens.lookup(tok)
	_, isOperator := c.operators.lookup(tok)
	if tok == "" || !isTenant && !isOperator {
		c.s.countError("unauthorized")
		if !c.failed.fail(client) {
			w.Header().Set("Retry-After", "1")
			writeError(w, http.StatusTooManyRequests, "rate_limited", "too many failed logins; wait a moment")
			return
		}
		writeError(w, http.StatusUnauthorized, "unauthorized", "unknown token")
		return
	}
	l := &login{operator: isOperator, tenant: tenant, csrf: randomToken(), expires: time.Now().Add(c.cfg.SessionTTL)}
	if isOperator {
		l.tenant = ""
	}
	id := randomToken()
	c.mu.Lock()
	c.pruneLocked(l.label())
	c.logins[loginID(id)] = l
	c.mu.Unlock()
	setLogAttr(r.Context(), "console", l.label())
	http.SetCookie(w, &http.Cookie{
		Name: consoleCookie, Value: id, Path: "/ui", HttpOnly: true, SameSite: http.SameSiteStrictMode,
		Secure: r.TLS != nil || r.Header.Get("X-Forwarded-Proto") == "https",
		MaxAge: int(c.cfg.SessionTTL / time.Second),
	})
	writeJSON(w, http.StatusOK, c.whoami(l))
}

// loginID is what the store keys a login by: the hash of the cookie value,
// so the store itself holds nothing a browser could present.
func loginID(cookie string) string {
	sum := sha256.Sum256([]byte(cookie))
	return string(sum[:])
}

// pruneLocked drops expired logins and, when the store is full, the one
// closest to expiry.
func (c *console) pruneLocked(principal string) {
	now := time.Now()
	n := 0
	for k, l := range c.logins {
		if now.After(l.expires) {
			delete(c.logins, k)
		} else if l.label() == principal {
			n++
		}
	}
	// A principal's own logins make room for its next one first (at most
	// maxLoginsPerPrincipal each): one tenant logging in again and again
	// cannot push another's, or the operator's, login out.
	evict := func(of string) {
		var oldest string
		var at time.Time
		for k, l := range c.logins {
			if (of == "" || l.label() == of) && (oldest == "" || l.expires.Before(at)) {
				oldest, at = k, l.expires
			}
		}
		delete(c.logins, oldest)
	}
	for ; n >= maxLoginsPerPrincipal; n-- {
		evict(principal)
	}
	for len(c.logins) >= maxConsoleSessions {
		evict("")
	}
}

// maxLoginsPerPrincipal bounds the live logins of one tenant (or of the
// operators together).
const maxLoginsPerPrincipal = 16

// auth resolves the request's login or answers 401; a POST also needs the
// login's CSRF token and a same-origin request.
func (c *console) auth(next http.HandlerFunc) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var l *login
		if ck, err := r.Cookie(consoleCookie); err == nil {
			c.mu.Lock()
			l = c.logins[loginID(ck.Value)]
			if l != nil && time.Now().After(l.expires) {
				delete(c.logins, loginID(ck.Value))
				l = nil
			}
			c.mu.Unlock()
		}
		if l == nil {
			c.s.countError("unauthorized")
			writeError(w, http.StatusUnauthorized, "unauthorized", "not logged in")
			return
		}
		if r.Method != http.MethodGet && r.Method != http.MethodHead {
			got := r.Header.Get("X-CSRF-Token")
			if !sameOrigin(r) || subtle.ConstantTimeCompare([]byte(got), []byte(l.csrf)) != 1 {
				c.s.countError("csrf")
				writeError(w, http.StatusForbidden, "csrf", "missing or wrong X-CSRF-Token, or a cross-site request")
				return
			}
		}
		setLogAttr(r.Context(), "console", l.label())
		next(w, r.WithContext(context.WithValue(r.Context(), loginKey{}, l)))
	})
}

func loginOf(r *http.Request) *login { return r.Context().Value(loginKey{}).(*login) }

func (c *console) logout(w http.ResponseWriter, r *http.Request) {
	if ck, err := r.Cookie(consoleCookie); err == nil {
		c.mu.Lock()
		delete(c.logins, loginID(ck.Value))
		c.mu.Unlock()
	}
	http.SetCookie(w, &http.Cookie{Name: consoleCookie, Value: "", Path: "/ui", HttpOnly: true,
		SameSite: http.SameSiteStrictMode, Secure: r.TLS != nil, MaxAge: -1})
	w.WriteHeader(http.StatusNoContent)
}

// whoAmI is the body of GET /ui/api/me and of a login.
type whoAmI struct {
	Operator bool     `json:"operator"`
	Tenant   string   `json:"tenant,omitempty"`
	Tenants  []string `json:"tenants"`
	// CSRF goes in X-CSRF-Token on every POST. Only same-origin script
	// can read it (no CORS headers are ever sent).
	CSRF string `json:"csrf"`
	// Usage and Audit say whether the server measures usage and keeps an
	// audit log: the pages that read them are shown only then.
	Usage bool `json:"usage"`
	Audit bool `json:"audit"`
}

func (c *console) whoami(l *login) whoAmI {
	return whoAmI{Operator: l.operator, Tenant: l.tenant, Tenants: c.tenantsOf(l), CSRF: l.csrf,
		Usage: c.s.cfg.Usage != nil, Audit: c.cfg.ReadAudit != nil}
}

func (c *console) me(w http.ResponseWriter, r *http.Request) {
	writeJSON(w, http.StatusOK, c.whoami(loginOf(r)))
}

// tenantsOf lists the tenants a login sees: all for an operator.
func (c *console) tenantsOf(l *login) []string {
	if !l.operator {
		return []string{l.tenant}
	}
	out := make([]string, 0, len(c.s.cfg.Tenants))
	for name := range c.s.cfg.Tenants {
		out = append(out, name)
	}
	sort.Strings(out)
	return out
}

func (l *login) sees(tenant string) bool { return l.operator || l.tenant == tenant }

// ConsoleSession is a session as the console shows it.
type ConsoleSession struct {
	SessionInfo
	// LastCall is this server's last tool call of the session (zero when
	// this process has served none).
	LastCall time.Time `json:"lastCall,omitzero"`
}

// Overview is the body of GET /ui/api/overview.
type Overview struct {
	Now       time.Time           `json:"now"`
	Health    ConsoleHealth       `json:"health"`
	Metrics   ConsoleMetrics      `json:"metrics"`
	Sessions  []ConsoleSession    `json:"sessions"`
	Tasks     []TaskInfo          `json:"tasks"`
	Approvals []approval.Approval `json:"approvals"`
	Errors    map[string]string   `json:"errors,omitempty"` // tenant → why its sessions are missing
	// Peek reports whether task output can be shown (the backend reads it
	// without moving the model's cursor); Audit whether an audit log is
	// configured.
	Peek  bool `json:"peek"`
	Audit bool `json:"audit"`
}

// ConsoleHealth is the health summary.
type ConsoleHealth struct {
	Version    string    `json:"version"`
	Ready      bool      `json:"ready"`
	ReadyError string    `json:"readyError,omitempty"`
	Warnings   []string  `json:"warnings,omitempty"`
	Draining   bool      `json:"draining"`
	Started    time.Time `json:"started"`
}

func (c *console) overview(w http.ResponseWriter, r *http.Request) {
	l := loginOf(r)
	ctx, cancel := context.WithTimeout(r.Context(), 5*time.Second)
	defer cancel()
	_, peek := c.s.cfg.Backend.(TaskPeeker)
	ov := Overview{Now: time.Now().UTC(), Sessions: []ConsoleSession{}, Tasks: []TaskInfo{}, Approvals: []approval.Approval{},
		Peek: peek, Audit: c.cfg.ReadAudit != nil}
	ov.Health = ConsoleHealth{Version: c.s.cfg.Version, Draining: c.s.isRetiring(), Started: c.started.UTC()}
	rctx, rcancel := context.WithTimeout(ctx, 2*time.Second)
	if err := c.s.cfg.Backend.Ready(rctx); err != nil {
		ov.Health.ReadyError = err.Error()
	} else {
		ov.Health.Ready = !ov.Health.Draining
	}
	rcancel()
	ov.Health.Warnings = c.s.warnings(l)
	tenants := c.tenantsOf(l)
	ov.Metrics = c.s.metrics.summary(tenants, l.operator)
	var all map[string][]SessionInfo // by tenant, when listed at once
	if lister, ok := c.s.cfg.Backend.(AllSessionsLister); ok && l.operator {
		if list, err := lister.AllSessions(ctx); err == nil {
			all = map[string][]SessionInfo{}
			for _, si := range list {
				all[si.Tenant] = append(all[si.Tenant], si)
			}
		}
	}
	for _, tenant := range tenants {
		var list []SessionInfo
		var err error
		if all != nil {
			list = all[tenant]
		} else {
			list, err = c.s.cfg.Backend.Sessions(ctx, tenant)
		}
		if err != nil {
			if ov.Errors == nil {
				ov.Errors = map[string]string{}
			}
			ov.Errors[tenant] = err.Error()
		}
		for _, si := range list {
			if si.Tenant != tenant {
				continue // the seam promises scoping; checking costs nothing
			}
			ov.Sessions = append(ov.Sessions, ConsoleSession{SessionInfo: si, LastCall: c.s.book.lastCall(tenant, si.ID)})
		}
		ov.Tasks = append(ov.Tasks, c.s.book.list(tenant)...)
		if c.s.cfg.Approvals != nil {
			var pending, decided []approval.Approval
			for _, a := range c.s.cfg.Approvals.List(tenant) {
				switch {
				case a.Tenant != tenant:
				case a.State == approval.Pending:
					pending = append(pending, a)
				default:
					decided = append(decided, a)
				}
			}
			sort.Slice(pending, func(i, j int) bool { return pending[i].Created.Before(pending[j].Created) })
			sort.Slice(decided, func(i, j int) bool { return decided[i].Decided.After(decided[j].Decided) })
			if len(decided) > maxDecidedShown {
				decided = decided[:maxDecidedShown]
			}
			ov.Approvals = append(ov.Approvals, pending...)
			ov.Approvals = append(ov.Approvals, decided...)
		}
	}
	sort.SliceStable(ov.Sessions, func(i, j int) bool {
		a, b := ov.Sessions[i], ov.Sessions[j]
		if a.Tenant != b.Tenant {
			return a.Tenant < b.Tenant
		}
		return a.ID < b.ID
	})
	sort.SliceStable(ov.Approvals, func(i, j int) bool {
		return ov.Approvals[i].State == approval.Pending && ov.Approvals[j].State != approval.Pending
	})
	writeJSON(w, http.StatusOK, ov)
}

func (c *console) peek(w http.ResponseWriter, r *http.Request) {
	l := loginOf(r)
	tenant, session, id := r.PathValue("tenant"), r.PathValue("session"), r.PathValue("id")
	if !l.sees(tenant) {
		// The answer of a task that does not exist.
		writeError(w, http.StatusNotFound, "no_such_task", "no such task: "+clip(id, 128))
		return
	}
	if err := validSession(session); err != nil {
		writeError(w, http.StatusBadRequest, "invalid_session", err.Error())
		return
	}
	p, ok := c.s.cfg.Backend.(TaskPeeker)
	if !ok {
		writeError(w, http.StatusNotImplemented, "unsupported",
			"this backend cannot read a task's output without consuming the model's bash_output cursor; the console shows status only")
		return
	}
	tp, err := p.PeekTask(r.Context(), tenant, session, id)
	if err != nil {
		if errors.Is(err, ErrNoSuchSession) || errors.Is(err, executor.ErrNotFound) || strings.HasPrefix(err.Error(), "no such task") {
			writeError(w, http.StatusNotFound, "no_such_task", err.Error())
			return
		}
		writeErr(w, err)
		return
	}
	tp.Stdout, tp.Stderr = tailOf(tp.Stdout, maxPeekBytes), tailOf(tp.Stderr, maxPeekBytes)
	writeJSON(w, http.StatusOK, tp)
}

// tailOf keeps the last n bytes of s, whole characters only.
func tailOf(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return strings.ToValidUTF8(s[len(s)-n:], "")
}

func (c *console) audit(w http.ResponseWriter, r *http.Request) {
	l := loginOf(r)
	if c.cfg.ReadAudit == nil {
		writeError(w, http.StatusNotImplemented, "unsupported", "no audit log: set policies.dir and audit.file")
		return
	}
	n := 200
	if v := r.URL.Query().Get("n"); v != "" {
		var err error
		if n, err = strconv.Atoi(v); err != nil || n <= 0 {
			writeError(w, http.StatusBadRequest, "invalid", "n: want a positive number")
			return
		}
	}
	n = min(n, maxAuditLines)
	tenant := r.URL.Query().Get("tenant")
	if !l.operator {
		tenant = l.tenant
	}
	recs, err := c.cfg.ReadAudit(n, tenant)
	if err != nil {
		writeError(w, http.StatusServiceUnavailable, "unavailable", err.Error())
		return
	}
	if recs == nil {
		recs = []AuditRecord{}
	}
	writeJSON(w, http.StatusOK, map[string]any{"records": recs})
}

// consoleDecision is the body of POST /ui/api/approvals/{tenant}/{id}/approve|deny.
type consoleDecision struct {
	Reason string `json:"reason"`
}

func (c *console) decide(approve bool) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		l := loginOf(r)
		tenant, id := r.PathValue("tenant"), r.PathValue("id")
		if !l.sees(tenant) || c.s.cfg.Approvals == nil {
			writeErr(w, NoSuchApproval(clip(id, 128)))
			return
		}
		var req consoleDecision
		raw, err := io.ReadAll(http.MaxBytesReader(w, r.Body, maxConsoleBody))
		if err != nil || len(raw) > 0 && json.Unmarshal(raw, &req) != nil {
			writeError(w, http.StatusBadRequest, "malformed_json", `want {"reason": "..."} or nothing`)
			return
		}
		c.s.decide(w, tenant, id, approve, "console:"+l.label(), clip(req.Reason, 1024))
	}
}
