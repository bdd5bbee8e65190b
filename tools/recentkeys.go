package tools

import "sync"

// RecentKeys remembers the newest keys, at most a fixed number: adding one
// to a full set forgets the oldest (in the order first added; adding a key
// it holds does not refresh it). Its memory is bounded by that number. It
// is safe for concurrent use; callers that already hold a mutex of their
// own pay an uncontended lock.
//
// Its users drop a second copy of something seen twice: the server's
// completion notices, a Toolset's reported task ends, the kube/events
// relay's announced Events.
type RecentKeys struct {
	mu    sync.Mutex
	keys  map[string]struct{}
	order []string // ring of the keys held, oldest at order[next] once full
	next  int
	full  bool
}

// NewRecentKeys returns an empty RecentKeys that holds at most n keys (at
// least one).
func NewRecentKeys(n int) *RecentKeys {
	n = max(n, 1)
	return &RecentKeys{keys: make(map[string]struct{}, n), order: make([]string, n)}
}

// Add remembers key and reports whether it is new (not held already).
func (r *RecentKeys) Add(key string) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	if _, ok := r.keys[key]; ok {
		return false
	}
	if r.full {
		delete(r.keys, r.order[r.next])
	}
	r.order[r.next] = key
	r.keys[key] = struct{}{}
	r.next++
	if r.next == len(r.order) {
		r.next, r.full = 0, true
	}
	return true
}

// Has reports whether key is held.
func (r *RecentKeys) Has(key string) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	_, ok := r.keys[key]
	return ok
}
