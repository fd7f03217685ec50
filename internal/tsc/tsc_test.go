package tsc

import (
	"testing"
	"testing/synctest"
	"time"
	"unsafe"
)

// TestNext: the counter's scale comes from the monotonic clock over the
// interval between two anchors, survives an interval too short to
// measure, and is given up when the counter runs backwards, stops, or
// disagrees with the monotonic clock by more than MaxError.
func TestNext(t *testing.T) {
	const hz = 2_600_000_000 // ticks per second
	at := func(d time.Duration) (int64, uint64) {
		return int64(5*time.Second + d), uint64(1e9 + float64(hz)*d.Seconds())
	}
	next := func(prev *Anchor, d time.Duration) (Anchor, bool) {
		m, c := at(d)
		return Next(prev, m, c, Refresh)
	}

	first, ok := next(nil, 0)
	if !ok || first.NsPerTick != 0 || first.TSC == 0 {
		t.Fatalf("first anchor: %+v, %v; want the counter read and no scale", first, ok)
	}
	second, ok := next(&first, 200*time.Millisecond)
	if want := 1e9 / hz; !ok || second.NsPerTick < want*(1-1e-9) || second.NsPerTick > want*(1+1e-9) {
		t.Fatalf("second anchor: %+v, %v; want %g ns per tick", second, ok, want)
	}
	if want := uint64(hz); second.MaxTicks < want-2 || second.MaxTicks > want+2 {
		t.Errorf("MaxTicks = %d, want a second's %d", second.MaxTicks, want)
	}
	if short, ok := next(&second, 210*time.Millisecond); !ok || short.NsPerTick != second.NsPerTick || short.MaxTicks != second.MaxTicks {
		t.Errorf("10 ms later: %+v, %v; want the previous scale kept", short, ok)
	}

	// The counter says 1 s and twice MaxError where the monotonic clock
	// says 1 s.
	m, _ := at(1200 * time.Millisecond)
	_, c := at(1200*time.Millisecond + 2*MaxError)
	if a, ok := Next(&second, m, c, Refresh); ok || a.TSC != 0 || a.NsPerTick != 0 {
		t.Errorf("counter %v ahead: %+v, %v; want it given up", 2*MaxError, a, ok)
	}
	_, c = at(1200*time.Millisecond - 2*MaxError)
	if a, ok := Next(&second, m, c, Refresh); ok || a.TSC != 0 {
		t.Errorf("counter %v behind: %+v, %v; want it given up", 2*MaxError, a, ok)
	}
	// Within MaxError it is kept and rescaled.
	_, c = at(1200*time.Millisecond + MaxError/2)
	if a, ok := Next(&second, m, c, Refresh); !ok || a.NsPerTick <= second.NsPerTick*0.99 || a.NsPerTick >= second.NsPerTick {
		t.Errorf("counter 0.5 ms ahead: %+v, %v; want it kept, a little slower per tick", a, ok)
	}
	// Two goroutines anchored at once, and the one that stores its anchor
	// second read a little earlier: nothing is learnt, nothing given up.
	if a, ok := next(&second, 200*time.Millisecond-time.Microsecond); !ok || a.NsPerTick != second.NsPerTick || a.TSC == 0 {
		t.Errorf("a reading 1 µs before the anchor: %+v, %v; want the counter kept with the previous scale", a, ok)
	}
	// A counter that did not move while the monotonic clock moved 200 ms,
	// before any scale was known.
	m2, _ := at(200 * time.Millisecond)
	if a, ok := Next(&first, m2, first.TSC, Refresh); ok || a.TSC != 0 || a.NsPerTick != 0 {
		t.Errorf("counter stopped: %+v, %v; want it given up", a, ok)
	}
	// Backwards, over a second.
	if a, ok := Next(&second, m, second.TSC-1, Refresh); ok || a.TSC != 0 {
		t.Errorf("counter backwards: %+v, %v; want it given up", a, ok)
	}
}

