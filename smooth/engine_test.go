package smooth

import (
	"fmt"
	"math"
	"testing"
)

// This file drives the engine directly, with explicit time. The traces are
// the step-by-step appendix of the Guava vector list: real Guava 31.1 was run
// on a fake clock and printed its internal state after every configuration
// step and the exact wait of every acquire. In microsecond mode the engine
// must agree bit for bit (== on float64, not a tolerance).

// state is the white-box part of a trace: Guava's fields after create or
// setRate.
type state struct {
	stored, max, stable, threshold, slope float64
}

func (s state) String() string {
	return fmt.Sprintf("stored=%v max=%v stableInterval=%v threshold=%v slope=%v", s.stored, s.max, s.stable, s.threshold, s.slope)
}

func stateOf(l *Engine) state {
	return state{l.storedPermits, l.maxPermits, l.stableInterval, l.thresholdPermits, l.slope}
}

// same compares bit for bit, so 0 differs from -0, except that every NaN
// equals every other (Java prints them all as NaN; their sign bits differ).
func same(a, b float64) bool {
	if a != a || b != b {
		return a != a && b != b
	}
	return math.Float64bits(a) == math.Float64bits(b)
}

func (s state) equal(o state) bool {
	return same(s.stored, o.stored) && same(s.max, o.max) && same(s.stable, o.stable) &&
		same(s.threshold, o.threshold) && same(s.slope, o.slope)
}

// A trace step: acquire (wait in µs), the user sleeping (ms), a silent clock
// move (µs), or setRate with the state Guava printed after it.
type step struct {
	op      string
	permits int
	n       int64 // acquire: expected wait in µs; sleep: ms; jump: µs
	rate    float64
	want    state
}

func acq(permits int, waitMicros int64) step {
	return step{op: "acquire", permits: permits, n: waitMicros}
}

// acqs is count acquire(1) steps that all wait waitMicros.
func acqs(count int, waitMicros int64) []step {
	s := make([]step, count)
	for i := range s {
		s[i] = acq(1, waitMicros)
	}
	return s
}

func sleepMs(ms int64) step { return step{op: "sleep", n: ms} }
func jumpUs(us int64) step  { return step{op: "jump", n: us} }
func setRate(r float64, want state) step {
	return step{op: "setRate", rate: r, want: want}
}

func steps(parts ...any) []step {
	var out []step
	for _, p := range parts {
		switch p := p.(type) {
		case step:
			out = append(out, p)
		case []step:
			out = append(out, p...)
		default:
			panic(fmt.Sprintf("steps: %T", p))
		}
	}
	return out
}

type trace struct {
	name string
	// construction: bursty if warmup < 0
	rate     float64
	burst    float64 // bursty maxBurstSeconds
	warmup   int64   // µs; < 0 means bursty
	cold     float64
	created  state
	steps    []step
	clockEnd int64 // Guava's clock in µs after the last step
}

var posInf = math.Inf(1)

