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
