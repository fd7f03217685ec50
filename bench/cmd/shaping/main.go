// Command shaping shapes a byte stream on the real clock with this module's
// shape.Writer and with its peers' equivalents, in the same run, and reports
// how close each comes to the target rate and how bursty it is:
//
//	cd bench && go run ./cmd/shaping
//
// Method. For each shaper and each rate (1 MB/s to 1 GB/s by default), a
// fresh shaper writes into a counting sink for -d (2 s); each measurement is
// repeated -reps (3) times and the tables show the medians. The caller
// writes fixed-size buffers in a loop until the window ends: 64 KiB (the
// size of io.Copy's buffer is 32 KiB), or, for the small-write rows, 1448
// bytes (one TCP segment) or 512 bytes (a small record). The sink adds the
// size of every Write it receives to a 10 µs time bucket; bytes that arrive
// after the window are not counted. Initial bursts are drained first (peers
// start with a full bucket; ours starts empty).
//
//   - achieved = bytes received in the window / window, shown as a ratio
//     to the target (goal: within 1 %);
//   - peak = the most bytes received in any 100 ms, shown as a ratio to
//     rate × 100 ms, next to the bound rate × 100 ms + one chunk + the
//     shaper's burst (its bucket or stored-permit capacity).
//
// The shapers:
//
//   - ours: shape.NewWriter over ratelimit.NewBursty(rate,
//     WithMaxBurstSeconds(0.1)) (the package's recommended setup; the default
//     chunk is 10 ms of data, clamped to [1 KiB, 64 KiB]);
//   - ours, Guava mode: the same with WithResolution(time.Microsecond),
//     Guava's resolution, where the price of the fresh permits of each
//     booking is truncated to whole microseconds, (long)(n × stableInterval).
//     Below 1 µs per byte (above 1 MB/s) a write of n bytes is under-priced
//     by up to 1 µs; a write that costs less than 1 µs (512 bytes at 1 GB/s)
//     is free, and the limiter stops limiting. On the real clock the error
//     is partly hidden: after each timer oversleep, the writes are served
//     from stored permits, which are counted exactly;
//   - juju: ratelimit.Writer over NewBucketWithRate(rate, 0.1 s of data),
//     which waits for each caller's Write as a whole, then writes it;
//   - x/time/rate: a writer that splits each Write into chunks of
//     ChunkSize(rate) and calls WaitN per chunk, on NewLimiter(rate, burst)
//     with a burst of 0.1 s of data (the same allowance as ours), and with
//     a burst of one chunk (the smallest WaitN accepts).
//
// The peers get the same 0.1 s of burst as ours because stored credit is
// what makes up for timer oversleep (about 1 ms per sleep on this VM, much
// more when the machine is loaded): a shaper whose credit is smaller than
// rate × oversleep loses the time overslept. The progress lines (on
// stderr) show how much CPU the process got in each run; on a loaded machine the fast,
// small-write rows can be short of CPU rather than of permits.
package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	juju "github.com/juju/ratelimit"
	ours "github.com/smoothrate/ratelimit"
	"github.com/smoothrate/ratelimit/bench/internal/report"
	"github.com/smoothrate/ratelimit/shape"
	"golang.org/x/time/rate"
)

// bucketWidth is the sink's time resolution.
const bucketWidth = 10 * time.Microsecond

// sink counts what arrives, per 10 µs bucket of arrival time. It reads
// only the monotonic clock and adds to a fixed array, so that measuring
// costs little next to the shaper measured and takes the same time and
// memory however fast the writes come.
type sink struct {
	t0      time.Time
	last    time.Duration // arrival time of the latest Write
	gap     time.Duration // longest time between two Writes
	buckets []int64       // bytes received in [i, i+1) × bucketWidth
}

func newSink(d time.Duration) *sink {
	return &sink{buckets: make([]int64, d/bucketWidth)}
}

func (s *sink) Write(p []byte) (int, error) {
	at := time.Since(s.t0)
	s.gap = max(s.gap, at-s.last)
	s.last = at
	if i := int(at / bucketWidth); i < len(s.buckets) {
		s.buckets[i] += int64(len(p))
	}
	return len(p), nil
}

// shaper is one configuration: make returns a writer into dst at r bytes/s,
// with its initial burst drained, plus the chunk and burst that bound its
// peak.
type shaper struct {
	name   string
	bufLen int // size of each caller Write
	make   func(dst io.Writer, r float64, bufLen int) (w io.Writer, chunk, burst float64, err error)
}

const (
	bigBuf    = 64 << 10
	packetBuf = 1448 // one TCP segment's payload on a 1500-byte MTU
	smallBuf  = 512  // a small record: less than 1 µs of data at 1 GB/s
	burstSecs = 0.1  // ours: WithMaxBurstSeconds
)

