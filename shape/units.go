package shape

import (
	"errors"
	"fmt"
	"math"
	"strconv"
	"strings"

	"github.com/smoothrate/ratelimit/internal/units"
)

// ParseSize parses a byte count such as "64KiB", "1.5M", "8Mbit" or "1e6"
// (no "/s"). The units:
//
//	number   500, 1.5, .25, 1e9
//	prefix   k or K = 1000, M = 1000², G = 1000³, T = 1000⁴, P = 1000⁵, E = 1000⁶
//	         Ki = 1024, Mi = 1024², Gi = 1024³, Ti = 1024⁴, Pi = 1024⁵, Ei = 1024⁶
//	unit     B, or nothing = bytes; b, bit or bits = bits (÷ 8)
//	per      rates only, optional: /s, or ps after a unit (Mbps)
//
// Lower-case m is refused rather than guessed (milli or mega?). It is the
// grammar of the ratelimit command too, and of jobs.ParseRate's numbers. A
// fractional count of bytes is rounded to the nearest byte. The result is
// at least 0; a negative or too large size wraps ErrRange, anything
// malformed wraps ErrSyntax.
func ParseSize(s string) (int64, error) {
	n, err := units.Size(s)
	return n, unitError(err)
}

// ParseRate parses a rate in bytes per second such as "500k", "1MiB/s",
// "10MB/s", "2Gbit", "100Mbps" or "1e9" (see ParseSize for the units; "/s"
// is optional). "inf" and "unlimited" give +Inf. The rate must be positive:
// zero, a negative rate or one too large for a float64 wraps ErrRange,
// anything malformed wraps ErrSyntax.
func ParseRate(s string) (float64, error) {
	r, err := units.ByteRate(s)
	return r, unitError(err)
}

// unitError puts this package's sentinel on an error of the unit parser.
func unitError(err error) error {
	if err == nil {
		return nil
	}
	sentinel := ErrSyntax
	if errors.Is(err, units.ErrRange) {
		sentinel = ErrRange
	}
	return fmt.Errorf("%w: %w", sentinel, err)
}

var siPrefixes = []string{"", "k", "M", "G", "T", "P", "E"}

// FormatSize prints a byte count with three significant digits and an SI
// prefix: "999 B", "1.50 kB", "12.3 MB". ParseSize reads it back (to within
// its rounding).
func FormatSize(n int64) string {
	if n < 0 {
		return "-" + formatSI(-float64(n)) + "B"
	}
	return formatSI(float64(n)) + "B"
}

// FormatRate prints a rate in bytes per second like FormatSize, with "/s":
// "1.00 MB/s". ParseRate reads it back (to within its rounding). +Inf prints
// as "unlimited".
func FormatRate(bytesPerSecond float64) string {
	switch {
	case math.IsInf(bytesPerSecond, 1):
		return "unlimited"
	case math.IsNaN(bytesPerSecond) || bytesPerSecond < 0:
		return strconv.FormatFloat(bytesPerSecond, 'g', -1, 64) + " B/s"
	}
	return formatSI(bytesPerSecond) + "B/s"
}

// formatSI prints x ≥ 0 with three significant digits and the prefix that
// keeps the number under 1000, followed by a space.
func formatSI(x float64) string {
	if x < 999.5 {
		if x == math.Trunc(x) || x == 0 {
			return strconv.FormatFloat(x, 'f', 0, 64) + " "
		}
		// Three significant digits, in plain decimals (ParseRate reads
		// no exponents). The decimal exponent is strconv's, after the
		// rounding to three digits (0.0009996 is 0.00100); math.Log10
		// is off for subnormals (about -308 for all of them).
		e := strconv.FormatFloat(x, 'e', 2, 64) // "4.94e-324"
		exp, _ := strconv.Atoi(e[strings.IndexByte(e, 'e')+1:])
		return strconv.FormatFloat(x, 'f', max(0, 2-exp), 64) + " "
	}
	i := 0
	for i < len(siPrefixes)-1 && x >= 999.5 {
		x /= 1000
		i++
	}
	prec := 0
	switch {
	case x < 9.995:
		prec = 2
	case x < 99.95:
		prec = 1
	}
	return strconv.FormatFloat(x, 'f', prec, 64) + " " + siPrefixes[i]
}
