package main

import (
	"bytes"
	"io"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/smoothrate/ratelimit/throttle"
)

// The committed figure is what the program draws today: rerun
// "go run ./cmd/throttleplot" after changing an algorithm or the trace.
func TestSVGUpToDate(t *testing.T) {
	dir := t.TempDir()
	if err := run(dir, io.Discard); err != nil {
		t.Fatal(err)
	}
	got, err := os.ReadFile(filepath.Join(dir, "throttle.svg"))
	if err != nil {
		t.Fatal(err)
	}
	want, err := os.ReadFile(filepath.Join("..", "..", "..", "docs", "throttle.svg"))
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, want) {
		t.Error("docs/throttle.svg is stale: run go run ./cmd/throttleplot in bench/")
	}
}

// What docs/throttle.md says about the figure.
func TestFigureClaims(t *testing.T) {
	trace := bursty()
	runs := map[throttle.Algorithm]algRun{}
	for _, alg := range algorithms {
		r, err := simulate(alg, trace)
		if err != nil {
			t.Fatal(err)
		}
		runs[alg] = r
	}
	// The fixed window lets its limit through on each side of the edge at
	// 1 s: twice the limit within 200 ms.
	if got := mostInAnyWindow(runs[throttle.FixedWindow].admitted, 200*time.Millisecond); got != 20 {
		t.Errorf("fixed window: %d in 200 ms at the edge, want 20 (2 × 10)", got)
	}
	// The sliding log never admits more than 10 in any second; the sliding
	// window at most 10 per aligned window.
	if got := mostInAnyWindow(runs[throttle.SlidingLog].admitted, time.Second); got != 10 {
		t.Errorf("sliding log: %d in some second, want 10", got)
	}
	// The three meters are one meter: identical admissions.
	g := runs[throttle.GCRA].admitted
	for _, alg := range []throttle.Algorithm{throttle.TokenBucket, throttle.LeakyBucket} {
		if a := runs[alg].admitted; len(a) != len(g) {
			t.Errorf("%v admitted %d, GCRA %d", alg, len(a), len(g))
		}
	}
	// The meters admit at most the burst plus the rate over any interval.
	if got := mostInAnyWindow(g, time.Second); got > 10+10 {
		t.Errorf("GCRA: %d in some second, more than burst + rate", got)
	}
}
