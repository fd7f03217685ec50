package main

import (
	"slices"
	"testing"

	"github.com/smoothrate/ratelimit/bench/internal/report"
)

const sampleOutput = `goos: linux
goarch: amd64
pkg: github.com/smoothrate/ratelimit/bench
cpu: AMD EPYC
BenchmarkGranted/ours-2           	 4525509	        53.17 ns/op	       0 B/op	       0 allocs/op
BenchmarkGranted/xrate-2          	 2275027	       111.2 ns/op	       0 B/op	       0 allocs/op
BenchmarkReserve/xrate-2          	 1314907	       187.0 ns/op	      64 B/op	       1 allocs/op
BenchmarkGrantedParallel/ours     	 1561027	       167.1 ns/op	       0 B/op	       0 allocs/op
BenchmarkGrantedParallel/ours-4   	 1561027	       99.5 ns/op	       0 B/op	       0 allocs/op
PASS
ok  	github.com/smoothrate/ratelimit/bench	6.959s
`

func TestParse(t *testing.T) {
	res, names, err := parse([]byte(sampleOutput), false)
	if err != nil {
		t.Fatal(err)
	}
	wantNames := []string{"Granted/ours", "Granted/xrate", "Reserve/xrate", "GrantedParallel/ours"}
	if !slices.Equal(names, wantNames) {
		t.Errorf("names = %q, want %q", names, wantNames)
	}
	if got := res["Reserve/xrate"]; got != (sample{187.0, 64, 1}) {
		t.Errorf("Reserve/xrate = %+v, want {187 64 1}", got)
	}
	if got := res["Granted/ours"].ns; got != 53.17 {
		t.Errorf("Granted/ours ns = %v, want 53.17", got)
	}
}

func TestParseKeepProcs(t *testing.T) {
	res, _, err := parse([]byte(sampleOutput), true)
	if err != nil {
		t.Fatal(err)
	}
	if got := res["GrantedParallel/ours (cpu=1)"].ns; got != 167.1 {
		t.Errorf("cpu=1 ns = %v, want 167.1", got)
	}
	if got := res["GrantedParallel/ours (cpu=4)"].ns; got != 99.5 {
		t.Errorf("cpu=4 ns = %v, want 99.5", got)
	}
}

func TestParseEmpty(t *testing.T) {
	if _, _, err := parse([]byte("PASS\n"), false); err == nil {
		t.Error("parse of an output without benchmarks succeeded")
	}
}

// The medians and ratios themselves are tested in internal/report; this
// checks that the metrics pick the right figure of a sample and report a
// benchmark missing from a round as missing.
func TestMetrics(t *testing.T) {
	rounds := []map[string]sample{
		{"a": {ns: 50, bytes: 8, allocs: 1}, "b": {ns: 100}},
		{"a": {ns: 60, bytes: 16, allocs: 2}, "b": {ns: 100}},
		{"a": {ns: 40, bytes: 24, allocs: 3}},
	}
	if got := report.Column(rounds, nsOf, "a"); !slices.Equal(got, []float64{50, 60, 40}) {
		t.Errorf("ns column = %v, want [50 60 40]", got)
	}
	if got := report.Column(rounds, bytesOf, "a"); !slices.Equal(got, []float64{8, 16, 24}) {
		t.Errorf("bytes column = %v, want [8 16 24]", got)
	}
	if got := report.Column(rounds, allocsOf, "a"); !slices.Equal(got, []float64{1, 2, 3}) {
		t.Errorf("allocs column = %v, want [1 2 3]", got)
	}
	if got := report.Column(rounds, nsOf, "b"); !slices.Equal(got, []float64{100, 100}) {
		t.Errorf("ns column of b = %v, want [100 100]", got)
	}
	r, lo, hi, ok := report.Ratio(rounds, nsOf, "a", "b")
	if !ok || r != 0.5 || lo != 0.5 || hi != 0.6 {
		t.Errorf("ratio = %v [%v, %v] ok=%v; want 0.5 [0.5, 0.6] true", r, lo, hi, ok)
	}
}