// TestAnchorElapsed: a counter reading a little behind the anchor is the
// anchor's own time, one far behind or past the anchor's life is not
// converted.
func TestAnchorElapsed(t *testing.T) {
	a := &Anchor{Mono: 7, TSC: 1 << 40, NsPerTick: 0.5, MaxTicks: 2e9}
	for _, c := range []struct {
		tsc  uint64
		want int64
		ok   bool
	}{
		{1 << 40, 0, true},
		{1<<40 + 1000, 500, true},
		{1<<40 - 1000, 0, true},       // behind by less than MaxTicks/1024
		{1<<40 - 3_000_000, 0, false}, // further behind
		{1<<40 + 2e9 - 1, 999_999_999, true},
		{1<<40 + 2e9, 0, false}, // expired
	} {
		if got, ok := a.elapsed(c.tsc); got != c.want || ok != c.ok {
			t.Errorf("elapsed(anchor%+d) = %d, %v; want %d, %v", int64(c.tsc-a.TSC), got, ok, c.want, c.ok)
		}
	}
}

// TestClockFollowsMonotonic reads Now and NowOrdered against the monotonic
// clock for 300 ms of real time (what is measured is time itself): every
// reading lies between the monotonic readings around it, within 20 µs,
// through the first anchor (monotonic) and, where the counter is usable,
// the scaled counter from MinSpan on.
func TestClockFollowsMonotonic(t *testing.T) {
	const tol = int64(20 * time.Microsecond)
	scaled := false
	for end := time.Now().Add(300 * time.Millisecond); time.Now().Before(end); {
		before := int64(time.Since(base))
		got, got2 := Now(), NowOrdered()
		after := int64(time.Since(base))
		if got < before-tol || got > after+tol || got2 < before-tol || got2 > after+tol {
			t.Fatalf("Now() = %d, NowOrdered() = %d; monotonic clock read %d before and %d after", got, got2, before, after)
		}
		if a := proc.anchor.Load(); a != nil && a.NsPerTick > 0 {
			scaled = true
		}
	}
	if scaled != Usable() {
		t.Errorf("counter scaled: %v; usable: %v", scaled, Usable())
	}
	if Usable() && proc.off.Load() {
		t.Error("the counter was given up")
	}
}

// TestFakeTime: a synctest bubble's clock is recognised as fake, and the
// real clock is not where the counter is its source.
func TestFakeTime(t *testing.T) {
	if Usable() && FakeTime() {
		t.Error("FakeTime() outside a bubble")
	}
	synctest.Test(t, func(t *testing.T) {
		if !FakeTime() {
			t.Error("FakeTime() = false inside a synctest bubble")
		}
	})
}

// BenchmarkClock compares the readings: Now (the counter unordered,
// scaled), NowOrdered (rdtscp), and the time package's time.Since, which
// reads the counter through the vDSO.
func BenchmarkClock(b *testing.B) {
	var sink int64
	b.Run("Now", func(b *testing.B) {
		for b.Loop() {
			sink += Now()
		}
	})
	b.Run("NowOrdered", func(b *testing.B) {
		for b.Loop() {
			sink += NowOrdered()
		}
	})
	b.Run("time.Since", func(b *testing.B) {
		for b.Loop() {
			sink += int64(time.Since(base))
		}
	})
	if sink == 1 {
		b.Log(sink)
	}
}

// TestInvariant: the counter is read as time where the kernel's
// clocksource is the counter, or where the processor says it is invariant
// (constant_tsc and nonstop_tsc); nowhere else.
func TestInvariant(t *testing.T) {
	const kvmFlags = "fpu vme tsc msr rdtscp lm constant_tsc rep_good nopl nonstop_tsc cpuid tsc_known_freq tsc_deadline_timer"
	for _, c := range []struct {
		name           string
		current, flags string
		want           bool
	}{
		{"clocksource tsc", "tsc\n", "fpu tsc", true},
		{"kvm-clock, invariant counter", "kvm-clock\n", kvmFlags, true},
		{"kvm-clock, counter stops in deep sleep", "kvm-clock\n", "tsc rdtscp constant_tsc", false},
		{"kvm-clock, counter rate varies", "kvm-clock\n", "tsc rdtscp nonstop_tsc", false},
		{"only flags that contain the words", "hpet\n", "tsc constant_tsc_x nonstop_tsc_y tsc_known_freq", false},
		{"nothing readable", "", "", false},
	} {
		if got := invariant(c.current, c.flags); got != c.want {
			t.Errorf("%s: invariant = %v, want %v", c.name, got, c.want)
		}
	}
}

// fakeCounter is a counter the test drives: ticks of ns of the test's
// monotonic clock at rate ticks per ns, from an arbitrary start.
type fakeCounter struct {
	mono   int64   // the monotonic clock, ns since base
	tick   float64 // the counter
	rate   float64 // ticks per ns from now on
	reads  int
	timers []fakeTimer // the clock's timers (counterClock.after), on mono
}

