// Command accuracy measures how close a blocking acquire loop comes to the
// configured rate on the real clock, for this module's limiter and its peers
// in the same run:
//
//	cd bench && go run ./cmd/accuracy -reps 3
//
// Method. One goroutine, one limiter at a time. The limiter is made, its
// initial burst is drained (x/time/rate starts with a full bucket; ours and
// uber start empty, and their first call, which is free, is made here), and
// then a window of -window (1 s) starts: the loop calls the blocking acquire
// for one event again and again, and counts the calls that complete before
// the window ends. The achieved rate is that count divided by the window,
// and the ratio is achieved / configured. A perfect limiter scores 1 (±1
// event); a limiter that cannot make up for its sleeps oversleeping scores
// less.
//
// Why it matters: a timer wake-up on this VM takes about a millisecond for
// any sleep from about 10 µs up (the program measures and prints it). A
// limiter can only make up for that oversleep by letting accumulated credit
// through afterwards: x/time/rate's bucket, uber's slack, our stored permits
// (a bursty limiter stores up to maxBurstSeconds, 1 s by default, of
// permits). When the credit is smaller than rate × oversleep, the time
// overslept is lost for good.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"time"

	ours "github.com/smoothrate/ratelimit"
	"github.com/smoothrate/ratelimit/bench/internal/report"
	uber "go.uber.org/ratelimit"
	"golang.org/x/time/rate"
)

// subject is one limiter configuration: make returns the blocking acquire
// of a fresh limiter at r events/s, its initial burst already drained.
type subject struct {
	name string
	make func(r float64) (acquire func(), err error)
}

var subjects = []subject{
	{"ours `Acquire` (bursty, maxBurstSeconds 1)", func(r float64) (func(), error) {
		return oursAcquire(r)
	}},
	{"ours `Acquire` (bursty, maxBurstSeconds 0)", func(r float64) (func(), error) {
		return oursAcquire(r, ours.WithMaxBurstSeconds(0))
	}},
	{"x/time/rate `Wait`, burst 1", func(r float64) (func(), error) {
		return xrateWait(r, 1)
	}},
	{"x/time/rate `Wait`, burst r/100", func(r float64) (func(), error) {
		return xrateWait(r, int(r/100))
	}},
	{"uber `Take` (slack 10)", func(r float64) (func(), error) {
		u := uber.New(int(r))
		u.Take() // the first call only sets the limiter's clock
		return func() { u.Take() }, nil
	}},
}

func oursAcquire(r float64, opts ...ours.Option) (func(), error) {
	l, err := ours.NewBursty(r, opts...)
	if err != nil {
		return nil, err
	}
	ctx := context.Background()
	// The limiter starts empty; its first call is free and books the next
	// permit 1/r later.
	if _, err := l.Acquire(ctx, 1); err != nil {
		return nil, err
	}
	return func() {
		if _, err := l.Acquire(ctx, 1); err != nil {
			panic(err) // cannot happen: Background is never done
		}
	}, nil
}

func xrateWait(r float64, burst int) (func(), error) {
	lim := rate.NewLimiter(rate.Limit(r), burst)
	if !lim.AllowN(time.Now(), burst) { // drain the full bucket it starts with
		return nil, fmt.Errorf("x/time/rate: a fresh limiter refused its burst of %d", burst)
	}
	ctx := context.Background()
	return func() {
		if err := lim.Wait(ctx); err != nil {
			panic(err) // cannot happen: Background is never done
		}
	}, nil
}

// measure runs acquire until window has passed since its start and returns
// the number of calls completed within the window.
func measure(acquire func(), window time.Duration) int {
	n := 0
	t0 := time.Now()
	for {
		acquire()
		if time.Since(t0) >= window {
			return n
		}
		n++
	}
}

func main() {
	reps := flag.Int("reps", 3, "repetitions of each measurement")
	window := flag.Duration("window", time.Second, "length of the counting window")
	ratesFlag := flag.String("rates", "1e3,1e4,1e5,1e6", "comma-separated rates, events/s")
	flag.Parse()
	var rates []float64
	for _, f := range strings.Split(*ratesFlag, ",") {
		r, err := strconv.ParseFloat(strings.TrimSpace(f), 64)
		if err != nil || r < 100 {
			fmt.Fprintf(os.Stderr, "accuracy: bad rate %q (need a number >= 100)\n", f)
			os.Exit(2)
		}
		rates = append(rates, r)
	}
	if *reps < 1 || *window <= 0 {
		fmt.Fprintln(os.Stderr, "accuracy: -reps must be >= 1 and -window > 0")
		os.Exit(2)
	}

	fmt.Printf("%s; %d reps of a %v window; load average before: %s\n\n", runtime.Version(), *reps, *window, report.LoadAvg())
	fmt.Println("Timer floor: what time.Sleep(d) really takes (200 samples each):")
	fmt.Println()
	fmt.Println("| d | p10 | median | p90 |")
	fmt.Println("|---:|---:|---:|---:|")
	for _, d := range []time.Duration{time.Microsecond, 10 * time.Microsecond, 100 * time.Microsecond, time.Millisecond} {
		p10, p50, p90 := oversleep(d, 200)
		fmt.Printf("| %v | %v | %v | %v |\n", d, p10, p50, p90)
	}
	fmt.Println()
	fmt.Println("Achieved / configured rate, median of the repetitions (range in parentheses):")
	fmt.Println()

	header := "| Limiter |"
	sep := "|---|"
	for _, r := range rates {
		header += " " + human(r) + "/s |"
		sep += "---|"
	}
	fmt.Println(header)
	fmt.Println(sep)
	for _, s := range subjects {
		row := "| " + s.name + " |"
		for _, r := range rates {
			var ratios []float64
			for range *reps {
				acquire, err := s.make(r)
				if err != nil {
					fmt.Fprintln(os.Stderr, "accuracy:", err)
					os.Exit(1)
				}
				n := measure(acquire, *window)
				ratios = append(ratios, float64(n)/(r*window.Seconds()))
			}
			row += " " + cell(ratios) + " |"
		}
		fmt.Println(row)
	}
	fmt.Printf("\nload average after: %s\n", report.LoadAvg())
}

// cell prints the median ratio, and the range when there are several.
func cell(ratios []float64) string {
	s := slices.Clone(ratios)
	slices.Sort(s)
	med := report.Median(s)
	out := fmt.Sprintf("%.4f", med)
	if med < 0.9 {
		out = "**" + out + "**"
	}
	if len(s) > 1 {
		out += fmt.Sprintf(" (%.4f–%.4f)", s[0], s[len(s)-1])
	}
	return out
}

// oversleep measures how long time.Sleep(d) really takes, n times.
func oversleep(d time.Duration, n int) (p10, p50, p90 time.Duration) {
	s := make([]time.Duration, n)
	for i := range s {
		t := time.Now()
		time.Sleep(d)
		s[i] = time.Since(t)
	}
	slices.Sort(s)
	r := func(x time.Duration) time.Duration { return x.Round(time.Microsecond) }
	return r(s[n/10]), r(s[n/2]), r(s[n*9/10])
}

func human(r float64) string {
	switch {
	case r >= 1e6 && r == float64(int64(r/1e6))*1e6:
		return strconv.FormatInt(int64(r/1e6), 10) + " M"
	case r >= 1e3 && r == float64(int64(r/1e3))*1e3:
		return strconv.FormatInt(int64(r/1e3), 10) + " k"
	}
	return strconv.FormatFloat(r, 'g', -1, 64)
}
