package throttle

import (
	"os"
	"runtime"
	"strings"
	"sync"
	"time"
)

// The MemoryStore's default clock reads the processor's time-stamp counter
// between two readings of the wall clock, where it would otherwise read
// the monotonic clock (time.Since). Both are the same counter: on Linux,
// when the kernel's clocksource is "tsc", CLOCK_MONOTONIC is the TSC
// scaled. The difference is the order: the vDSO reads the counter after an
// lfence (or with rdtscp), which waits for every memory reference before
// it to complete. A decision on a key that is not in cache makes two (the
// key's bytes, then its entry), and with the fence the next decision's
// cannot begin until they are done; without it they overlap, and a
// decision on one of 100 000 keys takes about half the time
// (BenchmarkMemoryAllowParts, docs/performance.md). The order does not
// matter to the decision: the clock was always read before the shard's
// lock, so two decisions could always see times in either order, and the
// store is safe when its clock steps back.
//
// The counter is scaled by what the monotonic clock measured between the
// last two wall readings (a second apart: the wall clock is read again
// every wallRefresh in any case), so it follows the monotonic clock's
// rate, NTP's slewing included, to well within a microsecond per second.
// It is used only where the kernel trusts it (clocksource "tsc", checked
// once per process), and each new wall reading checks it again: if the
// counter's idea of the elapsed time is off by more than tscMaxError from
// the monotonic clock's, the store goes back to time.Since for good.

// tscUsable reports whether this process may scale the TSC into time.
var tscUsable = sync.OnceValue(func() bool {
	if !tscArch || runtime.GOOS != "linux" {
		return false
	}
	b, err := os.ReadFile("/sys/devices/system/clocksource/clocksource0/current_clocksource")
	return err == nil && strings.TrimSpace(string(b)) == "tsc"
})

const (
	// tscMinSpan is the shortest interval between two wall readings that
	// calibrates the counter: shorter, the monotonic clock's own
	// granularity and the time between its reading and the counter's would
	// weigh too much.
	tscMinSpan = 100 * time.Millisecond
	// tscMaxError is how far the counter's elapsed time may stray from the
	// monotonic clock's over one interval before it is given up.
	tscMaxError = time.Millisecond
)

// calibrate returns the anchor of a new wall reading (t, us) taken with
// counter reading tsc, scaled from prev, the previous anchor: the counter's
// ticks per µs over the interval between them. ok is false when the
// counter disagreed with the monotonic clock over the interval by more
// than tscMaxError (the counter is then unfit: a migration between
// processors whose counters differ, a virtual machine's counter stepped).
// A first anchor has no scale (the store then reads time.Since); one after
// too short an interval keeps the previous one.
func calibrate(prev *wallAnchor, t time.Time, us int64, tsc uint64) (a *wallAnchor, ok bool) {
	a = &wallAnchor{t: t, micros: us, tsc: tsc}
	if prev == nil || prev.tsc == 0 {
		return a, true
	}
	span := t.Sub(prev.t)
	ticks := int64(tsc - prev.tsc) // negative when this reading is the earlier one
	if prev.usPerTick > 0 {
		// What the counter says the interval was, against the monotonic
		// clock.
		est := time.Duration(float64(ticks) * prev.usPerTick * float64(time.Microsecond))
		if d := est - span; d > tscMaxError || d < -tscMaxError {
			return &wallAnchor{t: t, micros: us}, false
		}
	}
	if span < tscMinSpan {
		// Too short to measure (two goroutines read the wall clock at
		// once, in either order): the previous scale holds.
		a.usPerTick, a.maxTicks = prev.usPerTick, prev.maxTicks
		return a, true
	}
	if ticks <= 0 { // the monotonic clock moved tscMinSpan, the counter did not
		return &wallAnchor{t: t, micros: us}, false
	}
	a.usPerTick = float64(span) / float64(time.Microsecond) / float64(ticks)
	a.maxTicks = uint64(float64(wallRefresh/time.Microsecond) / a.usPerTick)
	return a, true
}
