package smooth

import "math"

// The helpers in this file reproduce the Java arithmetic that Guava's
// SmoothRateLimiter relies on. Go leaves float-to-int conversion of NaN,
// infinities and out-of-range values implementation defined (on amd64 they
// all become math.MinInt64), while Guava's own test suite passes through
// states where (long)NaN must be 0 and (long)+Inf must be Long.MAX_VALUE.

// javaLong converts like Java's (long) cast: truncation toward zero, NaN to 0,
// and saturation at the int64 bounds.
func javaLong(x float64) int64 {
	switch {
	case x != x:
		return 0
	case x >= 0x1p63:
		return math.MaxInt64
	case x <= -0x1p63:
		return math.MinInt64
	default:
		return int64(x)
	}
}
