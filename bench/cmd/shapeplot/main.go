// Command shapeplot draws the figure of docs/shaping.md, bytes per 100 ms
// of a shaped stream, and prints the numbers the document quotes. Every
// number comes from a shape.Writer over a real ratelimit.Limiter driven by
// a fake clock (clocktest.Fake), so the output is deterministic and cannot
// drift from the code.
//
// Run it from the root of the module:
//
//	cd bench && go run ./cmd/shapeplot    # writes docs/shaping.svg, prints the tables
//	cd bench && go run ./cmd/shapeplot -dir /tmp  # somewhere else
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

	"github.com/smoothrate/ratelimit"
	"github.com/smoothrate/ratelimit/clocktest"
	"github.com/smoothrate/ratelimit/shape"
)

func main() {
	dir := flag.String("dir", "../docs", "directory to write shaping.svg into")
	flag.Parse()
	if err := run(*dir, os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "shapeplot:", err)
		os.Exit(1)
	}
}

func run(dir string, out io.Writer) error {
	var runs []streamRun
	for _, s := range scenarios {
		r, err := simulate(s)
		if err != nil {
			return fmt.Errorf("%s: %w", s.name, err)
		}
		runs = append(runs, r)
	}
	var buf bytes.Buffer
	writeSVG(&buf, runs)
	path := filepath.Join(dir, "shaping.svg")
	if err := os.WriteFile(path, buf.Bytes(), 0o644); err != nil {
		return err
	}
	fmt.Fprintln(out, "wrote", path)
	fmt.Fprintln(out)
	writeSummary(out, runs)
	fmt.Fprintln(out)
	rows, err := oversleepTable()
	if err != nil {
		return err
	}
	writeOversleep(out, rows)
	return nil
}

// The script of the plotted stream: a producer that writes 256 KiB at a
// time, as fast as the shaper lets it, at 1 MB/s; the rate doubles at 1.5 s;
// the producer pauses at 2.5 s for one second, then goes on until 5 s.
const (
	writeSize    = 256 << 10
	startRate    = 1e6
	fasterRate   = 2e6
	rateChange   = 1500 * time.Millisecond
	pauseAt      = 2500 * time.Millisecond
	pauseFor     = time.Second
	streamEnd    = 5 * time.Second
	bin          = 100 * time.Millisecond
	limiterBurst = 0.1 // seconds of stored permits
)

// scenario is one way of shaping the same stream.
type scenario struct {
	name  string
	color string
	chunk int // 0: shape's default for the rate
}

var scenarios = []scenario{
	{"shape.Writer, default chunks (10 ms of data: 10 kB, then 20 kB)", "#1f77b4", 0},
	{"pre-paid but not chunked: each 256 KiB Write leaves at once", "#d62728", writeSize},
}

// streamRun is the outcome of one scenario: bytes per bin, and when the
// script's events happened.
type streamRun struct {
	scenario
	bins     []int64
	total    int64
	rateAt   time.Duration // when SetRate was called
	pausedAt time.Duration // when the producer paused
	resumeAt time.Duration
}

// simulate runs the script on a fake clock and counts the bytes that reach
// the wrapped writer in each 100 ms bin.
func simulate(s scenario) (streamRun, error) {
	clk := clocktest.NewFake()
	lim, err := ratelimit.NewBursty(startRate, ratelimit.WithClock(clk), ratelimit.WithMaxBurstSeconds(limiterBurst))
	if err != nil {
		return streamRun{}, err
	}
	r := streamRun{scenario: s, bins: make([]int64, streamEnd/bin)}
	sink := writerFunc(func(p []byte) (int, error) {
		if i := int(clk.Elapsed() / bin); i < len(r.bins) {
			r.bins[i] += int64(len(p))
		}
		r.total += int64(len(p))
		return len(p), nil
	})
	var opts []shape.Option
	if s.chunk > 0 {
		opts = append(opts, shape.WithChunkSize(s.chunk))
	}
	w, err := shape.NewWriter(sink, lim, opts...)
	if err != nil {
		return streamRun{}, err
	}
	data := make([]byte, writeSize)
	for clk.Elapsed() < streamEnd {
		now := clk.Elapsed()
		switch {
		case r.rateAt == 0 && now >= rateChange:
			if err := lim.SetRate(fasterRate); err != nil {
				return streamRun{}, err
			}
			r.rateAt = now
		case r.pausedAt == 0 && now >= pauseAt:
			r.pausedAt = now
			clk.Advance(pauseFor)
			r.resumeAt = clk.Elapsed()
			continue
		}
		if _, err := w.Write(data); err != nil {
			return streamRun{}, err
		}
	}
	return r, nil
}