func oursWriter(opts ...ours.Option) func(io.Writer, float64, int) (io.Writer, float64, float64, error) {
	return func(dst io.Writer, r float64, bufLen int) (io.Writer, float64, float64, error) {
		lim, err := ours.NewBursty(r, append([]ours.Option{ours.WithMaxBurstSeconds(burstSecs)}, opts...)...)
		if err != nil {
			return nil, 0, 0, err
		}
		w, err := shape.NewWriter(dst, lim)
		if err != nil {
			return nil, 0, 0, err
		}
		return w, float64(min(shape.ChunkSize(r), bufLen)), burstSecs * r, nil
	}
}

func jujuWriter(dst io.Writer, r float64, bufLen int) (io.Writer, float64, float64, error) {
	capacity := max(int64(burstSecs*r), int64(bufLen))
	b := juju.NewBucketWithRate(r, capacity)
	if got := b.TakeAvailable(capacity); got != capacity { // starts full: drain
		return nil, 0, 0, fmt.Errorf("juju: drained %d of a full bucket of %d", got, capacity)
	}
	return juju.Writer(dst, b), float64(bufLen), float64(capacity), nil
}

// xrateWriter pays x/time/rate for each chunk of at most its burst, then
// writes it: the usual way to shape bytes with x/time/rate, whose WaitN
// refuses n > burst.
type xrateWriter struct {
	dst   io.Writer
	lim   *rate.Limiter
	chunk int
}

func (w *xrateWriter) Write(p []byte) (int, error) {
	written := 0
	for written < len(p) {
		n := min(w.chunk, len(p)-written)
		if err := w.lim.WaitN(context.Background(), n); err != nil {
			return written, err
		}
		m, err := w.dst.Write(p[written : written+n])
		written += m
		if err != nil {
			return written, err
		}
	}
	return written, nil
}

// xrate returns the x/time/rate shaper with a bucket of burstSeconds of
// data, or of one chunk if burstSeconds is 0.
func xrate(burstSeconds float64) func(io.Writer, float64, int) (io.Writer, float64, float64, error) {
	return func(dst io.Writer, r float64, bufLen int) (io.Writer, float64, float64, error) {
		chunk := shape.ChunkSize(r)
		burst := max(int(burstSeconds*r), chunk)
		lim := rate.NewLimiter(rate.Limit(r), burst)
		if !lim.AllowN(time.Now(), burst) { // starts full: drain
			return nil, 0, 0, fmt.Errorf("x/time/rate: a fresh limiter refused its burst of %d", burst)
		}
		return &xrateWriter{dst: dst, lim: lim, chunk: chunk}, float64(min(chunk, bufLen)), float64(burst), nil
	}
}

var shapers = []shaper{
	{"ours `shape.Writer`", bigBuf, oursWriter()},
	{"ours `shape.Writer`, Guava mode (µs)", bigBuf, oursWriter(ours.WithResolution(time.Microsecond))},
	{"juju `ratelimit.Writer`, capacity 0.1 s", bigBuf, jujuWriter},
	{"x/time/rate `WaitN` per chunk, burst 0.1 s", bigBuf, xrate(burstSecs)},
	{"x/time/rate `WaitN` per chunk, burst 1 chunk", bigBuf, xrate(0)},
	{"ours `shape.Writer`, 1448-byte writes", packetBuf, oursWriter()},
	{"ours `shape.Writer`, Guava mode (µs), 1448-byte writes", packetBuf, oursWriter(ours.WithResolution(time.Microsecond))},
	{"ours `shape.Writer`, 512-byte writes", smallBuf, oursWriter()},
	{"ours `shape.Writer`, Guava mode (µs), 512-byte writes", smallBuf, oursWriter(ours.WithResolution(time.Microsecond))},
}

// result of one run.
type result struct {
	cpu      float64       // CPU time of the whole process / wall time, during the run
	gap      time.Duration // longest time between two arrivals
	achieved float64       // ratio to the target
	peak     float64       // most bytes in any 100 ms, as a ratio to rate × 100 ms
	bound    float64       // (rate × 100 ms + chunk + burst) / (rate × 100 ms)
}

const peakWindow = 100 * time.Millisecond

func run(s shaper, r float64, d time.Duration) (result, error) {
	snk := newSink(d)
	buf := make([]byte, s.bufLen)
	// Collect the last run's garbage now, not during this run, and before
	// the shaper is made: a limiter left idle during the collection would
	// store permits, an initial burst that the run would then count.
	runtime.GC()
	w, chunk, burst, err := s.make(snk, r, s.bufLen)
	if err != nil {
		return result{}, err
	}
	cpu0 := cpuTime()
	snk.t0 = time.Now()
	for snk.last < d {
		if _, err := w.Write(buf); err != nil {
			return result{}, err
		}
	}
	cpu := float64(cpuTime()-cpu0) / float64(time.Since(snk.t0))
	total, peak := analyze(snk.buckets, int(peakWindow/bucketWidth))
	perWin := r * peakWindow.Seconds()
	return result{
		cpu:      cpu,
		gap:      snk.gap,
		achieved: float64(total) / (r * d.Seconds()),
		peak:     float64(peak) / perWin,
		bound:    (perWin + chunk + burst) / perWin,
	}, nil
}

