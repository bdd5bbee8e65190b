package policies

import (
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"
)

// policy200 is a policy of 200 rules of every matcher kind.
func policy200(tb testing.TB) *Policy {
	var b strings.Builder
	b.WriteString("default: allow\nunparseable: ask\nrules:\n")
	for i := range 200 {
		fmt.Fprintf(&b, "  - name: r%d\n    decision: %s\n    match:\n", i, []string{"allow", "ask", "deny"}[i%3])
		switch i % 5 {
		case 0:
			fmt.Fprintf(&b, "      command: [tool%d, other%d]\n", i, i)
		case 1:
			fmt.Fprintf(&b, "      prefix: [\"git sub%d\"]\n", i)
		case 2:
			fmt.Fprintf(&b, "      command: [cmd%d]\n      args: [\"--flag%d*\", \"*.ext%d\"]\n", i, i, i)
		case 3:
			fmt.Fprintf(&b, "      argsRegex: ['^--opt%d=[0-9]+$']\n", i)
		case 4:
			fmt.Fprintf(&b, "      redirect: [\"/etc/dir%d/*\"]\n", i)
		}
	}
	p, err := Parse("/p/bench.yaml", []byte(b.String()))
	if err != nil {
		tb.Fatal(err)
	}
	return p
}

var benchCommands = []string{
	"ls -la",
	"go test ./... 2>&1 | tail -20",
	"git status && git diff --stat",
	"find . -name '*.go' -exec grep -l TODO {} + | xargs wc -l",
	`bash -c "cd src && make -j4 && ./run --opt3=5 > /tmp/out.log"`,
	"for f in $(ls); do echo \"$f\"; done; cat <<EOF\nhello\nEOF",
}

// BenchmarkDecide200Rules: decision latency of a 200-rule policy (parse,
// unwrap, match, combine). Target: p99 under 100µs.
func BenchmarkDecide200Rules(b *testing.B) {
	p := policy200(b)
	if len(p.rules) != 200 {
		b.Fatalf("%d rules", len(p.rules))
	}
	lat := make([]time.Duration, 0, b.N)
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; b.Loop(); i++ {
		c := call{tool: "bash", command: benchCommands[i%len(benchCommands)]}
		t0 := time.Now()
		p.evaluate(c)
		lat = append(lat, time.Since(t0))
	}
	b.StopTimer()
	reportPercentiles(b, lat)
}

func reportPercentiles(b *testing.B, lat []time.Duration) {
	if len(lat) == 0 {
		return
	}
	slices.Sort(lat)
	at := func(q float64) float64 { return float64(lat[int(q*float64(len(lat)-1))].Nanoseconds()) / 1000 }
	b.ReportMetric(at(0.50), "p50-µs")
	b.ReportMetric(at(0.99), "p99-µs")
}

var benchPwshCommands = []string{
	"Get-ChildItem -Recurse -Filter *.cs | Select-String TODO | Select-Object -First 10",
	"dotnet test 2>&1 | Out-String",
	"git status; git diff --stat",
	"if (Test-Path ./out) { Remove-Item ./out -Recurse -Force }",
	`$files = gci src; foreach ($f in $files) { Write-Host "$($f.Name): $($f.Length)" }`,
	"iex 'npm run build' ; pwsh -c 'Invoke-Pester ./tests -Output Detailed'",
}

// BenchmarkDecidePwsh200Rules: the same for pwsh commands. Target: p99
// under 100µs.
func BenchmarkDecidePwsh200Rules(b *testing.B) {
	p := policy200(b)
	p.Tools.Pwsh = true
	lat := make([]time.Duration, 0, b.N)
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; b.Loop(); i++ {
		c := call{tool: "pwsh", command: benchPwshCommands[i%len(benchPwshCommands)]}
		t0 := time.Now()
		if v := p.evaluate(c); v.Rule == RuleUnparseable {
			b.Fatalf("%q: %s", c.command, v.Reason)
		}
		lat = append(lat, time.Since(t0))
	}
	b.StopTimer()
	reportPercentiles(b, lat)
}
