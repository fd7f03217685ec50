// Package trace is `ratelimit trace`: it replays acquires, sleeps and rate
// changes on one limiter driven by a fake clock and prints the schedule, so
// that what a limiter does (who waits, how long, what is stored) can be seen
// exactly, in no real time and without writing a program.
package trace

import (
	"bufio"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"math"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/smoothrate/ratelimit"
	"github.com/smoothrate/ratelimit/clocktest"
	"github.com/smoothrate/ratelimit/internal/cli/command"
	"github.com/smoothrate/ratelimit/internal/units"
	"github.com/smoothrate/ratelimit/smooth"
)

const traceUsage = `Usage: ratelimit trace [flags] [operation ...]

Trace replays operations on one limiter driven by a fake clock (so the
schedule is exact and takes no real time) and prints one row per operation:

  time(s)  when the operation starts, in seconds since the limiter was made
  wait(s)  how long the call slept; "refused" for a try that failed
  stored   stored permits when the operation starts
  left     stored permits when it ends
  next(s)  how long after it ends the next request may proceed

Operations (flags may come before, between or after them):

  acquire:N         Acquire(N): wait for the debt of earlier requests, book N
  try:N[:TIMEOUT]   TryAcquire(N, TIMEOUT), TIMEOUT 0 if omitted
  sleep:D           let D pass (the caller's own work between requests)
  rate:R            SetRate(R)

N defaults to 1 ("acquire" is "acquire:1"). D and TIMEOUT are Go durations
(250ms, 1.5s) or plain seconds (0.25). R is in permits per second, "inf" for
unlimited. A script (--script) holds the same words, separated by spaces or
newlines; "#" starts a comment.

With no operations, trace replays the classic Guava RateLimiter walk-through
at 4 qps: acquire:1 sleep:1s acquire:3 sleep:1s acquire:10 sleep:1s acquire:1.
Compare "ratelimit trace" (bursty: waits 0, 0, 0, 0.5 s) with
"ratelimit trace --warmup 2s" (warming up: waits 0, 0, 0.6875, 1.5625 s).

Flags:
`

// articleOps is the request sequence of the well-known walk-through of
// Guava's RateLimiter (4 qps; 1, 3, 10 and 1 permits, one second apart).
var articleOps = []string{"acquire:1", "sleep:1s", "acquire:3", "sleep:1s", "acquire:10", "sleep:1s", "acquire:1"}

// traceConfig is what the flags describe: one limiter.
type traceConfig struct {
	qps        float64
	warmup     time.Duration
	coldFactor float64
	burst      float64
	full       bool
	guava      bool
	// Which flags were given: an option is passed to the constructor only
	// if its flag was, so that the library itself rejects the ones that do
	// not apply (--burst on a warming-up limiter, say).
	set map[string]bool
}

// Summary is trace's line in the list of commands.
const Summary = "replay acquires, sleeps and rate changes on a fake clock and print the schedule"

