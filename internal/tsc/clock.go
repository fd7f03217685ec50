package tsc

import (
	"sync/atomic"
	"time"
)

// base is the origin of Now: the process's start, near enough.
var base = time.Now()

// counterClock scales a counter into the monotonic clock's time since
// base: its anchor (nil until the first reading, and after the counter
// was given up) and whether it was given up. The process has one (proc),
// over the processor's counter, read by Now and NowOrdered; a test makes
// others over a counter of its own (read and mono), and reads them as Now
// does.
type counterClock struct {
	anchor atomic.Pointer[Anchor]
	off    atomic.Bool
	// read and mono, set only in tests, replace the processor's counter
	// and the monotonic clock (ns since base) where slow anchors the
	// counter; the counter is then usable and time never fake. after,
	// set only in tests, replaces time.AfterFunc (Expire).
	read  func() uint64
	mono  func() int64
	after func(time.Duration, func())
}

// proc is the process's clock, over the processor's counter.
var proc counterClock

// Since returns the monotonic time from base to t (the origin of Now).
func Since(t time.Time) int64 { return int64(t.Sub(base)) }

// Now returns the time since base in nanoseconds, read from the counter
// without a fence where it can (see the package comment), else from the
// monotonic clock. The reading may come from a little before the memory
// references that precede the call: use it where an earlier time can only
// make the caller more conservative, and NowOrdered where it must not be
// earlier than what the caller loaded before it.
//
// The counter is read only once an anchor says it is in use, and directly
// (not through proc's read, a test's): the hot path is this function.
func Now() int64 { return nowSince(0) }

// nowSince is Now − start: the hot path of Now and of
// Stopwatch.ElapsedUnordered, which calls it directly (one call fewer
// than through Now).
func nowSince(start int64) int64 {
	if a := proc.anchor.Load(); a != nil && a.NsPerTick > 0 {
		if d, ok := a.elapsed(Read()); ok {
			return a.Mono + d - start
		}
	}
	return proc.slow() - start
}

// NowOrdered is Now, read after every instruction before it has completed.
func NowOrdered() int64 {
	if a := proc.anchor.Load(); a != nil && a.NsPerTick > 0 {
		if d, ok := a.elapsed(ReadOrdered()); ok {
			return a.Mono + d
		}
	}
	return proc.slow()
}

// elapsed converts counter reading c into ns since the anchor; ok is false
// once the anchor has expired.
func (a *Anchor) elapsed(c uint64) (int64, bool) {
	d := int64(c - a.TSC)
	// The counter may read a little behind the anchor: another
	// processor's, or read before the anchor was. That is the anchor's
	// own time.
	if d < 0 && d > -int64(a.MaxTicks>>10) {
		d = 0
	}
	if uint64(d) < a.MaxTicks {
		return int64(float64(d) * a.NsPerTick), true
	}
	return 0, false
}

// slow reads the monotonic clock, and anchors the counter to it when the
// anchor is missing, due for scaling (MinSpan after the first) or expired.
// A counter that disagrees with the monotonic clock is given up for good:
// from then on only the monotonic clock is read.
func (c *counterClock) slow() int64 {
	now := c.monotonic()
	if c.off.Load() || c.read == nil && !Usable() {
		return now
	}
	prev := c.anchor.Load()
	if prev != nil && prev.NsPerTick == 0 && now-prev.Mono < int64(MinSpan) {
		return now
	}
	if c.read == nil && FakeTime() {
		// Called inside a testing/synctest bubble (base was read outside
		// it, so now means little): the counter does not follow the
		// bubble's clock, so it is not anchored to it.
		return now
	}
	now, tick := c.pair()
	next, ok := Next(prev, now, tick, Refresh)
	if !ok {
		c.off.Store(true)
		c.anchor.Store(nil)
		return now
	}
	// Only over the anchor this call began from, and not once another
	// call has given the counter up meanwhile: given up is for good.
	if c.anchor.CompareAndSwap(prev, &next) {
		if c.off.Load() {
			c.anchor.Store(nil)
		} else if next.NsPerTick > 0 {
			c.afterFunc(Refresh, func() {
				if x := Expired(&next); x != nil {
					c.anchor.CompareAndSwap(&next, x)
				}
			})
		}
	}
	return now
}

// afterFunc is time.AfterFunc, or a test's.
func (c *counterClock) afterFunc(d time.Duration, f func()) {
	if c.after != nil {
		c.after(d, f)
		return
	}
	time.AfterFunc(d, f)
}

// Expired returns a copy of a that has expired (no counter reading is in
// its life) but keeps its scale, for the next anchor to check the counter
// against, or nil when a is not scaled. An anchor's life is MaxTicks of
// the counter, which is Refresh only while the counter runs as it did: a
// counter that stops or slows would keep an anchor alive, and never be
// checked again. So whoever stores a scaled anchor also swaps it for its
// expired copy Refresh later on the monotonic clock (a timer; no read on
// the hot path), and the next reading anchors again and checks.
func Expired(a *Anchor) *Anchor {
	if a.NsPerTick <= 0 {
		return nil
	}
	x := *a
	x.MaxTicks = 0
	return &x
}

// monotonic reads the monotonic clock, in ns since base.
func (c *counterClock) monotonic() int64 {
	if c.mono != nil {
		return c.mono()
	}
	return int64(time.Since(base))
}

// pair reads the monotonic clock and the counter at the same moment (Pair).
func (c *counterClock) pair() (int64, uint64) {
	if c.read != nil {
		return c.mono(), c.read()
	}
	t, tick := Pair()
	return Since(t), tick
}

// pairGap is the most counter ticks Pair accepts between its two counter
// readings: about 1.5 µs at 2.6 GHz, where the three readings take about
// 0.1 µs.
const pairGap = 4096

// Pair reads the clock and the counter at the same moment, as near as it
// can: the counter just before and just after the clock, the mean of the
// two, read again (up to three times) while they are more than pairGap
// apart (the goroutine or the virtual processor was preempted in
// between: the pair would be off by as long, and the scale learnt from
// it, or the next one, by as much).
func Pair() (time.Time, uint64) {
	for i := 0; ; i++ {
		c1 := ReadOrdered()
		t := time.Now()
		c2 := ReadOrdered()
		if c2-c1 < pairGap || i == 3 {
			return t, c1 + (c2-c1)/2
		}
	}
}