func guavaTraces() []trace {
	nan := math.NaN()
	return []trace{
		{
			name: "testSimple", rate: 5, burst: 1, warmup: -1,
			created:  state{0, 5, 200000, 0, 0},
			steps:    steps(acq(1, 0), acq(1, 200000), acq(1, 200000)),
			clockEnd: 400000,
		},
		{
			name: "testDoubleMinValueCanAcquireExactlyOnce", rate: math.SmallestNonzeroFloat64, burst: 1, warmup: -1,
			created: state{0, math.SmallestNonzeroFloat64, posInf, 0, 0},
			// (the tryAcquire() calls are checked with CanAcquire in
			// TestMinValueRate)
			steps:    steps(acq(1, 0), sleepMs(2147483647)),
			clockEnd: 2147483647000,
		},
		{
			name: "testSimpleRateUpdate", rate: 5, warmup: 5_000_000, cold: 3,
			created:  state{25, 25, 200000, 12.5, 32000},
			steps:    steps(setRate(10, state{50, 50, 100000, 25, 8000})),
			clockEnd: 0,
		},
		{
			name: "testAcquireParameterValidation", rate: 999, burst: 1, warmup: -1,
			created: state{0, 999, 1001.001001001001, 0, 0},
		},
		{
			name: "testSimpleWithWait", rate: 5, burst: 1, warmup: -1,
			created:  state{0, 5, 200000, 0, 0},
			steps:    steps(acq(1, 0), sleepMs(200), acq(1, 0), acq(1, 200000)),
			clockEnd: 400000,
		},
		{
			name: "testSimpleAcquireEarliestAvailableIsInPast", rate: 5, burst: 1, warmup: -1,
			created:  state{0, 5, 200000, 0, 0},
			steps:    steps(acq(1, 0), sleepMs(400), acq(1, 0), acq(1, 0), acq(1, 200000)),
			clockEnd: 600000,
		},
		{
			name: "testOneSecondBurst", rate: 5, burst: 1, warmup: -1,
			created:  state{0, 5, 200000, 0, 0},
			steps:    steps(sleepMs(1000), sleepMs(1000), acq(1, 0), acq(1, 0), acq(3, 0), acq(1, 0), acq(1, 200000)),
			clockEnd: 2200000,
		},
		{
			name: "testWarmUp", rate: 2, warmup: 4_000_000, cold: 3,
			created: state{8, 8, 500000, 4, 250000},
			steps: steps(
				acq(1, 0), acq(1, 1375000), acq(1, 1125000), acq(1, 875000), acq(1, 625000), acqs(3, 500000),
				sleepMs(500), sleepMs(4000),
				acq(1, 0), acq(1, 1375000), acq(1, 1125000), acq(1, 875000), acq(1, 625000), acqs(3, 500000),
				sleepMs(500), sleepMs(2000),
				acq(1, 0), acqs(7, 500000)),
			clockEnd: 21500000,
		},
		{
			name: "testWarmUpWithColdFactor", rate: 5, warmup: 4_000_000, cold: 10,
			created: state{13.636363636363637, 13.636363636363637, 200000, 10, 494999.99999999994},
			steps: steps(
				acq(1, 0), acq(1, 1752500), acq(1, 1257500), acq(1, 762500), acq(1, 300227), acqs(3, 200000),
				sleepMs(200), sleepMs(4000),
				acq(1, 0), acq(1, 1752500), acq(1, 1257500), acq(1, 762500), acq(1, 300227), acqs(3, 200000),
				sleepMs(200), sleepMs(1000),
				acq(1, 0), acqs(7, 200000)),
			clockEnd: 16145454,
		},
		{
			name: "testWarmUpWithColdFactor1", rate: 5, warmup: 4_000_000, cold: 1,
			created:  state{30, 30, 200000, 10, 0},
			steps:    steps(acq(1, 0), acqs(7, 200000), sleepMs(340), acq(1, 0), acqs(7, 200000)),
			clockEnd: 3140000,
		},
		{
			name: "testWarmUpAndUpdate", rate: 2, warmup: 4_000_000, cold: 3,
			created: state{8, 8, 500000, 4, 250000},
			steps: steps(
				acq(1, 0), acq(1, 1375000), acq(1, 1125000), acq(1, 875000), acq(1, 625000), acqs(3, 500000),
				sleepMs(4500),
				acq(1, 0), acq(1, 1375000), acq(1, 1125000),
				setRate(4, state{10, 16, 250000, 8, 62500}),
				acq(1, 875000), acq(1, 343750), acq(1, 281250), acq(1, 250000), acq(1, 250000),
				sleepMs(4250),
				acq(1, 0), acq(1, 718750), acq(1, 656250), acq(1, 593750), acq(1, 531250), acq(1, 468750),
				acq(1, 406250), acq(1, 343750), acq(1, 281250), acq(1, 250000), acq(1, 250000)),
			clockEnd: 23250000,
		},
		{
			name: "testWarmUpAndUpdateWithColdFactor", rate: 5, warmup: 4_000_000, cold: 10,
			created: state{13.636363636363637, 13.636363636363637, 200000, 10, 494999.99999999994},
			steps: steps(
				acq(1, 0), acq(1, 1752500), acq(1, 1257500), acq(1, 762500), acq(1, 300227), acqs(3, 200000),
				sleepMs(4200),
				acq(1, 0), acq(1, 1752500), acq(1, 1257500),
				setRate(10, state{21.272727272727277, 27.272727272727273, 100000, 20, 123749.99999999999}),
				acq(1, 762500), acq(1, 195625), acq(1, 104602), acq(1, 100000), acq(1, 100000),
				sleepMs(4100),
				acq(1, 0), acq(1, 938125), acq(1, 814375), acq(1, 690625), acq(1, 566875), acq(1, 443125),
				acq(1, 319375), acq(1, 195625), acq(1, 104602), acq(1, 100000), acq(1, 100000)),
			clockEnd: 21518181,
		},
		{
			name: "testBurstyAndUpdate", rate: 1, burst: 1, warmup: -1,
			created: state{0, 1, 1000000, 0, 0},
			steps: steps(acq(1, 0), acq(1, 1000000),
				setRate(2, state{0, 2, 500000, 0, 0}),
				acq(1, 1000000), acq(2, 500000), acq(4, 1000000), acq(1, 2000000)),
			clockEnd: 5500000,
		},
		{
			name: "testSimpleWeights", rate: 1, burst: 1, warmup: -1,
			created:  state{0, 1, 1000000, 0, 0},
			steps:    steps(acq(1, 0), acq(1, 1000000), acq(2, 1000000), acq(4, 2000000), acq(8, 4000000), acq(1, 8000000)),
			clockEnd: 16000000,
		},
		{
			name: "testInfinity_Bursty", rate: posInf, burst: 1, warmup: -1,
			created: state{0, posInf, 0, 0, 0},
			steps: steps(acq(536870911, 0), acq(1073741823, 0), acq(2147483647, 0),
				setRate(2, state{2, 2, 500000, 0, 0}),
				acqs(3, 0), acqs(2, 500000),
				// 0 stored * Inf / 2 = NaN: an infinite rate keeps Guava's
				// value bit for bit, and (long)NaN must be 0.
				setRate(posInf, state{nan, posInf, 0, 0, 0}),
				acq(1, 500000), acq(1, 0), acq(1, 0)),
			clockEnd: 1500000,
		},
		{
			name: "testInfinity_BustyTimeElapsed", rate: posInf, burst: 1, warmup: -1,
			created: state{0, posInf, 0, 0, 0},
			steps: steps(jumpUs(1000),
				setRate(2, state{2, 2, 500000, 0, 0}),
				acqs(3, 0), acqs(2, 500000)),
			clockEnd: 1001000,
		},
		{
			name: "testInfinity_WarmUp", rate: posInf, warmup: 10_000_000, cold: 3,
			created: state{posInf, posInf, 0, posInf, nan},
			steps: steps(acq(536870911, 0), acq(1073741823, 0), acq(2147483647, 0),
				setRate(1, state{0, 10, 1000000, 5, 400000}),
				acq(1, 0), acqs(2, 1000000),
				setRate(posInf, state{nan, posInf, 0, posInf, nan}),
				acq(1, 1000000), acq(1, 0), acq(1, 0)),
			clockEnd: 3000000,
		},
		{
			name: "testInfinity_WarmUpTimeElapsed", rate: posInf, warmup: 10_000_000, cold: 3,
			created: state{posInf, posInf, 0, posInf, nan},
			steps: steps(jumpUs(1000),
				setRate(1, state{0, 10, 1000000, 5, 400000}),
				acq(1, 0), acqs(4, 1000000)),
			clockEnd: 4001000,
		},
		{
			name: "testVerySmallDoubleValues", rate: math.SmallestNonzeroFloat64, burst: 1, warmup: -1,
			created:  state{0, math.SmallestNonzeroFloat64, posInf, 0, 0},
			steps:    steps(acq(1, 0), sleepMs(5000)),
			clockEnd: 5000000,
		},
		{
			// Guava 13-15's testBursty: maxBurstSeconds 10.
			name: "historical testBursty", rate: 1, burst: 10, warmup: -1,
			created: state{0, 10, 1000000, 0, 0},
			steps: steps(sleepMs(10000), acq(11, 0), acq(1, 1000000), acq(1, 1000000),
				sleepMs(3000), acq(5, 0), acq(1, 3000000)),
			clockEnd: 18000000,
		},
	}
}

