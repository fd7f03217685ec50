// Package sat is the module's saturating arithmetic: sums, differences and
// conversions of int64 time, and sums of uint64 counts, that stop at their
// type's bounds instead of wrapping around. Limiters meet those bounds in
// earnest: a vanishing rate books a wait of math.MaxInt64 ticks, and a
// wrapped sum would read as a wait in the past, a limiter that admits
// everything; a count of hits that wrapped would read as a window with
// room. One copy serves the engine (smooth), the root package, package
// distributed, rls's counts and clocktest's fake clocks; it imports only
// the standard library, so the engine still depends on no other room.
package sat

import (
	"math"
	"time"
)

// Add returns a+b clamped to the int64 range (Guava's
// LongMath.saturatedAdd).
func Add(a, b int64) int64 {
	s := a + b
	// Overflow happened iff a and b have the same sign and s has the other one.
	if (a^b) >= 0 && (a^s) < 0 {
		if a < 0 {
			return math.MinInt64
		}
		return math.MaxInt64
	}
	return s
}

// AddUint returns a+b, or the largest uint64 where the sum would wrap: a
// count that only grows (a window's hits) stays past every limit instead
// of wrapping to a small one.
func AddUint(a, b uint64) uint64 {
	if s := a + b; s >= a {
		return s
	}
	return math.MaxUint64
}

// Sub returns a-b clamped to the int64 range.
func Sub(a, b int64) int64 {
	s := a - b
	if (a^b) < 0 && (a^s) < 0 {
		if a < 0 {
			return math.MinInt64
		}
		return math.MaxInt64
	}
	return s
}

// Wait is how long from now until moment, never negative: the wait of a
// caller at now for a booking at moment.
func Wait(moment, now int64) int64 { return max(Sub(moment, now), 0) }

// Scale returns n units as a Duration (n ≥ 0: ticks, microseconds),
// saturating at the largest Duration instead of wrapping.
func Scale(n int64, unit time.Duration) time.Duration {
	if unit == 1 {
		return time.Duration(n)
	}
	if n > int64(math.MaxInt64/unit) {
		return math.MaxInt64
	}
	return time.Duration(n) * unit
}

// Duration converts nanoseconds to a Duration, clamping what does not fit
// (an infinite interval at a vanishing rate) instead of letting Go's
// implementation-defined conversion turn it negative; NaN is 0.
func Duration(ns float64) time.Duration {
	switch {
	case ns != ns:
		return 0
	case ns >= math.MaxInt64:
		return math.MaxInt64
	case ns <= math.MinInt64:
		return math.MinInt64
	}
	return time.Duration(ns)
}