// Run runs `ratelimit trace` with args (what follows "trace" on the command
// line) and returns its exit status.
func Run(args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("trace", flag.ContinueOnError)
	cfg := traceConfig{qps: 4, coldFactor: ratelimit.DefaultColdFactor, burst: ratelimit.DefaultMaxBurstSeconds}
	var script string
	fs.Var(command.Float{P: &cfg.qps, Parse: units.JobRate}, "qps", "stable `rate` in permits per second, as run's --rate: 4, 4/s, 240/m (inf for unlimited)")
	fs.DurationVar(&cfg.warmup, "warmup", 0, "warm-up `period`: makes a warming-up limiter (Guava's SmoothWarmingUp); without it the limiter is bursty")
	fs.Var(command.Float{P: &cfg.coldFactor, Parse: units.Number}, "cold-factor", "warming-up only: how many times slower than the stable rate a cold limiter starts (a `factor` of at least 1)")
	fs.Var(command.Float{P: &cfg.burst, Parse: units.Number}, "burst", "bursty only: how many `seconds` of unused permits the limiter stores")
	fs.BoolVar(&cfg.full, "full", false, "bursty only: start with the bucket full instead of empty")
	fs.BoolVar(&cfg.guava, "guava", false, "count time in whole microseconds, bit-identical to Guava 31.1 (default: nanoseconds)")
	fs.StringVar(&script, "script", "", "read operations from `file` (- for standard input) instead of the arguments")
	fs.Usage = func() {
		fmt.Fprint(fs.Output(), traceUsage)
		fs.PrintDefaults()
	}

	words, done, status := command.ParseFlags(fs, args, true, stdout, stderr)
	if done {
		return status
	}
	var err error
	cfg.set = command.Given(fs)

	var ops []op
	switch {
	case script != "" && len(words) > 0:
		fmt.Fprintln(stderr, "ratelimit trace: give the operations either as arguments or with --script, not both")
		return command.ExitUsage
	case script != "":
		ops, err = readScript(script, stdin)
	case len(words) == 0:
		ops, err = parseOps(articleOps)
	default:
		ops, err = parseOps(words)
	}
	if err != nil {
		fmt.Fprintf(stderr, "ratelimit trace: %v\n", err)
		return command.ExitUsage
	}

	clk := clocktest.NewFake()
	lim, err := cfg.newLimiter(clk)
	if err != nil {
		fmt.Fprintf(stderr, "ratelimit trace: %v\n", err)
		return command.ExitUsage
	}
	fmt.Fprintln(stdout, cfg.describe(lim))
	fmt.Fprintln(stdout)
	rows, err := replay(lim, clk, ops)
	if err != nil {
		fmt.Fprintf(stderr, "ratelimit trace: %v\n", err)
		return command.ExitFail
	}
	writeTable(stdout, rows)
	return command.ExitOK
}

func (c traceConfig) newLimiter(clk ratelimit.Clock) (*ratelimit.Limiter, error) {
	opts := []ratelimit.Option{ratelimit.WithClock(clk)}
	if c.guava {
		opts = append(opts, ratelimit.WithResolution(time.Microsecond))
	}
	if c.set["cold-factor"] {
		opts = append(opts, ratelimit.WithColdFactor(c.coldFactor))
	}
	if c.set["burst"] {
		opts = append(opts, ratelimit.WithMaxBurstSeconds(c.burst))
	}
	if c.full {
		opts = append(opts, ratelimit.WithInitiallyFull())
	}
	if c.set["warmup"] {
		return ratelimit.NewWarmingUp(c.qps, c.warmup, opts...)
	}
	return ratelimit.NewBursty(c.qps, opts...)
}

func (c traceConfig) resolution() time.Duration {
	if c.guava {
		return time.Microsecond
	}
	return time.Nanosecond
}

// describe is the heading of the table: the limiter's shape as the engine
// computed it.
func (c traceConfig) describe(lim *ratelimit.Limiter) string {
	s := lim.Snapshot()
	var b strings.Builder
	fmt.Fprintf(&b, "%v at %s permits/s", s.Kind, formatFloat(s.Rate))
	if s.Kind == smooth.WarmingUp && s.MaxPermits == 0 {
		fmt.Fprintf(&b, ", no warm-up: stable interval %s s, stores nothing (never cold, never bursts)",
			formatDuration(s.StableInterval))
	} else if s.Kind == smooth.WarmingUp {
		fmt.Fprintf(&b, ", warm-up %v, cold factor %s: stable interval %s s, cold interval %s s,\nstores up to %s permits (dearer than fresh ones above %s), starts cold",
			c.warmup, formatFloat(c.coldFactor), formatDuration(s.StableInterval),
			formatDuration(s.ColdInterval), formatFloat(s.MaxPermits), formatFloat(s.ThresholdPermits))
	} else {
		start := "starts empty"
		if c.full {
			start = "starts full"
		}
		fmt.Fprintf(&b, ": stable interval %s s, stores up to %s permits (free), %s",
			formatDuration(s.StableInterval), formatFloat(s.MaxPermits), start)
	}
	fmt.Fprintf(&b, "; time counted in %v ticks", c.resolution())
	return b.String()
}

// opKind is what an operation does.
type opKind int

const (
	opAcquire opKind = iota
	opTry
	opSleep
	opRate
)

// op is one parsed operation.
type op struct {
	kind    opKind
	permits int           // acquire, try
	d       time.Duration // sleep: how long; try: timeout
	rate    float64       // rate
}

