package sat_test

import (
	"math"
	"testing"
	"time"

	"github.com/smoothrate/ratelimit/internal/sat"
)

// LongMath.saturatedAdd: the exact sum when it fits, else the bound on the
// side of the overflow.
func TestSaturatedAdd(t *testing.T) {
	const maxI, minI = math.MaxInt64, math.MinInt64
	cases := []struct{ a, b, want int64 }{
		{1, 2, 3},
		{-1, -2, -3},
		{maxI, 0, maxI},
		{maxI, 1, maxI},
		{maxI, maxI, maxI},
		{maxI - 1, 1, maxI},
		{maxI - 1, 2, maxI},
		{minI, 0, minI},
		{minI, -1, minI},
		{minI, minI, minI},
		{minI + 1, -1, minI},
		{minI + 1, -2, minI},
		// Opposite signs never overflow.
		{maxI, minI, -1},
		{minI, maxI, -1},
		{maxI, -1, maxI - 1},
		{minI, 1, minI + 1},
		// nextFreeTicket += wait with wait = (long)+Inf: stuck at the top.
		{123, maxI, maxI},
		// ... and a huge negative wait (never produced by the engine).
		{-123, minI, minI},
	}
	for _, c := range cases {
		if got := sat.Add(c.a, c.b); got != c.want {
			t.Errorf("Add(%d, %d) = %d, want %d", c.a, c.b, got, c.want)
		}
		if got := sat.Add(c.b, c.a); got != c.want {
			t.Errorf("Add(%d, %d) = %d, want %d (not commutative)", c.b, c.a, got, c.want)
		}
	}
}

// Sub backs the engine's CanAcquire (nextFreeTicket - timeout) and
// ReserveWait (moment - now): a - b clamped to the int64 range.
// AddUint: the exact sum when it fits, else the largest uint64.
func TestSaturatedAddUint(t *testing.T) {
	const maxU = math.MaxUint64
	for _, c := range []struct{ a, b, want uint64 }{
		{1, 2, 3},
		{0, 0, 0},
		{maxU, 0, maxU},
		{maxU - 1, 1, maxU},
		{maxU - 1, 2, maxU},
		{maxU, maxU, maxU},
		{1 << 63, 1 << 63, maxU},
		{1<<63 - 1, 1 << 63, maxU},
	} {
		if got := sat.AddUint(c.a, c.b); got != c.want {
			t.Errorf("AddUint(%d, %d) = %d, want %d", c.a, c.b, got, c.want)
		}
	}
}

func TestSaturatedSub(t *testing.T) {
	const maxI, minI = math.MaxInt64, math.MinInt64
	cases := []struct{ a, b, want int64 }{
		{5, 3, 2},
		{3, 5, -2},
		{0, 0, 0},
		{maxI, 0, maxI},
		{maxI, maxI, 0},
		{minI, minI, 0},
		{maxI, -1, maxI},
		{maxI, minI, maxI},
		{0, minI, maxI}, // -MinInt64 does not exist
		{-1, minI, maxI},
		{minI, 1, minI},
		{minI, maxI, minI},
		{-2, maxI, minI},
		{-1, maxI, minI}, // -1 - MaxInt64 == MinInt64 exactly: no overflow
		{1, minI + 1, maxI},
		// Same signs never overflow.
		{maxI, 1, maxI - 1},
		{minI, -1, minI + 1},
		// Guava's testTryAcquire_overflow: nextFree - Long.MAX_VALUE.
		{200000, maxI, 200000 - maxI},
	}
	for _, c := range cases {
		if got := sat.Sub(c.a, c.b); got != c.want {
			t.Errorf("Sub(%d, %d) = %d, want %d", c.a, c.b, got, c.want)
		}
	}
}

func TestWaitScaleDuration(t *testing.T) {
	const maxI, minI = math.MaxInt64, math.MinInt64
	for _, c := range []struct{ moment, now, want int64 }{
		{10, 3, 7}, {3, 10, 0},
		// A vanishing rate's booking, seen from a clock stepped back
		// before the origin: the plain difference wraps negative, "no
		// wait" (found by the root package's FuzzLimiter).
		{maxI, -5, maxI},
		{minI, 5, 0},
	} {
		if got := sat.Wait(c.moment, c.now); got != c.want {
			t.Errorf("Wait(%d, %d) = %d, want %d", c.moment, c.now, got, c.want)
		}
	}
	for _, c := range []struct {
		n    int64
		unit time.Duration
		want time.Duration
	}{
		{5, time.Nanosecond, 5},
		{5, time.Microsecond, 5000},
		{maxI / 1000, time.Microsecond, maxI / 1000 * 1000},
		{maxI/1000 + 1, time.Microsecond, maxI},
		{maxI, time.Nanosecond, maxI},
	} {
		if got := sat.Scale(c.n, c.unit); got != c.want {
			t.Errorf("Scale(%d, %v) = %d, want %d", c.n, c.unit, got, c.want)
		}
	}
	for _, c := range []struct {
		ns   float64
		want time.Duration
	}{
		{1.5, 1}, {math.NaN(), 0}, {math.Inf(1), maxI}, {math.Inf(-1), minI}, {1e300, maxI}, {-1e300, minI},
	} {
		if got := sat.Duration(c.ns); got != c.want {
			t.Errorf("Duration(%v) = %d, want %d", c.ns, got, c.want)
		}
	}
}