func newTraceEngine(tr trace, ticksPerSecond float64) Engine {
	if tr.warmup < 0 {
		return NewBursty(ticksPerSecond, tr.burst, tr.rate, 0)
	}
	return NewWarmingUp(ticksPerSecond, tr.warmup*int64(ticksPerSecond/Microsecond), tr.cold, tr.rate, 0)
}

// TestGuavaTracesMicros replays every appendix trace in microsecond mode
// and checks each wait and each printed state bit for bit.
func TestGuavaTracesMicros(t *testing.T) {
	for _, tr := range guavaTraces() {
		t.Run(tr.name, func(t *testing.T) {
			e := newTraceEngine(tr, Microsecond)
			if got := stateOf(&e); !got.equal(tr.created) {
				t.Fatalf("after create:\ngot  %v\nwant %v", got, tr.created)
			}
			now := int64(0)
			for i, s := range tr.steps {
				switch s.op {
				case "acquire":
					w := e.ReserveWait(s.permits, now)
					if w != s.n {
						t.Fatalf("step %d: acquire(%d) at %d µs waits %d µs, Guava %d", i, s.permits, now, w, s.n)
					}
					now += w
					// After a reservation the next free ticket is never in
					// the past: a (long)NaN cast to Long.MIN_VALUE instead
					// of 0 would drag it far below now.
					if e.NextFreeTicket() < now {
						t.Fatalf("step %d: nextFreeTicket %d < now %d", i, e.NextFreeTicket(), now)
					}
				case "sleep":
					now += s.n * 1000
				case "jump":
					now += s.n
				case "setRate":
					e.SetRate(s.rate, now)
					if got := stateOf(&e); !got.equal(s.want) {
						t.Fatalf("step %d: after setRate(%v):\ngot  %v\nwant %v", i, s.rate, got, s.want)
					}
				}
			}
			if now != tr.clockEnd {
				t.Fatalf("clock ends at %d µs, Guava %d", now, tr.clockEnd)
			}
		})
	}
}

// TestGuavaTracesNanos replays the same traces with nanosecond ticks. The
// dimensionless state (stored, max, threshold) is the same as in Guava for
// all of them, and every wait is Guava's to within a microsecond: it differs
// only where Guava truncated a fraction of a microsecond.
func TestGuavaTracesNanos(t *testing.T) {
	for _, tr := range guavaTraces() {
		t.Run(tr.name, func(t *testing.T) {
			e := newTraceEngine(tr, Nanosecond)
			check := func(where string, want state) {
				t.Helper()
				got := stateOf(&e)
				if !same(got.stored, want.stored) || !same(got.max, want.max) || !same(got.threshold, want.threshold) {
					t.Fatalf("%s: got %v, Guava %v", where, got, want)
				}
				// The stable interval is 1000 times Guava's, up to the last
				// bit of a division.
				if s := want.stable * 1000; !(got.stable == s || math.Abs(got.stable-s) <= s*0x1p-52) {
					t.Fatalf("%s: stable interval %v ns, Guava %v µs", where, got.stable, want.stable)
				}
			}
			check("after create", tr.created)
			now := int64(0)
			for i, s := range tr.steps {
				switch s.op {
				case "acquire":
					w := e.ReserveWait(s.permits, now)
					if d := w - s.n*1000; d <= -1000 || d >= 1000 {
						t.Fatalf("step %d: acquire(%d) waits %d ns, Guava %d µs", i, s.permits, w, s.n)
					}
					now += w
				case "sleep":
					now += s.n * 1e6
				case "jump":
					now += s.n * 1000
				case "setRate":
					e.SetRate(s.rate, now)
					check(fmt.Sprintf("step %d: setRate(%v)", i, s.rate), s.want)
				}
			}
		})
	}
}

// modes are the two resolutions of package ratelimit.
var modes = []struct {
	name string
	tps  float64 // ticks per second
	us   int64   // ticks per microsecond
}{
	{"us", Microsecond, 1},
	{"ns", Nanosecond, 1000},
}