type fakeTimer struct {
	at int64
	f  func()
}

// advance moves the monotonic clock and the counter on by d, and runs
// the timers that are then due.
func (f *fakeCounter) advance(d time.Duration) {
	f.mono += int64(d)
	f.tick += float64(d) * f.rate
	due := f.timers
	f.timers = nil
	for _, t := range due {
		if t.at <= f.mono {
			t.f()
		} else {
			f.timers = append(f.timers, t)
		}
	}
}

func (f *fakeCounter) clock() *counterClock {
	return &counterClock{
		read:  func() uint64 { f.reads++; return uint64(f.tick) },
		mono:  func() int64 { return f.mono },
		after: func(d time.Duration, fn func()) { f.timers = append(f.timers, fakeTimer{f.mono + int64(d), fn}) },
	}
}

// now reads c as Now reads the process's clock, over c's counter.
func (c *counterClock) now() int64 {
	if a := c.anchor.Load(); a != nil && a.NsPerTick > 0 {
		if d, ok := a.elapsed(c.read()); ok {
			return a.Mono + d
		}
	}
	return c.slow()
}

// TestCounterFollowedThenGivenUp drives a clock over an injected counter:
// scaled after MinSpan, read between anchors within a microsecond of the
// monotonic clock; then the counter runs 1 % fast, and the next anchor
// finds it off by more than MaxError and gives it up for good: from then
// on the clock is the monotonic clock, and the counter is never read.
func TestCounterFollowedThenGivenUp(t *testing.T) {
	f := &fakeCounter{mono: int64(time.Hour), tick: 1e12, rate: 2.6}
	c := f.clock()
	near := func(what string, got int64) {
		t.Helper()
		if d := got - f.mono; d < -1000 || d > 1000 {
			t.Fatalf("%s: read %d, the monotonic clock is %d", what, got, f.mono)
		}
	}
	near("first reading", c.now())
	f.advance(50 * time.Millisecond)
	near("before MinSpan", c.now())
	f.advance(150 * time.Millisecond)
	near("scaling", c.now())
	if a := c.anchor.Load(); a == nil || a.NsPerTick == 0 {
		t.Fatalf("after MinSpan: anchor %+v, want a scale", a)
	}
	f.advance(500 * time.Millisecond)
	reads := f.reads
	near("from the counter", c.now())
	near("from the counter, again", c.now())
	if f.reads != reads+2 {
		t.Fatalf("between anchors the counter was read %d times for 2 readings", f.reads-reads)
	}

	f.rate *= 1.01 // the counter now runs 1 % fast
	f.advance(600 * time.Millisecond)
	// The anchor (1.1 s of the counter ago) has expired: the next anchor
	// measures 1.106 s of counter for 1.1 s of monotonic clock.
	near("at the anchor that finds the drift", c.now())
	if !c.off.Load() || c.anchor.Load() != nil {
		t.Fatalf("a counter 6 ms off over 1.1 s was not given up (anchor %+v)", c.anchor.Load())
	}
	reads = f.reads
	for range 3 {
		f.advance(time.Second)
		if got := c.now(); got != f.mono {
			t.Fatalf("given up: read %d, want the monotonic clock's %d", got, f.mono)
		}
	}
	if f.reads != reads {
		t.Errorf("the counter was read %d times after it was given up", f.reads-reads)
	}
}

// TestReadPrefetching checks that the read that also prefetches returns
// the counter, as Read does (within a few seconds of ticks of the reads
// around it), and 0 where Read does.
func TestReadPrefetching(t *testing.T) {
	var x, y, z [64]byte
	for range 100 {
		a := Read()
		b := ReadPrefetching(uintptr(unsafe.Pointer(&x)), uintptr(unsafe.Pointer(&y)), uintptr(unsafe.Pointer(&z)))
		if !arch {
			if a != 0 || b != 0 {
				t.Fatalf("Read %d, ReadPrefetching %d: want 0 where the counter is not read", a, b)
			}
			continue
		}
		if d := int64(b - a); d < -1e10 || d > 1e10 {
			t.Fatalf("ReadPrefetching %d, %d ticks from Read's %d", b, d, a)
		}
	}
}

