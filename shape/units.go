package shape

import (
	"fmt"
	"math"
	"math/big"
	"strconv"
	"strings"
)

// The units of sizes and rates, as a user types them:
//
//	number   digits with an optional decimal point: 500, 1.5, .25
//	prefix   k or K = 1000, M = 1000², G = 1000³, T = 1000⁴, P = 1000⁵, E = 1000⁶
//	         Ki = 1024, Mi = 1024², Gi = 1024³, Ti = 1024⁴, Pi = 1024⁵, Ei = 1024⁶
//	unit     B, or nothing = bytes; b, bit or bits = bits (÷ 8)
//	per      rates only, optional: /s, or ps after a unit (Mbps)
//
// Examples: 500k (500 000 bytes), 1MiB (1 048 576 bytes), 10MB/s,
// 2Gbit (250 000 000 bytes), 100Mbps. Lower-case m is refused rather than
// guessed (milli or mega?). Spaces around the number are allowed.

// maxUnitInput bounds the length of what ParseSize and ParseRate accept,
// so that a hostile string cannot make them do big-number work. It admits
// everything FormatRate and FormatSize print: the longest is FormatRate of
// the smallest float64, 332 characters (a rate takes no exponent). No
// exponent is read either, so the work grows only with the length.
const maxUnitInput = 400

// ParseSize parses a byte count such as "64KiB", "1.5M" or "8Mbit" (see the
// units above; no "/s"). A fractional count of bytes is rounded to the
// nearest byte. The result is at least 0; a negative or too large size
// wraps ErrRange, anything malformed wraps ErrSyntax.
func ParseSize(s string) (int64, error) {
	v, per, err := parseQuantity(s)
	if err != nil {
		return 0, err
	}
	if per {
		return 0, fmt.Errorf("%w: %q: a size takes no \"/s\"", ErrSyntax, s)
	}
	if v.Sign() < 0 {
		return 0, fmt.Errorf("%w: %q: a size cannot be negative", ErrRange, s)
	}
	// Round half up: floor(v + 1/2).
	half := new(big.Rat).Add(v, big.NewRat(1, 2))
	n := new(big.Int).Quo(half.Num(), half.Denom())
	if !n.IsInt64() {
		return 0, fmt.Errorf("%w: %q: more than %d bytes", ErrRange, s, int64(math.MaxInt64))
	}
	return n.Int64(), nil
}

// ParseRate parses a rate in bytes per second such as "500k", "1MiB/s",
// "10MB/s", "2Gbit" or "100Mbps" (see the units above; "/s" is optional).
// "inf" and "unlimited" give +Inf. The rate must be positive: zero or a
// negative rate wraps ErrRange, anything malformed wraps ErrSyntax.
func ParseRate(s string) (float64, error) {
	switch strings.TrimSpace(s) {
	case "inf", "Inf", "unlimited":
		return math.Inf(1), nil
	}
	v, _, err := parseQuantity(s)
	if err != nil {
		return 0, err
	}
	if v.Sign() <= 0 {
		return 0, fmt.Errorf("%w: %q: a rate must be positive", ErrRange, s)
	}
	r, _ := v.Float64()
	if math.IsInf(r, 0) {
		return 0, fmt.Errorf("%w: %q: too large", ErrRange, s)
	}
	return r, nil
}

var decimalPrefixes = map[byte]int64{'k': 1e3, 'K': 1e3, 'M': 1e6, 'G': 1e9, 'T': 1e12, 'P': 1e15, 'E': 1e18}

// parseQuantity parses number, prefix, unit and per, and returns the
// quantity in bytes, exactly, and whether a "/s" was given.
func parseQuantity(s string) (v *big.Rat, per bool, err error) {
	orig := s
	if len(s) > maxUnitInput {
		return nil, false, fmt.Errorf("%w: %.20q…: longer than %d characters", ErrSyntax, s, maxUnitInput)
	}
	s = strings.TrimSpace(s)
	neg := strings.HasPrefix(s, "-")
	if neg {
		s = s[1:]
	}
	i, dots := 0, 0
	for i < len(s) && (s[i] >= '0' && s[i] <= '9' || s[i] == '.') {
		if s[i] == '.' {
			dots++
		}
		i++
	}
	num, rest := s[:i], strings.TrimSpace(s[i:])
	if num == "" || num == "." || dots > 1 {
		return nil, false, fmt.Errorf("%w: %q: want a number and a unit, like 500k or 1MiB/s", ErrSyntax, orig)
	}
	v, ok := new(big.Rat).SetString(num)
	if !ok {
		return nil, false, fmt.Errorf("%w: %q: bad number %q", ErrSyntax, orig, num)
	}
	if neg {
		v.Neg(v)
	}

	unitErr := func(why string) error {
		return fmt.Errorf("%w: %q: %s (units: k M G T P E = 1000ⁿ, Ki Mi Gi Ti Pi Ei = 1024ⁿ, B = bytes, b or bit = bits, optional /s)", ErrSyntax, orig, why)
	}
	// The prefix.
	if rest != "" {
		if m, ok := decimalPrefixes[rest[0]]; ok {
			if strings.HasPrefix(rest[1:], "i") {
				var exp int
				switch rest[0] {
				case 'k', 'K':
					exp = 1
				case 'M':
					exp = 2
				case 'G':
					exp = 3
				case 'T':
					exp = 4
				case 'P':
					exp = 5
				case 'E':
					exp = 6
				}
				v.Mul(v, new(big.Rat).SetInt(new(big.Int).Lsh(big.NewInt(1), uint(10*exp))))
				rest = rest[2:]
			} else {
				v.Mul(v, new(big.Rat).SetInt64(m))
				rest = rest[1:]
			}
		} else if rest[0] == 'm' {
			return nil, false, unitErr("lower-case m is ambiguous; write M for mega")
		}
	}
	// The unit.
	unit, bits := true, false
	switch {
	case strings.HasPrefix(rest, "bits"):
		bits, rest = true, rest[4:]
	case strings.HasPrefix(rest, "bit"):
		bits, rest = true, rest[3:]
	case strings.HasPrefix(rest, "b"):
		bits, rest = true, rest[1:]
	case strings.HasPrefix(rest, "B"):
		rest = rest[1:]
	default:
		unit = false
	}
	if bits {
		v.Quo(v, big.NewRat(8, 1))
	}
	// The rate suffix.
	switch rest {
	case "":
	case "/s":
		per = true
	case "ps":
		if !unit {
			return nil, false, unitErr(`"ps" only follows a unit, as in Mbps or MBps`)
		}
		per = true
	default:
		return nil, false, unitErr(fmt.Sprintf("unknown unit %q", rest))
	}
	return v, per, nil
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