// Double.MIN_VALUE (testDoubleMinValueCanAcquireExactlyOnce,
// testVerySmallDoubleValues): the first permit books (long)+Inf =
// Long.MAX_VALUE, so no tryAcquire succeeds again, ever.
func TestMinValueRate(t *testing.T) {
	for _, m := range modes {
		e := NewBursty(m.tps, 1, math.SmallestNonzeroFloat64, 0)
		if !e.CanAcquire(0, 0) {
			t.Fatalf("%s: first tryAcquire refused", m.name)
		}
		if w := e.ReserveWait(1, 0); w != 0 {
			t.Fatalf("%s: first permit waits %d", m.name, w)
		}
		if e.NextFreeTicket() != math.MaxInt64 {
			t.Fatalf("%s: nextFreeTicket %d, want Long.MAX_VALUE", m.name, e.NextFreeTicket())
		}
		for _, now := range []int64{0, 5_000_000 * m.us, 2147483647000 * m.us} {
			if e.CanAcquire(now, 0) {
				t.Fatalf("%s: tryAcquire granted again at %d", m.name, now)
			}
		}
		if r := e.Rate(); r != 0 {
			t.Fatalf("%s: Rate() = %v, Guava's getRate gives 0.0", m.name, r)
		}
	}
}

// Guava 31.1 with a warm-up of 0 µs computes threshold =
// max = 0, slope = +Inf (NaN with cold factor 1) and coolDown = 0/0 = NaN;
// after the first idle moment storedPermits becomes NaN and every wait is
// (long)NaN = 0: R0.00 R1.00 R1.00, idle, then R0.00 R0.00 R0.00 R0.00
// forever (Guava issues 2730, 6475). This port makes a warm limiter at the stable
// rate that stores nothing.
func TestWarmupZeroIsAWarmLimiter(t *testing.T) {
	for _, m := range modes {
		for _, cold := range []float64{3, 1, 10} {
			name := fmt.Sprintf("%s cold %v", m.name, cold)
			sec := 1_000_000 * m.us
			e := NewWarmingUp(m.tps, 0, cold, 1, 0)
			if got, want := stateOf(&e), (state{0, 0, float64(sec), 0, 0}); !got.equal(want) {
				t.Fatalf("%s: %v, want %v", name, got, want)
			}
			if c := e.CoolDownInterval(); c != float64(sec) {
				t.Fatalf("%s: coolDownInterval %v, want the stable interval (Guava: NaN)", name, c)
			}
			now := int64(0)
			for i, want := range []int64{0, sec, sec} {
				w := e.ReserveWait(1, now)
				if w != want {
					t.Fatalf("%s: acquire %d waits %d, want %d", name, i, w, want)
				}
				now += w
			}
			now += 10 * sec // idle: Guava's storedPermits turns NaN here
			if s := e.StoredPermitsAt(now); s != 0 {
				t.Fatalf("%s: stores %v permits while idle", name, s)
			}
			for i, want := range []int64{0, sec, sec, sec} {
				w := e.ReserveWait(1, now)
				if w != want {
					t.Fatalf("%s: after idle, acquire %d waits %d, want %d (Guava: 0)", name, i, w, want)
				}
				now += w
			}
			// A later setRate keeps it that way.
			e.SetRate(2, now+10*sec)
			if got, want := stateOf(&e), (state{0, 0, float64(sec) / 2, 0, 0}); !got.equal(want) {
				t.Fatalf("%s: after setRate(2): %v, want %v", name, got, want)
			}
		}
	}
}

// An infinite bursty rate. Idle time stores +Inf permits (delta / 0);
// finite -> +Inf rescales to stored*Inf/oldMax (+Inf, or NaN when nothing
// was stored; kept bit for bit since the rate is infinite); +Inf -> finite
// gives a bursty limiter a full burst and a warming-up one none (warm).
func TestInfiniteRate(t *testing.T) {
	e := NewBursty(Microsecond, 1, math.Inf(1), 0)
	if s := e.StoredPermitsAt(1); !math.IsInf(s, 1) {
		t.Fatalf("idle at +Inf stores %v, want +Inf", s)
	}
	for _, n := range []int{1, 1 << 20, math.MaxInt32} {
		if w := e.ReserveWait(n, 5); w != 0 {
			t.Fatalf("acquire(%d) at +Inf waits %d", n, w)
		}
	}

	b := NewBursty(Microsecond, 1, 1, 0)
	b.SetRate(math.Inf(1), 1_000_000) // 1 permit stored by then
	if !math.IsInf(b.StoredPermits(), 1) || !math.IsInf(b.MaxPermits(), 1) {
		t.Fatalf("1 stored, then +Inf: stored %v max %v, want +Inf +Inf", b.StoredPermits(), b.MaxPermits())
	}
	b.SetRate(2, 1_000_000)
	if got, want := stateOf(&b), (state{2, 2, 500000, 0, 0}); !got.equal(want) {
		t.Fatalf("+Inf -> 2 qps bursty: %v, want %v (a full burst)", got, want)
	}

	w := NewWarmingUp(Microsecond, 4_000_000, 3, 2, 0)
	w.SetRate(math.Inf(1), 0)
	if !math.IsInf(w.StoredPermits(), 1) {
		t.Fatalf("cold warming-up -> +Inf: stored %v, want +Inf", w.StoredPermits())
	}
	w.SetRate(2, 0)
	if got, want := stateOf(&w), (state{0, 8, 500000, 4, 250000}); !got.equal(want) {
		t.Fatalf("+Inf -> 2 qps warming-up: %v, want %v (warm)", got, want)
	}
}

