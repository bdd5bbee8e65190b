package sandbox_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/shellbox/shellbox/executor/executortest"
	"github.com/shellbox/shellbox/sandbox"
)

// BenchmarkClaim is the Manager's own share of a claim from a warm pool,
// on the in-memory runtime: the lookup of an existing sandbox, the claim
// file (DirClaims on the test's temporary directory), the bookkeeping.
// Engines add their Get and the agent's check (BenchmarkWarmPool in
// executor/sandboxed).
//
//	go test ./sandbox/ -run '^$' -bench Claim -benchtime 2000x
func BenchmarkClaim(b *testing.B) {
	f := newFake()
	c, err := sandbox.NewDirClaims(b.TempDir())
	if err != nil {
		b.Fatal(err)
	}
	m, err := sandbox.NewManager(sandbox.Config{Runtime: f, Owner: "srv", Claims: c})
	if err != nil {
		b.Fatal(err)
	}
	tmpl, err := sandbox.NewSpec("acme", "t", sandbox.WithImage("img"))
	if err != nil {
		b.Fatal(err)
	}
	targets := []sandbox.PoolTarget{{Template: tmpl, Size: 1}}
	lat := make([]time.Duration, 0, b.N)
	i := 0
	for b.Loop() {
		b.StopTimer()
		if _, err := m.Fill(context.Background(), targets); err != nil {
			b.Fatal(err)
		}
		s := tmpl
		s.Session = fmt.Sprintf("s%d", i)
		i++
		b.StartTimer()
		t0 := time.Now()
		sb, err := m.Ensure(context.Background(), s)
		lat = append(lat, time.Since(t0))
		if err != nil || sb.PoolName == "" {
			b.Fatalf("%+v, %v", sb, err)
		}
	}
	executortest.ReportPercentiles(b, lat)
}