// String is the canonical spelling, as printed in the table.
func (o op) String() string {
	switch o.kind {
	case opAcquire:
		return "acquire:" + strconv.Itoa(o.permits)
	case opTry:
		if o.d == 0 {
			return "try:" + strconv.Itoa(o.permits)
		}
		return "try:" + strconv.Itoa(o.permits) + ":" + o.d.String()
	case opSleep:
		return "sleep:" + o.d.String()
	default:
		return "rate:" + formatFloat(o.rate)
	}
}

func parseOps(words []string) ([]op, error) {
	ops := make([]op, 0, len(words))
	for _, w := range words {
		o, err := parseOp(w)
		if err != nil {
			return nil, err
		}
		ops = append(ops, o)
	}
	return ops, nil
}

// parseOp parses one word such as "acquire:3", "try:1:250ms", "sleep:1s" or
// "rate:2.5".
func parseOp(word string) (op, error) {
	name, arg, hasArg := strings.Cut(word, ":")
	bad := func(format string, a ...any) (op, error) {
		return op{}, fmt.Errorf("operation %q: %s", word, fmt.Sprintf(format, a...))
	}
	switch name {
	case "acquire":
		if !hasArg {
			return op{kind: opAcquire, permits: 1}, nil
		}
		n, err := parsePermits(arg)
		if err != nil {
			return bad("%v", err)
		}
		return op{kind: opAcquire, permits: n}, nil
	case "try":
		o := op{kind: opTry, permits: 1}
		if !hasArg {
			return o, nil
		}
		ps, ts, hasTimeout := strings.Cut(arg, ":")
		n, err := parsePermits(ps)
		if err != nil {
			return bad("%v", err)
		}
		o.permits = n
		if hasTimeout {
			if o.d, err = parseDuration(ts); err != nil {
				return bad("timeout: %v", err)
			}
		}
		return o, nil
	case "sleep":
		if !hasArg {
			return bad("want sleep:DURATION, such as sleep:1s")
		}
		d, err := parseDuration(arg)
		if err != nil {
			return bad("%v", err)
		}
		return op{kind: opSleep, d: d}, nil
	case "rate":
		if !hasArg {
			return bad("want rate:PERMITS_PER_SECOND, such as rate:2.5")
		}
		r, err := units.JobRate(arg)
		if err != nil {
			return bad("%v", err)
		}
		return op{kind: opRate, rate: r}, nil
	}
	return bad("unknown operation (want acquire:N, try:N[:TIMEOUT], sleep:DURATION or rate:R)")
}

func parsePermits(s string) (int, error) {
	n, err := strconv.Atoi(s)
	if errors.Is(err, strconv.ErrRange) {
		return 0, fmt.Errorf("%q permits: too many (at most %d)", s, math.MaxInt)
	}
	if err != nil {
		return 0, fmt.Errorf("%q is not a whole number of permits", s)
	}
	if n <= 0 {
		return 0, fmt.Errorf("permits must be positive, not %d", n)
	}
	return n, nil
}

// parseDuration accepts a Go duration ("1.5s", "250ms") or a plain number of
// seconds ("0.25"), not negative.
func parseDuration(s string) (time.Duration, error) {
	d, err := time.ParseDuration(s)
	if err != nil {
		secs, ferr := strconv.ParseFloat(s, 64)
		if ferr != nil || math.IsNaN(secs) {
			return 0, fmt.Errorf("%q is not a duration (such as 1s, 250ms or 0.25)", s)
		}
		if secs*1e9 >= math.MaxInt64 || secs*1e9 <= math.MinInt64 {
			return 0, fmt.Errorf("%q is out of range", s)
		}
		d = time.Duration(math.Round(secs * 1e9))
	}
	if d < 0 {
		return 0, fmt.Errorf("duration must not be negative, not %v", d)
	}
	return d, nil
}

// readScript reads operations from a file, or from stdin for "-".
func readScript(name string, stdin io.Reader) ([]op, error) {
	r := stdin
	label := "standard input"
	if name != "-" {
		f, err := os.Open(name)
		if err != nil {
			return nil, err
		}
		defer f.Close()
		r, label = f, name
	}
	return parseScript(r, label)
}

// parseScript parses whitespace-separated operations; "#" comments to the
// end of the line. Errors name the line.
func parseScript(r io.Reader, label string) ([]op, error) {
	var ops []op
	sc := bufio.NewScanner(r)
	for line := 1; sc.Scan(); line++ {
		text, _, _ := strings.Cut(sc.Text(), "#")
		for _, w := range strings.Fields(text) {
			o, err := parseOp(w)
			if err != nil {
				return nil, fmt.Errorf("%s:%d: %v", label, line, err)
			}
			ops = append(ops, o)
		}
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("%s: %v", label, err)
	}
	return ops, nil
}