// Warm-up with cold factor 100, rate -> +Inf -> 10 qps: stored goes
// +Inf, then 0 (warm, not cold).
func TestColdFactor100ThroughInfinity(t *testing.T) {
	e := NewWarmingUp(Microsecond, 10_000_000, 100, 1, 0)
	if e.StoredPermits() != e.MaxPermits() || e.MaxPermits() <= 0 {
		t.Fatalf("not cold at start: %v", stateOf(&e))
	}
	e.SetRate(math.Inf(1), 0)
	if !math.IsInf(e.StoredPermits(), 1) {
		t.Fatalf("after +Inf: stored %v, want +Inf", e.StoredPermits())
	}
	e.SetRate(10, 0)
	if e.StoredPermits() != 0 || e.MaxPermits() <= 0 {
		t.Fatalf("after 10 qps: %v, want stored 0", stateOf(&e))
	}
	if w := e.ReserveWait(1, 0); w != 0 {
		t.Fatalf("first wait %d", w)
	}
	if w := e.ReserveWait(1, 0); w != 100_000 {
		t.Fatalf("warm limiter waits %d µs, want the stable 100000", w)
	}
}

// The engine replaces a NaN or +Inf stored count left by a FINITE setRate
// (deviation from Guava; at an infinite rate Guava's values are kept, see
// the infinity traces). By the formulas of Guava's doSetRate, bursty
// setRate(Double.MAX_VALUE) with a full bucket followed by setRate(1.7e308)
// stores MAX*1.7e308/MAX = +Inf (real Guava 31.1 prints stored=Infinity),
// and every later rate keeps +Inf: an unlimited burst even at 1 qps. Here
// a bursty limiter drops such a value to 0 (its stored permits are free, so
// 0 is the safe end).
func TestSanitizeStoredAfterFiniteSetRateBursty(t *testing.T) {
	e := NewBursty(Microsecond, 1, math.MaxFloat64, 0)
	e.Fill()
	e.SetRate(1.7e308, 0)
	if e.StoredPermits() != 0 || e.MaxPermits() != 1.7e308 {
		t.Fatalf("stored %v max %v; want 0 and 1.7e308 (Guava: +Inf)", e.StoredPermits(), e.MaxPermits())
	}
	e.SetRate(1, 0)
	now := int64(0)
	for i, want := range []int64{0, 1_000_000, 1_000_000} {
		w := e.ReserveWait(1, now)
		if w != want {
			t.Fatalf("acquire %d at 1 qps waits %d, want %d", i, w, want)
		}
		now += w
	}
}

// The warming-up twin: a warm-up limiter at 1e308 qps (max 1e308) set to
// 1.7e308 would store +Inf (the product overflows). By Guava's formulas a
// later finite rate keeps +Inf and the next reservation prices an infinite
// trapezoid, (long)+Inf = Long.MAX_VALUE: the limiter never grants again.
// Here a warming-up limiter takes max instead (stored permits are dear, so
// full is the safe end), and lower rates work normally.
func TestSanitizeStoredAfterFiniteSetRateWarmingUp(t *testing.T) {
	e := NewWarmingUp(Microsecond, 1_000_000, 3, 1e308, 0)
	if math.IsInf(e.MaxPermits(), 0) || e.StoredPermits() != e.MaxPermits() {
		t.Fatalf("setup: %v", stateOf(&e))
	}
	e.SetRate(1.7e308, 0)
	if s := e.StoredPermits(); math.IsInf(s, 0) || s != s || s != e.MaxPermits() {
		t.Fatalf("stored %v max %v; want stored == max, finite (Guava: +Inf)", s, e.MaxPermits())
	}
	e.SetRate(1, 0)
	// 1 qps, 1 s warm-up, cold factor 3: threshold 0.5, max 1, cold (full).
	if got, want := stateOf(&e), (state{1, 1, 1_000_000, 0.5, 4_000_000}); !got.equal(want) {
		t.Fatalf("at 1 qps: %v, want %v", got, want)
	}
	if w := e.ReserveWait(1, 0); w != 0 {
		t.Fatalf("first wait %d", w)
	}
	// The full bucket's price: trapezoid 1 -> 0.5 (3 s and 1 s intervals)
	// = 1 s, plus 0.5 permit at 1 s.
	if w := e.ReserveWait(1, 0); w != 1_500_000 {
		t.Fatalf("second wait %d µs, want 1500000", w)
	}
}

// Rates so high that every price truncates to 0 ticks.
func TestHugeRates(t *testing.T) {
	for _, m := range modes {
		for _, r := range []float64{math.MaxFloat64, 1e300} {
			e := NewBursty(m.tps, 1, r, 0)
			for i := range 3 {
				if w := e.ReserveWait(math.MaxInt32, 0); w != 0 {
					t.Fatalf("%s rate %v: acquire %d waits %d", m.name, r, i, w)
				}
			}
			if got := e.Rate(); got != r {
				t.Fatalf("%s: Rate() = %v, want %v exactly", m.name, got, r)
			}
		}
	}
}

// Guava's getRate is computed back from the stable interval. In microsecond
// mode the values are Guava's; nanosecond ticks round differently.
func TestRateRoundTrip(t *testing.T) {
	cases := []struct {
		rate, us, ns float64
	}{
		{7, 6.999999999999999, 7},
		{3, 3, 3},
		{0.1, 0.1, 0.1},
		{0.3, 0.3, 0.3},
		{1e-7, 1e-7, 1e-7},
		{0.35, 0.35, 0.3499999999999999},
		{math.SmallestNonzeroFloat64, 0, 0},
		{math.Inf(1), math.Inf(1), math.Inf(1)},
		{math.MaxFloat64, math.MaxFloat64, math.MaxFloat64},
	}
	for _, c := range cases {
		for _, m := range modes {
			want := c.us
			if m.us != 1 {
				want = c.ns
			}
			b := NewBursty(m.tps, 1, c.rate, 0)
			w := NewWarmingUp(m.tps, 4_000_000*m.us, 3, c.rate, 0)
			if got := b.Rate(); got != want {
				t.Errorf("%s bursty %v: Rate() = %v, want %v", m.name, c.rate, got, want)
			}
			if got := w.Rate(); got != want {
				t.Errorf("%s warming-up %v: Rate() = %v, want %v", m.name, c.rate, got, want)
			}
		}
	}
}

