package smooth

import (
	"math"
	"testing"
)

// Java's (long) cast, JLS §5.1.3: NaN becomes 0, values beyond the long
// range saturate, everything else truncates toward zero. Go's int64(x) gives
// math.MinInt64 on amd64 for NaN, +Inf and 1e25, which is why javaLong
// exists; each row below is a case where a plain conversion would differ
// or where the boundary is easy to get wrong.
func TestJavaLong(t *testing.T) {
	cases := []struct {
		x    float64
		want int64
	}{
		{math.NaN(), 0},
		{-math.NaN(), 0},
		{math.Inf(1), math.MaxInt64},
		{math.Inf(-1), math.MinInt64},
		{1e25, math.MaxInt64},
		{-1e25, math.MinInt64},
		{math.MaxFloat64, math.MaxInt64},
		{-math.MaxFloat64, math.MinInt64},
		// 2^63 is the first double above the long range: saturate. The
		// largest double below it converts exactly.
		{0x1p63, math.MaxInt64},
		{math.Nextafter(0x1p63, 0), 0x1p63 - 1024},
		// -2^63 is Long.MIN_VALUE itself, and exact.
		{-0x1p63, math.MinInt64},
		{math.Nextafter(-0x1p63, 0), -0x1p63 + 1024},
		{math.Nextafter(-0x1p63, math.Inf(-1)), math.MinInt64},
		// Truncation toward zero, not floor, not rounding.
		{0.9999999999999999, 0},
		{1.5, 1},
		{2.5, 2},
		{-0.5, 0},
		{-1.5, -1},
		{-2.9, -2},
		{300227.27272727276, 300227},
		{12.5, 12}, // the 80 000 qps interval in µs (Guava issue 5290)
		{0, 0},
		{math.Copysign(0, -1), 0},
		{math.SmallestNonzeroFloat64, 0},
		{-math.SmallestNonzeroFloat64, 0},
		// Integers up to 2^53 are exact.
		{0x1p53, 1 << 53},
		{-0x1p53, -(1 << 53)},
	}
	for _, c := range cases {
		if got := javaLong(c.x); got != c.want {
			t.Errorf("javaLong(%v) = %d, want %d", c.x, got, c.want)
		}
	}
}

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
		if got := saturatedAdd(c.a, c.b); got != c.want {
			t.Errorf("saturatedAdd(%d, %d) = %d, want %d", c.a, c.b, got, c.want)
		}
		if got := saturatedAdd(c.b, c.a); got != c.want {
			t.Errorf("saturatedAdd(%d, %d) = %d, want %d (not commutative)", c.b, c.a, got, c.want)
		}
	}
}

// saturatedSub backs CanAcquire (nextFreeTicket - timeout) and
// ReserveWait (moment - now): a - b clamped to the int64 range.
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
		if got := saturatedSub(c.a, c.b); got != c.want {
			t.Errorf("saturatedSub(%d, %d) = %d, want %d", c.a, c.b, got, c.want)
		}
	}
}
