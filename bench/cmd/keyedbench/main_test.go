package main

import (
	"strings"
	"testing"

	"github.com/smoothrate/ratelimit/bench/internal/report"
)

const round = `BenchmarkKeyed/ours-gcra-2     	 1000000	        50.0 ns/op	       0 B/op	       0 allocs/op
BenchmarkKeyed/sethvargo-2     	 1000000	       200.0 ns/op	       0 B/op	       0 allocs/op
BenchmarkKeyed/throttled-2     	 1000000	       300.0 ns/op	      32 B/op	       2 allocs/op
BenchmarkKeyedParallel/ours-gcra-2   	 1000000	        90.0 ns/op	       0 B/op	       0 allocs/op
BenchmarkKeyedParallel/sethvargo-2   	 1000000	       100.0 ns/op	       0 B/op	       0 allocs/op
BenchmarkKeyed/floor-hash-2     	 1000000	        70.0 ns/op	       0 B/op	       0 allocs/op
BenchmarkKeyed/floor-map-2     	 1000000	       120.0 ns/op	       0 B/op	       0 allocs/op
BenchmarkKeyedAlternating/httprate/procs=1-2   	  500000	       750.0 ns/op	       300.0 ours-ns/op	       450.0 peer-ns/op	         0.6667 ratio	       0 B/op	       0 allocs/op
BenchmarkKeyedAlternating/sethvargo/procs=2-2   	  500000	       400.0 ns/op	       130.0 ours-ns/op	       270.0 peer-ns/op	         0.4815 ratio	       0 B/op	       0 allocs/op
`

func TestWrite(t *testing.T) {
	r, order := report.ParseRound([]byte(round), false)
	other := report.Round{}
	for name, m := range r {
		other[name] = m
	}
	// A second round whose ratio in turns differs: the table shows the
	// median and the range.
	other["KeyedAlternating/httprate/procs=1"] = map[string]float64{"ns/op": 700, "ours-ns/op": 280, "peer-ns/op": 420, "ratio": 0.6}
	var b strings.Builder
	missed := write(&b, []report.Round{r, r, other}, order)
	out := b.String()
	// Serial: 50/200 = 0.25 against the fastest peer, met; parallel:
	// 90/100 = 0.9, missed.
	if missed != 1 {
		t.Errorf("missed = %d, want 1\n%s", missed, out)
	}
	for _, want := range report.Missing(out,
		"| Keyed: ours-gcra / sethvargo | 0.25 | 0.25–0.25 | ≤ 0.5 (fastest peer) | yes |",
		"| Keyed: ours-gcra / throttled | 0.17 | 0.17–0.17 |  |  |",
		"| KeyedParallel: ours-gcra / sethvargo | 0.90 | 0.90–0.90 | ≤ 0.5 (fastest peer) | **no** |",
		"| Keyed: ours-gcra allocs/op | 0 | | 0 | yes |",
		"| Keyed/throttled | 300 | 300 | 300 | 32 | 2 |",
		"| Median ns/op | floor-hash | floor-map | floor-map64 | ours-gcra | goal (½ fastest peer) |",
		"| Keyed | 70 | 120 | – | 50 | 100 |",
		"| KeyedParallel | – | – | – | 90 | 50 |",
		"| In turns | ours ns/op | peer ns/op | ratio (median of rounds) | per-round range |",
		"| Keyed: ours-gcra / httprate | 300 | 450 | 0.67 | 0.60–0.67 |",
		"| KeyedParallel: ours-gcra / sethvargo | 130 | 270 | 0.48 | 0.48–0.48 |",
	) {
		t.Errorf("output lacks %q:\n%s", want, out)
	}
	if strings.Contains(out, "| KeyedAlternating/") {
		t.Errorf("the benchmark in turns is listed with the others (its ns/op is of two decisions):\n%s", out)
	}
}