// 1e-10 qps and acquire(Integer.MAX_VALUE): (long)(2.1e25) saturates,
// nextFreeTicket sticks at Long.MAX_VALUE (sat.Add), and the next
// request would wait Long.MAX_VALUE - now.
func TestSaturatedBooking(t *testing.T) {
	for _, m := range modes {
		e := NewBursty(m.tps, 1, 1e-10, 0)
		if w := e.ReserveWait(math.MaxInt32, 0); w != 0 {
			t.Fatalf("%s: first wait %d", m.name, w)
		}
		if e.NextFreeTicket() != math.MaxInt64 {
			t.Fatalf("%s: nextFreeTicket %d, want MaxInt64", m.name, e.NextFreeTicket())
		}
		if w := e.ReserveWait(1, 5); w != math.MaxInt64-5 {
			t.Fatalf("%s: next wait %d, want MaxInt64-5", m.name, w)
		}
		if e.NextFreeTicket() != math.MaxInt64 {
			t.Fatalf("%s: nextFreeTicket moved to %d", m.name, e.NextFreeTicket())
		}
		if e.CanAcquire(1e15, 0) {
			t.Fatalf("%s: tryAcquire() granted", m.name)
		}
		// nextFree - Long.MAX_VALUE <= now: the subtraction cannot overflow.
		if !e.CanAcquire(0, math.MaxInt64) {
			t.Fatalf("%s: tryAcquire(Long.MAX_VALUE) refused", m.name)
		}
	}
}

// 1 qps, acquire(Integer.MAX_VALUE) books 2147483647 s; the
// tryAcquire boundary is <=.
func TestTryAcquireBoundary(t *testing.T) {
	for _, m := range modes {
		e := NewBursty(m.tps, 1, 1, 0)
		e.ReserveWait(math.MaxInt32, 0)
		next := int64(2147483647_000_000) * m.us
		if e.NextFreeTicket() != next {
			t.Fatalf("%s: nextFreeTicket %d, want %d", m.name, e.NextFreeTicket(), next)
		}
		if e.CanAcquire(0, next-1) {
			t.Fatalf("%s: timeout one tick short granted", m.name)
		}
		if !e.CanAcquire(0, next) {
			t.Fatalf("%s: exact timeout refused", m.name)
		}
		// A negative timeout counts as 0.
		if e.CanAcquire(next-1, math.MinInt64) || !e.CanAcquire(next, -1) {
			t.Fatalf("%s: negative timeouts", m.name)
		}
	}
}

// A clock that steps back never resyncs: the next wait is longer and
// no permits are made or lost. Guava 31.1: now moved back 3 s -> waits 4 s.
func TestClockBackwards(t *testing.T) {
	for _, m := range modes {
		sec := 1_000_000 * m.us
		e := NewBursty(m.tps, 1, 1, 0)
		e.ReserveWait(1, 0)
		if w := e.ReserveWait(1, -3*sec); w != 4*sec {
			t.Fatalf("%s: waits %d, want %d", m.name, w, 4*sec)
		}
		if e.StoredPermits() != 0 || e.NextFreeTicket() != 2*sec {
			t.Fatalf("%s: stored %v next %d", m.name, e.StoredPermits(), e.NextFreeTicket())
		}
	}
}

// NextFreeTicket starts at 0, not at now, so an engine made at a
// negative time makes its first request wait until time 0.
func TestNegativeStart(t *testing.T) {
	for _, m := range modes {
		sec := 1_000_000 * m.us
		b := NewBursty(m.tps, 1, 1, -2*sec)
		if w := b.ReserveWait(1, -2*sec); w != 2*sec {
			t.Fatalf("%s bursty: first wait %d, want %d", m.name, w, 2*sec)
		}
		w := NewWarmingUp(m.tps, 4*sec, 3, 2, -2*sec)
		if got := w.ReserveWait(1, -2*sec); got != 2*sec {
			t.Fatalf("%s warming-up: first wait %d, want %d", m.name, got, 2*sec)
		}
	}
}

// MaxBurstSeconds 0 is a metronome; 2.5 at 2 qps is a burst of 5.
// (+Inf is rejected by package ratelimit.)
func TestMaxBurstSeconds(t *testing.T) {
	for _, m := range modes {
		half := 500_000 * m.us
		e := NewBursty(m.tps, 0, 2, 0)
		if e.MaxPermits() != 0 {
			t.Fatalf("%s: max %v", m.name, e.MaxPermits())
		}
		now := 10 * 2 * half // idle for 10 s
		if s := e.StoredPermitsAt(now); s != 0 {
			t.Fatalf("%s: a metronome stored %v", m.name, s)
		}
		for i, want := range []int64{0, half, half} {
			if w := e.ReserveWait(1, now); w != want {
				t.Fatalf("%s metronome: acquire %d waits %d, want %d", m.name, i, w, want)
			} else {
				now += w
			}
		}
		// At an infinite rate the metronome stays a metronome (0 * Inf
		// would be NaN).
		e.SetRate(math.Inf(1), now)
		if e.MaxPermits() != 0 {
			t.Fatalf("%s: metronome at +Inf has max %v", m.name, e.MaxPermits())
		}

		b := NewBursty(m.tps, 2.5, 2, 0)
		now = 10 * 2 * half
		waits := []int64{0, 0, 0, 0, 0, 0, half, half}
		for i, want := range waits {
			if w := b.ReserveWait(1, now); w != want {
				t.Fatalf("%s burst 2.5 s: acquire %d waits %d, want %d", m.name, i, w, want)
			} else {
				now += w
			}
		}
	}
}

