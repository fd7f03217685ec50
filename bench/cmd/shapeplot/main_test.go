package main

import (
	"bytes"
	"io"
	"os"
	"path/filepath"
	"testing"
)

// The committed figure is what the program draws today: rerun
// "go run ./cmd/shapeplot" after changing the shaper or the script.
func TestSVGUpToDate(t *testing.T) {
	dir := t.TempDir()
	if err := run(dir, io.Discard); err != nil {
		t.Fatal(err)
	}
	got, err := os.ReadFile(filepath.Join(dir, "shaping.svg"))
	if err != nil {
		t.Fatal(err)
	}
	want, err := os.ReadFile(filepath.Join("..", "..", "..", "docs", "shaping.svg"))
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, want) {
		t.Error("docs/shaping.svg is stale: run go run ./cmd/shapeplot in bench/")
	}
}

// What the document says about the plotted runs.
func TestSimulation(t *testing.T) {
	chunked, err := simulate(scenarios[0])
	if err != nil {
		t.Fatal(err)
	}
	whole, err := simulate(scenarios[1])
	if err != nil {
		t.Fatal(err)
	}
	// Shaped with chunks, every steady 100 ms carries the rate's 100 kB (or
	// 200 kB) give or take one chunk; whole 256 KiB writes make bins of 0.
	lo, hi := minMax(chunked.bins[2:15])
	if lo < 100_000-10_000 || hi > 100_000+10_000 {
		t.Errorf("chunked at 1 MB/s: bins %d … %d, want 100 kB ± one chunk", lo, hi)
	}
	lo, hi = minMax(chunked.bins[17 : chunked.pausedAt/bin])
	if lo < 200_000-20_000 || hi > 200_000+20_000 {
		t.Errorf("chunked at 2 MB/s: bins %d … %d, want 200 kB ± one chunk", lo, hi)
	}
	if lo, hi := minMax(whole.bins[2:15]); lo != 0 || hi != writeSize {
		t.Errorf("unchunked: bins %d … %d, want 0 … %d", lo, hi, writeSize)
	}
	// After the pause, the first bin holds at most the stored 100 ms, the
	// pay-later chunk and 100 ms at the rate.
	if got, limit := chunked.bins[chunked.resumeAt/bin], int64(2e6*limiterBurst+20_000+2e6*bin.Seconds()); got > limit {
		t.Errorf("first bin after the pause %d, more than %d", got, limit)
	}
	// The bytes are all accounted for: 5 s at these rates, less the pause.
	if chunked.total < 6_400_000 || chunked.total > 7_100_000 { // ≈ 1.5 s × 1 MB/s + 2.5 s × 2 MB/s + stored bursts
		t.Errorf("total %d bytes", chunked.total)
	}
}

// A bucket of 100 ms makes up for an oversleeping timer at every rate; no
// bucket does only while a chunk lasts longer than the oversleep.
func TestOversleep(t *testing.T) {
	rows, err := oversleepTable()
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range rows {
		if r.withBurst < 0.99 {
			t.Errorf("%v at %v B/s with a burst: %.3f of the rate", r.oversleep, r.rate, r.withBurst)
		}
		chunkTime := float64(r.chunk) / r.rate
		if chunkTime > r.oversleep.Seconds() && r.noBurst < 0.99 {
			t.Errorf("%v at %v B/s, chunks of %.4fs, no burst: %.3f of the rate", r.oversleep, r.rate, chunkTime, r.noBurst)
		}
		if chunkTime < r.oversleep.Seconds()/2 && r.noBurst > 0.9 {
			t.Errorf("%v at %v B/s, chunks of %.4fs, no burst: %.3f; the oversleep should be lost", r.oversleep, r.rate, chunkTime, r.noBurst)
		}
	}
}