// scaledClock is a clock over a fake counter at 2.6 ticks a ns, read
// twice 200 ms apart: its anchor scaled (MinSpan), a timer set.
func scaledClock() (*fakeCounter, *counterClock) {
	f := &fakeCounter{mono: int64(time.Hour), tick: 1e12, rate: 2.6}
	c := f.clock()
	c.now()
	f.advance(200 * time.Millisecond)
	c.now()
	return f, c
}

// TestGivenUpStaysGivenUp: a call that anchors the counter while another
// gives it up (it disagreed with the monotonic clock) does not put an
// anchor back: given up is for good. The anchoring call stored its anchor
// over the other's nil, and readers used the counter again.
func TestGivenUpStaysGivenUp(t *testing.T) {
	f, c := scaledClock()
	f.advance(1100 * time.Millisecond) // the anchor expires
	calls := 0
	read := c.read
	c.read = func() uint64 {
		v := read()
		if calls++; calls == 2 { // within this call's pair: another call runs
			saved := f.tick
			f.tick += 2e6 * 2.6 // and finds the counter 2 ms off
			c.slow()
			f.tick = saved
		}
		return v
	}
	c.now()
	c.read = read
	if !c.off.Load() {
		t.Fatal("not given up")
	}
	reads := f.reads
	f.advance(10 * time.Millisecond)
	c.now()
	if f.reads != reads || c.anchor.Load() != nil {
		t.Errorf("given up, yet an anchor is in place (%+v) and the counter was read %d more times", c.anchor.Load(), f.reads-reads)
	}
}

// TestStoppedCounterGivenUp: an anchor lives MaxTicks of the counter, so a
// counter that stops after it was scaled would keep its anchor forever,
// and the clock would stand still. The anchor also expires Refresh later
// on the monotonic clock (a timer), and the next reading then anchors,
// finds the counter unmoved and gives it up; one that slows to half its
// rate is checked after Refresh too, not after two.
func TestStoppedCounterGivenUp(t *testing.T) {
	for _, rate := range []float64{0, 0.5} {
		f, c := scaledClock()
		if a := c.anchor.Load(); a == nil || a.NsPerTick == 0 {
			t.Fatalf("after MinSpan: anchor %+v, want a scale", a)
		}
		f.rate *= rate
		f.advance(Refresh + time.Millisecond)
		if got := c.now(); got != f.mono || !c.off.Load() {
			t.Fatalf("counter at %v of its rate, %v after its anchor: read %d, want the monotonic clock's %d (given up: %v)", rate, Refresh, got, f.mono, c.off.Load())
		}
	}
}

// TestAnchorExpiredByTimer: the timer swaps the anchor it was set for for
// its expired copy (same scale, no life), and only that one: an anchor
// made meanwhile stays; the next reading after an expiry anchors again,
// with a timer of its own.
func TestAnchorExpiredByTimer(t *testing.T) {
	f, c := scaledClock()
	a := c.anchor.Load()
	if len(f.timers) != 1 || a == nil || a.MaxTicks == 0 {
		t.Fatalf("scaled anchor %+v with %d timers, want one", a, len(f.timers))
	}
	// Another anchor before a's timer is due (as a concurrent reading
	// makes one): a's timer then leaves it be.
	f.advance(300 * time.Millisecond)
	c.slow()
	b := c.anchor.Load()
	f.advance(800 * time.Millisecond) // a's timer is due, b's is not
	if got := c.anchor.Load(); got != b || b == a || len(f.timers) != 1 {
		t.Fatalf("after a's timer: anchor %+v, want b %+v (a %+v), %d timers", got, b, a, len(f.timers))
	}
	f.advance(300 * time.Millisecond) // b's
	x := c.anchor.Load()
	if x == b || x.MaxTicks != 0 || x.NsPerTick != b.NsPerTick || x.Mono != b.Mono || x.TSC != b.TSC {
		t.Fatalf("after Refresh: anchor %+v, want %+v expired", x, b)
	}
	if _, ok := x.elapsed(uint64(f.tick)); ok {
		t.Fatal("an expired anchor still reads the counter")
	}
	if got := c.now(); got != f.mono || c.off.Load() {
		t.Fatalf("read %d, want %d from a new anchor (given up: %v)", got, f.mono, c.off.Load())
	}
	if n := c.anchor.Load(); n == x || n.MaxTicks == 0 || len(f.timers) != 1 {
		t.Fatalf("new anchor %+v with %d timers", n, len(f.timers))
	}
	if Expired(&Anchor{Mono: 1, TSC: 2}) != nil {
		t.Error("Expired of an anchor without a scale")
	}
}
