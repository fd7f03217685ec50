package report

import (
	"slices"
	"testing"
)

const sampleOutput = `goos: linux
goarch: amd64
pkg: github.com/smoothrate/ratelimit/bench
cpu: AMD EPYC
BenchmarkGranted/ours-2           	 4525509	        53.17 ns/op	       0 B/op	       0 allocs/op
BenchmarkGranted/xrate-2          	 2275027	       111.2 ns/op	       0 B/op	       0 allocs/op
BenchmarkReserve/xrate-2          	 1314907	       187.0 ns/op	      64 B/op	       1 allocs/op
BenchmarkMemoryFlood-2            	       1	4219372821 ns/op	        94.82 heap-B/key
BenchmarkNoTime-2                 	       1	        94.82 heap-B/key
BenchmarkGrantedParallel/ours     	 1561027	       167.1 ns/op	       0 B/op	       0 allocs/op
BenchmarkGrantedParallel/ours-4   	 1561027	       99.5 ns/op	       0 B/op	       0 allocs/op
PASS
ok  	github.com/smoothrate/ratelimit/bench	6.959s
`

func TestParseRound(t *testing.T) {
	r, names := ParseRound([]byte(sampleOutput), false)
	// Without a -cpu list the -N suffix goes: GrantedParallel/ours (GOMAXPROCS
	// 1, no suffix) is then overwritten by its -4 line, and a line
	// without ns/op is no result.
	wantNames := []string{"Granted/ours", "Granted/xrate", "Reserve/xrate", "MemoryFlood", "GrantedParallel/ours"}
	if !slices.Equal(names, wantNames) {
		t.Errorf("names = %q, want %q", names, wantNames)
	}
	if got := r["Reserve/xrate"]; got["ns/op"] != 187 || got["B/op"] != 64 || got["allocs/op"] != 1 {
		t.Errorf("Reserve/xrate = %v, want 187 ns/op, 64 B/op, 1 allocs/op", got)
	}
	if got := r["MemoryFlood"]["heap-B/key"]; got != 94.82 {
		t.Errorf("MemoryFlood heap-B/key = %v, want 94.82", got)
	}
	if got := r["GrantedParallel/ours"]["ns/op"]; got != 99.5 {
		t.Errorf("GrantedParallel/ours = %v, want the last line's 99.5", got)
	}
}

func TestParseRoundKeepProcs(t *testing.T) {
	r, names := ParseRound([]byte(sampleOutput), true)
	if got := r["GrantedParallel/ours (cpu=1)"]["ns/op"]; got != 167.1 {
		t.Errorf("cpu=1 ns/op = %v, want 167.1", got)
	}
	if got := r["GrantedParallel/ours (cpu=4)"]["ns/op"]; got != 99.5 {
		t.Errorf("cpu=4 ns/op = %v, want 99.5", got)
	}
	if names[0] != "Granted/ours (cpu=2)" {
		t.Errorf("first name = %q, want %q", names[0], "Granted/ours (cpu=2)")
	}
}

func TestParseRoundEmpty(t *testing.T) {
	if r, names := ParseRound([]byte("PASS\n"), false); len(r) != 0 || len(names) != 0 {
		t.Errorf("ParseRound of an output without benchmarks = %v, %q", r, names)
	}
}

func TestRunRoundsRejectsNoRounds(t *testing.T) {
	if _, _, _, err := RunRounds(Job{Pkg: "example.com/none", Count: 0}); err == nil {
		t.Error("RunRounds with Count 0 succeeded")
	}
}
