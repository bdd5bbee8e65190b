package server

import (
	"container/list"
	"net/http"
	"net/netip"
	"sync"
	"time"

	"golang.org/x/time/rate"
)

// Bounds of failed console logins: each client may fail loginFailRate
// times a second, loginFailBurst at once; the table keeps maxLoginClients
// clients, about 200 bytes each.
const (
	loginFailRate   = 5
	loginFailBurst  = 20
	maxLoginClients = 4096
)

// failedLogins limits failed console logins per client, so that one
// client's guessing never delays or refuses another's login. A client is
// the connection's remote address (the server has no notion of a trusted
// proxy, so X-Forwarded-For, which any client can write, is not read): an
// IPv4 address, or an IPv6 /64, the block one host is usually given, so
// that walking through one's own /64 is still one client. Clients behind
// one NAT, or one proxy, share a budget.
//
// The table is an LRU of maxLoginClients clients: a new client pushes out
// the one whose last failure is oldest. A client that keeps failing stays
// in it; one pushed out comes back with a full burst, so spreading guesses
// over more than maxLoginClients clients buys maxLoginClients*burst extra
// guesses at most per cycle — against 256-bit tokens, nothing.
type failedLogins struct {
	now func() time.Time // time.Now; a test's clock

	mu      sync.Mutex
	clients map[netip.Prefix]*list.Element // of *loginClient
	lru     list.List                      // front: the latest failure
}

type loginClient struct {
	key netip.Prefix
	lim *rate.Limiter
}

func newFailedLogins() *failedLogins {
	return &failedLogins{now: time.Now, clients: map[netip.Prefix]*list.Element{}}
}

// blocked reports whether client has used its failure budget: then its
// logins wait, right or wrong, so a guess that happens to be right gets no
// answer of its own.
func (f *failedLogins) blocked(client netip.Prefix) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	e := f.clients[client]
	return e != nil && e.Value.(*loginClient).lim.TokensAt(f.now()) < 1
}

// fail records a failed login of client and reports whether it was within
// the client's budget.
func (f *failedLogins) fail(client netip.Prefix) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	e := f.clients[client]
	if e == nil {
		for f.lru.Len() >= maxLoginClients {
			old := f.lru.Back()
			f.lru.Remove(old)
			delete(f.clients, old.Value.(*loginClient).key)
		}
		e = f.lru.PushFront(&loginClient{key: client, lim: rate.NewLimiter(loginFailRate, loginFailBurst)})
		f.clients[client] = e
	} else {
		f.lru.MoveToFront(e)
	}
	return e.Value.(*loginClient).lim.AllowN(f.now(), 1)
}

// len is how many clients the table holds.
func (f *failedLogins) len() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.lru.Len()
}

// loginClientOf is the client r's failed logins count against: its
// remote IPv4 address, or its IPv6 /64. A remote address that is not an
// IP (a Unix socket) is one client, the zero Prefix.
func loginClientOf(r *http.Request) netip.Prefix {
	ap, err := netip.ParseAddrPort(r.RemoteAddr)
	if err != nil {
		return netip.Prefix{}
	}
	a := ap.Addr().Unmap().WithZone("")
	bits := 32
	if a.Is6() {
		bits = 64
	}
	p, _ := a.Prefix(bits)
	return p
}