// row is one line of the schedule.
type row struct {
	at      time.Duration // when the operation started
	op      op
	wait    time.Duration // time slept by the call (acquire, try)
	refused bool          // a try that failed
	stored  float64       // stored permits when the operation started
	left    float64       // stored permits when it ended
	next    time.Duration // from its end until the next request may proceed
}

// replay runs ops on lim, whose clock is clk, and records the schedule.
// Nothing here blocks: the fake clock moves instead of sleeping. The
// operations were validated when parsed, so an error here is a bug.
func replay(lim *ratelimit.Limiter, clk *clocktest.Fake, ops []op) ([]row, error) {
	rows := make([]row, 0, len(ops))
	for _, o := range ops {
		r := row{at: clk.Elapsed(), op: o, stored: lim.Snapshot().StoredPermits}
		var err error
		switch o.kind {
		case opAcquire:
			r.wait, err = lim.Acquire(context.Background(), o.permits)
		case opTry:
			r.refused = !lim.TryAcquire(o.permits, o.d)
			r.wait = clk.Elapsed() - r.at
		case opSleep:
			clk.Advance(o.d)
		case opRate:
			err = lim.SetRate(o.rate)
		}
		if err != nil {
			return nil, fmt.Errorf("%v at %s s: %w", o, formatDuration(r.at), err)
		}
		after := lim.Snapshot()
		r.left, r.next = after.StoredPermits, after.NextFree
		rows = append(rows, r)
	}
	return rows, nil
}

// writeTable prints rows as aligned columns; no cell contains a space, so the
// output also splits cleanly into fields.
func writeTable(w io.Writer, rows []row) {
	header := []string{"time(s)", "operation", "wait(s)", "stored", "left", "next(s)"}
	cells := [][]string{header}
	for _, r := range rows {
		wait := "-"
		switch {
		case r.refused:
			wait = "refused"
		case r.op.kind == opAcquire || r.op.kind == opTry:
			wait = formatDuration(r.wait)
		}
		cells = append(cells, []string{
			formatDuration(r.at), r.op.String(), wait,
			formatFloat(r.stored), formatFloat(r.left), formatDuration(r.next),
		})
	}
	width := make([]int, len(header))
	for _, line := range cells {
		for i, c := range line {
			width[i] = max(width[i], len(c))
		}
	}
	var b strings.Builder
	for _, line := range cells {
		for i, c := range line {
			if i > 0 {
				b.WriteString("  ")
			}
			pad := strings.Repeat(" ", width[i]-len(c))
			if i == 1 { // the operation reads best left-aligned
				b.WriteString(c + pad)
			} else {
				b.WriteString(pad + c)
			}
		}
		b.WriteString("\n")
	}
	io.WriteString(w, b.String())
}

// formatDuration prints d in seconds, exactly (up to nine decimals, trailing
// zeros dropped): 0.6875, 1.5625, 0.333333333.
func formatDuration(d time.Duration) string {
	sign := ""
	u := uint64(d)
	if d < 0 {
		sign, u = "-", uint64(-(d+1))+1
	}
	s := fmt.Sprintf("%s%d.%09d", sign, u/1e9, u%1e9)
	s = strings.TrimRight(s, "0")
	return strings.TrimSuffix(s, ".")
}

// formatFloat prints x with at most six decimals, trailing zeros dropped;
// very large or very small magnitudes in exponent form (1e+300, 1e-09).
func formatFloat(x float64) string {
	if math.IsNaN(x) || math.IsInf(x, 0) {
		return strconv.FormatFloat(x, 'f', -1, 64)
	}
	if a := math.Abs(x); a >= 1e15 || (a != 0 && a < 5e-7) {
		return strconv.FormatFloat(x, 'g', 6, 64)
	}
	s := strconv.FormatFloat(x, 'f', 6, 64)
	if strings.Contains(s, ".") {
		s = strings.TrimSuffix(strings.TrimRight(s, "0"), ".")
	}
	if s == "-0" {
		s = "0"
	}
	return s
}