// analyze returns the bytes in all buckets, and an upper bound on the most
// received in any interval of win buckets' length: an interval that starts
// inside a bucket overlaps win+1 of them, so the sweep adds up win+1
// consecutive buckets. The bound exceeds the true figure by at most one
// bucket's bytes (10 µs of data).
func analyze(buckets []int64, win int) (total, peak int64) {
	var inWin int64
	for i, b := range buckets {
		total += b
		inWin += b
		if i > win {
			inWin -= buckets[i-win-1]
		}
		peak = max(peak, inWin)
	}
	return total, peak
}

func main() {
	d := flag.Duration("d", 2*time.Second, "length of each run")
	reps := flag.Int("reps", 3, "repetitions of each run")
	ratesFlag := flag.String("rates", "1e6,1e7,1e8,1e9", "comma-separated rates, bytes/s")
	flag.Parse()
	var rates []float64
	for _, f := range strings.Split(*ratesFlag, ",") {
		r, err := strconv.ParseFloat(strings.TrimSpace(f), 64)
		if err != nil || !(r >= 1e3) {
			fmt.Fprintf(os.Stderr, "shaping: bad rate %q (need a number >= 1e3)\n", f)
			os.Exit(2)
		}
		rates = append(rates, r)
	}
	if *reps < 1 {
		fmt.Fprintln(os.Stderr, "shaping: -reps must be at least 1")
		os.Exit(2)
	}
	if *d < peakWindow {
		fmt.Fprintf(os.Stderr, "shaping: -d must be at least %v\n", peakWindow)
		os.Exit(2)
	}

	fmt.Printf("%s; %d reps of %v per shaper and rate; load average before: %s\n\n", runtime.Version(), *reps, *d, report.LoadAvg())
	// results[shaper][rate] holds one result per repetition. The
	// repetitions are the outer loop, so that a stall of the machine hits
	// one repetition of one cell, and the median discards it.
	results := make([][][]result, len(shapers))
	for i := range results {
		results[i] = make([][]result, len(rates))
	}
	for rep := range *reps {
		for i, s := range shapers {
			for k, r := range rates {
				res, err := run(s, r, *d)
				if err != nil {
					fmt.Fprintln(os.Stderr, "shaping:", s.name, err)
					os.Exit(1)
				}
				results[i][k] = append(results[i][k], res)
				fmt.Fprintf(os.Stderr, "rep %d: %s at %s: achieved %.4f, peak %.3f (bound %.3f), longest gap %v, CPU %.2f, load %s\n",
					rep+1, s.name, human(r), res.achieved, res.peak, res.bound, res.gap.Round(time.Microsecond), res.cpu, report.LoadAvg())
			}
		}
	}

	header, sep := "| Shaper |", "|---|"
	for _, r := range rates {
		header += " " + human(r) + " |"
		sep += "---|"
	}
	fmt.Println("Achieved rate / target, median of the repetitions (range in parentheses; goal: 0.99–1.01):")
	fmt.Println()
	fmt.Println(header)
	fmt.Println(sep)
	for i, s := range shapers {
		row := "| " + s.name + " |"
		for _, rs := range results[i] {
			v := collect(rs, func(r result) float64 { return r.achieved })
			m := report.Median(v)
			c := fmt.Sprintf("%.4f", m)
			if m < 0.99 || m > 1.01 {
				c = "**" + c + "**"
			}
			if len(v) > 1 {
				c += fmt.Sprintf(" (%.4f–%.4f)", slices.Min(v), slices.Max(v))
			}
			row += " " + c + " |"
		}
		fmt.Println(row)
	}
	fmt.Println()
	fmt.Println("Most bytes in any 100 ms / (rate × 100 ms), median of the repetitions (largest in parentheses), and the bound (rate × 100 ms + chunk + burst) / (rate × 100 ms):")
	fmt.Println()
	fmt.Println(header)
	fmt.Println(sep)
	for i, s := range shapers {
		row := "| " + s.name + " |"
		for _, rs := range results[i] {
			v := collect(rs, func(r result) float64 { return r.peak })
			m, bound := report.Median(v), rs[0].bound
			c := fmt.Sprintf("%.3f", m)
			if len(v) > 1 {
				c += fmt.Sprintf(" (%.3f)", slices.Max(v))
			}
			c += fmt.Sprintf(" ≤ %.3f", bound)
			if m > bound {
				c = "**" + c + "**"
			}
			row += " " + c + " |"
		}
		fmt.Println(row)
	}
	fmt.Printf("\nload average after: %s\n", report.LoadAvg())
}

func collect(rs []result, f func(result) float64) []float64 {
	v := make([]float64, len(rs))
	for i, r := range rs {
		v[i] = f(r)
	}
	return v
}

// cpuTime is the CPU time (user + system) used by the process so far.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

func human(r float64) string {
	switch {
	case r >= 1e9:
		return strconv.FormatFloat(r/1e9, 'g', -1, 64) + " GB/s"
	case r >= 1e6:
		return strconv.FormatFloat(r/1e6, 'g', -1, 64) + " MB/s"
	}
	return strconv.FormatFloat(r/1e3, 'g', -1, 64) + " kB/s"
}