type writerFunc func([]byte) (int, error)

func (f writerFunc) Write(p []byte) (int, error) { return f(p) }

// writeSummary prints, per scenario, the largest and smallest 100 ms bin of
// the steady parts (away from the events) and the first bin after the
// pause, as a Markdown table.
func writeSummary(w io.Writer, runs []streamRun) {
	fmt.Fprintln(w, "| stream | bytes per 100 ms at 1 MB/s (0.2–1.5 s): min … max | at 2 MB/s (1.7–2.5 s): min … max | first 100 ms after the 1 s pause |")
	fmt.Fprintln(w, "|---|---|---|---|")
	for _, r := range runs {
		lo1, hi1 := minMax(r.bins[2:15])
		lo2, hi2 := minMax(r.bins[17 : r.pausedAt/bin])
		fmt.Fprintf(w, "| %s | %d … %d | %d … %d | %d |\n", r.name, lo1, hi1, lo2, hi2, r.bins[r.resumeAt/bin])
	}
}

func minMax(xs []int64) (lo, hi int64) {
	lo, hi = xs[0], xs[0]
	for _, x := range xs {
		lo, hi = min(lo, x), max(hi, x)
	}
	return lo, hi
}

// oversleepClock is a fake clock whose timers fire late, by a fixed amount,
// like the timers of a busy VM: every Sleep that waits at all lasts extra
// longer than asked.
type oversleepClock struct {
	*clocktest.Fake
	extra time.Duration
}

func (c oversleepClock) Sleep(ctx context.Context, d time.Duration) error {
	if d > 0 {
		d += c.extra
	}
	return c.Fake.Sleep(ctx, d)
}

// oversleepRow is the rate a shaped stream achieves on a clock that
// oversleeps, for two bucket sizes.
type oversleepRow struct {
	rate      float64
	chunk     int
	oversleep time.Duration
	noBurst   float64 // achieved rate ÷ target with maxBurstSeconds = 0
	withBurst float64 // ... with maxBurstSeconds = limiterBurst
}

// oversleepTable streams 1 s of data at several rates on a clock whose
// sleeps last 1 ms, or 5 ms, longer than asked, with and without stored
// permits.
func oversleepTable() ([]oversleepRow, error) {
	var rows []oversleepRow
	for _, extra := range []time.Duration{time.Millisecond, 5 * time.Millisecond} {
		r, err := oversleepRows(extra)
		if err != nil {
			return nil, err
		}
		rows = append(rows, r...)
	}
	return rows, nil
}

func oversleepRows(extra time.Duration) ([]oversleepRow, error) {
	var rows []oversleepRow
	for _, rate := range []float64{1e5, 1e6, 1e7, 1e8, 1e9} {
		row := oversleepRow{rate: rate, chunk: shape.ChunkSize(rate), oversleep: extra}
		for i, burst := range []float64{0, limiterBurst} {
			clk := oversleepClock{clocktest.NewFake(), extra}
			lim, err := ratelimit.NewBursty(rate, ratelimit.WithClock(clk), ratelimit.WithMaxBurstSeconds(burst))
			if err != nil {
				return nil, err
			}
			var n int64
			w, err := shape.NewWriter(writerFunc(func(p []byte) (int, error) {
				if clk.Elapsed() < time.Second {
					n += int64(len(p))
				}
				return len(p), nil
			}), lim)
			if err != nil {
				return nil, err
			}
			data := make([]byte, 1<<20)
			for clk.Elapsed() < time.Second {
				if _, err := w.Write(data); err != nil {
					return nil, err
				}
			}
			ratio := float64(n) / rate
			if i == 0 {
				row.noBurst = ratio
			} else {
				row.withBurst = ratio
			}
		}
		rows = append(rows, row)
	}
	return rows, nil
}

func writeOversleep(w io.Writer, rows []oversleepRow) {
	fmt.Fprintf(w, "| oversleep | rate | default chunk | chunk time | achieved in 1 s, burst 0 | achieved in 1 s, burst %g s |\n", limiterBurst)
	fmt.Fprintln(w, "|---|---|---|---|---|---|")
	for _, r := range rows {
		chunkTime := time.Duration(float64(r.chunk) / r.rate * float64(time.Second))
		fmt.Fprintf(w, "| %v | %s | %d B | %v | %.1f %% | %.1f %% |\n", r.oversleep, shape.FormatRate(r.rate), r.chunk, chunkTime, 100*r.noBurst, 100*r.withBurst)
	}
}
