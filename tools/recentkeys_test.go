package tools

import (
	"fmt"
	"sync"
	"testing"
)

func TestRecentKeys(t *testing.T) {
	r := NewRecentKeys(3)
	for _, k := range []string{"a", "b", "c"} {
		if !r.Add(k) {
			t.Fatalf("Add(%q) of a new key reported false", k)
		}
	}
	if r.Add("a") || r.Add("c") {
		t.Fatal("re-adding a held key reported it new")
	}
	// Re-adding did not refresh "a": it is still the oldest, out first.
	if !r.Add("d") {
		t.Fatal(`Add("d") reported false`)
	}
	if r.Has("a") {
		t.Fatal(`"a" held after a fourth key in a set of 3`)
	}
	for _, k := range []string{"b", "c", "d"} {
		if !r.Has(k) {
			t.Fatalf("%q forgotten, want held", k)
		}
	}
	// An evicted key is new again, and pushes out the next oldest.
	if !r.Add("a") || r.Has("b") || !r.Has("c") {
		t.Fatalf("after re-adding an evicted key: a %v b %v c %v, want true false true", r.Has("a"), r.Has("b"), r.Has("c"))
	}
}

func TestRecentKeysBound(t *testing.T) {
	const n = 16
	r := NewRecentKeys(n)
	for i := range 10 * n {
		r.Add(fmt.Sprint(i))
		if len(r.keys) > n {
			t.Fatalf("%d keys held after %d adds, bound %d", len(r.keys), i+1, n)
		}
	}
	for i := range 10 * n {
		if want := i >= 9*n; r.Has(fmt.Sprint(i)) != want {
			t.Fatalf("Has(%d) = %v, want %v (the newest %d held)", i, !want, want, n)
		}
	}
	// The empty key is a key like any other: evicted in its turn.
	r = NewRecentKeys(2)
	r.Add("")
	r.Add("x")
	r.Add("y")
	if r.Has("") || len(r.keys) != 2 {
		t.Fatalf(`"" held %v with %d keys, want evicted with 2`, r.Has(""), len(r.keys))
	}
	// A size below one holds one key.
	r = NewRecentKeys(0)
	if !r.Add("a") || !r.Add("b") || r.Has("a") || !r.Has("b") {
		t.Fatal("NewRecentKeys(0) does not hold the newest key")
	}
}

func TestRecentKeysConcurrent(t *testing.T) {
	r := NewRecentKeys(64)
	var wg sync.WaitGroup
	news := make([]int, 4)
	for g := range news {
		wg.Go(func() {
			for i := range 32 {
				if r.Add(fmt.Sprint(i)) {
					news[g]++
				}
				r.Has(fmt.Sprint(i))
			}
		})
	}
	wg.Wait()
	total := 0
	for _, n := range news {
		total += n
	}
	if total != 32 {
		t.Fatalf("%d adds reported new, want each of 32 keys once", total)
	}
}
