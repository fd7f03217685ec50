// Command throttleplot draws the figure of docs/throttle.md: the six keyed
// algorithms of package throttle on one bursty trace, as requests admitted
// per 100 ms, and prints the numbers the document quotes. Every number
// comes from a throttle.MemoryStore driven by a fake clock
// (clocktest.Fake), so the output is deterministic and cannot drift from
// the code.
//
// Run it from the root of the module:
//
//	cd bench && go run ./cmd/throttleplot    # writes docs/throttle.svg, prints the table
//	cd bench && go run ./cmd/throttleplot -dir /tmp  # somewhere else
//
// The SVG is written by hand with the standard library.
package main

import (
	"bytes"
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"time"

	"github.com/smoothrate/ratelimit/clocktest"
	"github.com/smoothrate/ratelimit/throttle"
)

func main() {
	dir := flag.String("dir", "../docs", "directory to write throttle.svg into")
	flag.Parse()
	if err := run(*dir, os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "throttleplot:", err)
		os.Exit(1)
	}
}

func run(dir string, out io.Writer) error {
	trace := bursty()
	runs := make([]algRun, 0, len(algorithms))
	for _, alg := range algorithms {
		r, err := simulate(alg, trace)
		if err != nil {
			return fmt.Errorf("%v: %w", alg, err)
		}
		runs = append(runs, r)
	}
	var buf bytes.Buffer
	writeSVG(&buf, offeredBins(trace), runs)
	path := filepath.Join(dir, "throttle.svg")
	if err := os.WriteFile(path, buf.Bytes(), 0o644); err != nil {
		return err
	}
	fmt.Fprintln(out, "wrote", path)
	fmt.Fprintln(out)
	writeSummary(out, len(trace), runs)
	return nil
}

// The plotted limit: 10 requests per second, a burst of 10 for the meters.
var limit = throttle.PerSecond(10)

var algorithms = []throttle.Algorithm{
	throttle.GCRA, throttle.TokenBucket, throttle.LeakyBucket,
	throttle.FixedWindow, throttle.SlidingWindow, throttle.SlidingLog,
}

const (
	bin      = 100 * time.Millisecond
	traceEnd = 4500 * time.Millisecond
	nBins    = int(traceEnd / bin)
)

// bursty is the offered trace (times since the start, which is a whole
// second, so the windows' edges fall on whole seconds): 30 requests in
// the 100 ms before the edge at 1 s and 30 in the 100 ms after
// it, a steady 20 per second (twice the limit) from 1.5 s to 3 s, and 30
// at once at 3.5 s.
func bursty() []time.Duration {
	var t []time.Duration
	for i := range 60 { // 0.9 s … 1.1 s, one every 10/3 ms
		t = append(t, 900*time.Millisecond+time.Duration(i)*bin/30)
	}
	for at := 1500 * time.Millisecond; at < 3*time.Second; at += 50 * time.Millisecond {
		t = append(t, at)
	}
	for range 30 {
		t = append(t, 3500*time.Millisecond)
	}
	return t
}

// algRun is one algorithm's outcome on the trace.
type algRun struct {
	alg      throttle.Algorithm
	admitted []time.Duration
	bins     []int // admitted per 100 ms
}

// simulate offers the trace to a fresh MemoryStore on a fake clock.
func simulate(alg throttle.Algorithm, trace []time.Duration) (algRun, error) {
	clk := clocktest.NewFake()
	store, err := throttle.NewMemoryStore(throttle.WithStoreClock(clk))
	if err != nil {
		return algRun{}, err
	}
	lim, err := throttle.New(store, alg, limit)
	if err != nil {
		return algRun{}, err
	}
	r := algRun{alg: alg, bins: make([]int, nBins)}
	for _, at := range trace {
		clk.Advance(at - clk.Elapsed())
		d, err := lim.Allow(context.Background(), "client")
		if err != nil {
			return algRun{}, err
		}
		if d.Allowed {
			r.admitted = append(r.admitted, at)
			r.bins[at/bin]++
		}
	}
	return r, nil
}

func offeredBins(trace []time.Duration) []int {
	b := make([]int, nBins)
	for _, at := range trace {
		b[at/bin]++
	}
	return b
}

// mostInAnyWindow is the most admitted requests in any interval of length
// w (half-open, starting at an admitted request).
func mostInAnyWindow(admitted []time.Duration, w time.Duration) int {
	most, lo := 0, 0
	for hi := range admitted {
		for admitted[hi]-admitted[lo] >= w {
			lo++
		}
		most = max(most, hi-lo+1)
	}
	return most
}

func writeSummary(w io.Writer, offered int, runs []algRun) {
	fmt.Fprintf(w, "%d requests offered, limit %v\n\n", offered, limit)
	fmt.Fprintln(w, "| algorithm | admitted | most in any 1 s | most in any 200 ms | most in a 100 ms bin |")
	fmt.Fprintln(w, "|---|---:|---:|---:|---:|")
	for _, r := range runs {
		most := 0
		for _, v := range r.bins {
			most = max(most, v)
		}
		fmt.Fprintf(w, "| %v | %d | %d | %d | %d |\n", r.alg, len(r.admitted),
			mostInAnyWindow(r.admitted, time.Second), mostInAnyWindow(r.admitted, 200*time.Millisecond), most)
	}
}