// The warm-up example of Guava's documentation: setRate keeps the
// stored fraction.
func TestRescaleKeepsFraction(t *testing.T) {
	b := NewBursty(Microsecond, 1, 1, 0)
	b.SetRate(4, 1_000_000) // 1 permit stored by then
	if b.StoredPermits() != 4 {
		t.Fatalf("bursty 1 -> 4 qps: stored %v, want 4", b.StoredPermits())
	}
	b.SetRate(2, 1_000_000)
	if b.StoredPermits() != 2 {
		t.Fatalf("bursty 4 -> 2 qps: stored %v, want 2", b.StoredPermits())
	}

	w := NewWarmingUp(Microsecond, 4_000_000, 3, 2, 0)
	w.SetRate(4, 0)
	if w.StoredPermits() != 16 || w.MaxPermits() != 16 {
		t.Fatalf("warming-up 2 -> 4 qps: %v, want 16/16", stateOf(&w))
	}
	w.SetRate(1, 0)
	if w.StoredPermits() != 4 || w.MaxPermits() != 4 {
		t.Fatalf("warming-up 4 -> 1 qps: %v, want 4/4", stateOf(&w))
	}
}

// From cold, acquire(100) is free and the next request pays for all
// of it: 4 s (trapezoid 8 -> 4) + 2 s (4 -> 0) + 92 x 0.5 s = 52 s.
func TestWarmUpBigRequest(t *testing.T) {
	for _, m := range modes {
		e := NewWarmingUp(m.tps, 4_000_000*m.us, 3, 2, 0)
		if w := e.ReserveWait(100, 0); w != 0 {
			t.Fatalf("%s: acquire(100) waits %d", m.name, w)
		}
		if w := e.ReserveWait(1, 0); w != 52_000_000*m.us {
			t.Fatalf("%s: next waits %d, want 52 s", m.name, w)
		}
	}
}

// An idle gap shorter than the debt refills nothing.
func TestNoRefillWhileInDebt(t *testing.T) {
	for _, m := range modes {
		e := NewWarmingUp(m.tps, 4_000_000*m.us, 3, 2, 0)
		// From cold, acquire(10) books 4 s + 2 s + 2 x 0.5 s = 7 s.
		e.ReserveWait(10, 0)
		now := 2_300_000 * m.us
		if s := e.StoredPermitsAt(now); s != 0 {
			t.Fatalf("%s: %v stored while in debt", m.name, s)
		}
		for i, want := range []int64{4_700_000, 500_000, 500_000} {
			w := e.ReserveWait(1, now)
			if w != want*m.us {
				t.Fatalf("%s: acquire %d waits %d, want %d µs", m.name, i, w, want)
			}
			now += w
		}
	}
}

// The debt booked before setRate is paid at the old rate.
func TestSetRateInDebt(t *testing.T) {
	for _, m := range modes {
		e := NewBursty(m.tps, 1, 0.1, 0)
		e.ReserveWait(1, 0) // books 10 s
		e.SetRate(100, 0)
		if w := e.ReserveWait(1, 0); w != 10_000_000*m.us {
			t.Fatalf("%s: waits %d, want the old 10 s", m.name, w)
		}
		if w := e.ReserveWait(1, 10_000_000*m.us); w != 10_000*m.us {
			t.Fatalf("%s: waits %d, want the new 10 ms", m.name, w)
		}
	}
}

// Guava issue 5290: at 80 000 qps a permit costs 12.5 µs. Guava mode
// books 12 µs per acquire(1) (4% too fast) and 25 µs per acquire(2); the
// default nanosecond mode books 12 500 ns.
func TestTruncationAt80kQPS(t *testing.T) {
	cases := []struct {
		tps          float64
		one, two     int64
		perMillionNs int64 // nextFree after 1e6 acquire(1), in ns
	}{
		{Microsecond, 12, 25, 12_000_000_000},
		{Nanosecond, 12_500, 25_000, 12_500_000_000},
	}
	for _, c := range cases {
		e := NewBursty(c.tps, 1, 80000, 0)
		e.ReserveWait(1, 0)
		if got := e.NextFreeTicket(); got != c.one {
			t.Fatalf("tps %v: acquire(1) books %d ticks, want %d", c.tps, got, c.one)
		}
		e2 := NewBursty(c.tps, 1, 80000, 0)
		e2.ReserveWait(2, 0)
		if got := e2.NextFreeTicket(); got != c.two {
			t.Fatalf("tps %v: acquire(2) books %d ticks, want %d", c.tps, got, c.two)
		}
		e3 := NewBursty(c.tps, 1, 80000, 0)
		for range 1_000_000 {
			e3.ReserveWait(1, 0)
		}
		if got := e3.NextFreeTicket() * int64(Nanosecond/c.tps); got != c.perMillionNs {
			t.Fatalf("tps %v: a million permits take %d ns, want %d", c.tps, got, c.perMillionNs)
		}
	}
}

