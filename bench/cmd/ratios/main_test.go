package main

import (
	"slices"
	"strings"
	"testing"

	"github.com/smoothrate/ratelimit/bench/internal/report"
)

// round is one round of a -cpu 1,2 run as go test prints it: a name ends
// in -2 at GOMAXPROCS 2 and in nothing at 1 (the serial benchmarks of
// this round ran at 1 only).
const round = `BenchmarkGranted/ours        	 4525509	        50.0 ns/op	       0 B/op	       0 allocs/op
BenchmarkGranted/xrate       	 2275027	       100.0 ns/op	       0 B/op	       0 allocs/op
BenchmarkGranted/uber        	 2275027	        50.0 ns/op	       0 B/op	       0 allocs/op
BenchmarkGrantedParallel/ours  	 1561027	       60.0 ns/op	       0 B/op	       0 allocs/op
BenchmarkGrantedParallel/ours-2	 1561027	       40.0 ns/op	       8 B/op	       1 allocs/op
BenchmarkGrantedParallel/uber  	 1561027	       60.0 ns/op	       0 B/op	       0 allocs/op
BenchmarkGrantedParallel/uber-2	 1561027	       50.0 ns/op	       0 B/op	       0 allocs/op
`

func TestWriteGoalsPerCPU(t *testing.T) {
	r, order := report.ParseRound([]byte(round), true)
	var b strings.Builder
	missed := write(&b, []report.Round{r, r}, order, suffixes("1,2"))
	out := b.String()
	// Granted: ours/xrate 0.5 (goal 0.3, missed), ours/uber 1.0 (goal 0.5,
	// missed); parallel ours/uber 1.0 at cpu=1 (goal 1.0, met) and 0.8 at
	// cpu=2 (met).
	if missed != 2 {
		t.Errorf("missed = %d, want 2\n%s", missed, out)
	}
	for _, want := range report.Missing(out,
		"| Granted/ours (cpu=1) / Granted/xrate (cpu=1) | 0.50 | 0.50–0.50 | ≤ 0.3 | **no** |",
		"| Granted/ours (cpu=1) / Granted/uber (cpu=1) | 1.00 | 1.00–1.00 | ≤ 0.5 | **no** |",
		"| GrantedParallel/ours (cpu=1) / GrantedParallel/uber (cpu=1) | 1.00 | 1.00–1.00 | ≤ 1 | yes |",
		"| GrantedParallel/ours (cpu=2) / GrantedParallel/uber (cpu=2) | 0.80 | 0.80–0.80 | ≤ 1 | yes |",
		"| GrantedParallel/ours (cpu=2) | 40 | 40 | 40 | 8 | 1 |",
		"2 goal(s) missed.",
	) {
		t.Errorf("output lacks %q:\n%s", want, out)
	}
}

func TestWriteWithoutCPUList(t *testing.T) {
	r, order := report.ParseRound([]byte(round), false)
	var b strings.Builder
	write(&b, []report.Round{r}, order, suffixes(""))
	if want := "| GrantedParallel/ours / GrantedParallel/uber | 0.80 | 0.80–0.80 | ≤ 1 | yes |"; !strings.Contains(b.String(), want) {
		t.Errorf("output lacks %q:\n%s", want, b.String())
	}
}

func TestSuffixes(t *testing.T) {
	if got := suffixes(""); !slices.Equal(got, []string{""}) {
		t.Errorf(`suffixes("") = %q`, got)
	}
	if got, want := suffixes("1, 2,4"), []string{" (cpu=1)", " (cpu=2)", " (cpu=4)"}; !slices.Equal(got, want) {
		t.Errorf(`suffixes("1, 2,4") = %q, want %q`, got, want)
	}
}