// The cool-down interval: the stable interval for bursty limiters and for
// cold factor 3, W/max otherwise (values from real Guava 31.1).
func TestCoolDownInterval(t *testing.T) {
	cases := []struct {
		e    Engine
		want float64
	}{
		{NewBursty(Microsecond, 1, 5, 0), 200000},
		{NewWarmingUp(Microsecond, 4_000_000, 3, 2, 0), 500000},
		{NewWarmingUp(Microsecond, 4_000_000, 10, 5, 0), 293333.3333333333},
		{NewWarmingUp(Microsecond, 4_000_000, 1, 5, 0), 133333.33333333334},
	}
	for i, c := range cases {
		if got := c.e.CoolDownInterval(); got != c.want {
			t.Errorf("case %d: coolDownInterval %v, want %v", i, got, c.want)
		}
	}
}

// Reservations can be given back exactly, but only while they are the last
// change to the engine.
func TestCancel(t *testing.T) {
	e := NewWarmingUp(Microsecond, 4_000_000, 3, 2, 0)
	e.ReserveWait(1, 0)
	// At 9 s the limiter has refilled; remember the state after a resync.
	before := e
	before.resync(9_000_000)
	moment, undo := e.Reserve(3, 9_000_000)
	if moment != 9_000_000 {
		t.Fatalf("moment %d", moment)
	}
	if e.NextFreeTicket() == before.NextFreeTicket() || e.StoredPermits() == before.StoredPermits() {
		t.Fatal("the reservation changed nothing")
	}
	if !e.Cancel(undo) {
		t.Fatal("Cancel of the latest reservation failed")
	}
	if e.NextFreeTicket() != before.NextFreeTicket() || !same(e.StoredPermits(), before.StoredPermits()) {
		t.Fatalf("after Cancel: next %d stored %v, want %d %v", e.NextFreeTicket(), e.StoredPermits(), before.NextFreeTicket(), before.StoredPermits())
	}
	if e.Cancel(undo) {
		t.Fatal("second Cancel succeeded")
	}
	if e.Cancel(Undo{}) {
		t.Fatal("Cancel of the zero Undo succeeded")
	}

	// Anything in between makes the reservation permanent.
	for name, between := range map[string]func(*Engine){
		"reserve": func(l *Engine) { l.Reserve(1, 9_000_000) },
		"setRate": func(l *Engine) { l.SetRate(3, 9_000_000) },
		"fill":    func(l *Engine) { l.Fill() },
		"cancel of a later one": func(l *Engine) {
			_, u := l.Reserve(1, 9_000_000)
			l.Cancel(u)
		},
	} {
		l := NewBursty(Microsecond, 1, 1, 0)
		_, u := l.Reserve(1, 0)
		between(&l)
		snap := l
		if l.Cancel(u) {
			t.Fatalf("%s: Cancel succeeded", name)
		}
		if l != snap {
			t.Fatalf("%s: a refused Cancel changed the engine", name)
		}
	}
}

// The read-only accessors do not change the engine (StoredPermitsAt works
// on a copy).
func TestQueriesDoNotMutate(t *testing.T) {
	e := NewWarmingUp(Microsecond, 4_000_000, 3, 2, 0)
	e.ReserveWait(1, 0)
	snap := e
	_ = e.StoredPermitsAt(100_000_000)
	_ = e.CanAcquire(100_000_000, 5)
	_ = e.NextFreeTicket()
	_ = e.Rate()
	_ = e.CoolDownInterval()
	if e != snap {
		t.Fatal("a query changed the engine")
	}
	if got := e.StoredPermitsAt(100_000_000); got != 8 {
		t.Fatalf("StoredPermitsAt after long idle = %v, want max 8", got)
	}
}

func TestAccessors(t *testing.T) {
	b := NewBursty(Nanosecond, 2.5, 4, 0)
	if b.Kind() != Bursty || b.Kind().String() != "SmoothBursty" || b.MaxBurstSeconds() != 2.5 ||
		b.TicksPerSecond() != Nanosecond || b.WarmupPeriod() != 0 || b.ColdFactor() != 0 ||
		b.MaxPermits() != 10 || b.StableInterval() != 250_000_000 || b.ThresholdPermits() != 0 || b.Slope() != 0 {
		t.Fatalf("bursty accessors: %+v", b)
	}
	b.Fill()
	if b.StoredPermits() != 10 {
		t.Fatalf("Fill: stored %v", b.StoredPermits())
	}
	w := NewWarmingUp(Microsecond, 4_000_000, 3, 2, 0)
	if w.Kind() != WarmingUp || w.Kind().String() != "SmoothWarmingUp" || w.WarmupPeriod() != 4_000_000 ||
		w.ColdFactor() != 3 || w.MaxBurstSeconds() != 0 || w.ThresholdPermits() != 4 || w.Slope() != 250000 {
		t.Fatalf("warming-up accessors: %+v", w)
	}
}

// TestMinPredicted: minPredicted is the builtin min to the bit, NaN and
// signed zeros included.
func TestMinPredicted(t *testing.T) {
	vals := []float64{math.NaN(), math.Inf(-1), -1e308, -1, math.Copysign(0, -1), 0, 5e-324, 1, 1e9, math.MaxFloat64, math.Inf(1)}
	for _, a := range vals {
		for _, b := range vals {
			if got, want := minPredicted(a, b), min(a, b); math.Float64bits(got) != math.Float64bits(want) {
				t.Errorf("minPredicted(%v, %v) = %v (%#x), min gives %v (%#x)", a, b, got, math.Float64bits(got), want, math.Float64bits(want))
			}
		}
	}
}
