// Package units reads the numbers, sizes and rates that people type: one
// grammar, shared by package shape (ParseSize, ParseRate), package jobs
// (ParseRate) and the ratelimit command, so that a value accepted in one
// place is accepted, with the same meaning, everywhere.
//
// The grammar:
//
//	number   digits with an optional decimal point and an optional sign:
//	         500, 1.5, .25, -3; optionally an exponent: 1e9, 2.5e-3
//	prefix   k or K = 1000, M = 1000², G = 1000³, T = 1000⁴, P = 1000⁵, E = 1000⁶
//	         Ki = 1024, Mi = 1024², Gi = 1024³, Ti = 1024⁴, Pi = 1024⁵, Ei = 1024⁶
//	unit     B, or nothing = bytes; b, bit or bits = bits (÷ 8)
//	per      byte rates only, optional: /s, or ps after a unit (Mbps)
//
// Sizes and byte rates take a prefix and a unit: 500k, 1MiB, 10MB/s,
// 2Gbit, 100Mbps, 1e9. Job rates take a count and an optional period:
// 5, 5/s, 300/m, 2/h, 1000/d, 3/100ms, 1e3. Rates may also be "inf" or
// "unlimited". Lower-case m is refused rather than guessed (milli or
// mega?); the exponent is a lower-case e, since E is exa.
//
// Errors are *Error values that wrap ErrSyntax or ErrRange and say what is
// wrong without any package prefix, so that a command can print them after
// its own name and a library can wrap them with its own sentinels.
package units

import (
	"errors"
	"math"
	"math/big"
	"strconv"
	"strings"
	"time"
)

var (
	// ErrSyntax: the input is not a number followed by a known unit.
	ErrSyntax = errors.New("invalid number or unit")
	// ErrRange: the input is well formed but out of range (zero or
	// negative where that makes no sense, or too large).
	ErrRange = errors.New("out of range")
)

// Error is a value that could not be read: the input, what is wrong with it,
// and ErrSyntax or ErrRange.
type Error struct {
	Input string
	Why   string
	Err   error
}

// Error is the quoted input (cut at 20 characters) and what is wrong with
// it, with no package prefix: `"1e999": exponent too large`.
func (e *Error) Error() string {
	in := e.Input
	if len(in) > 24 {
		in = in[:20] + "…"
	}
	return strconv.Quote(in) + ": " + e.Why
}

// Unwrap returns ErrSyntax or ErrRange.
func (e *Error) Unwrap() error { return e.Err }

func syntax(in, why string) error     { return &Error{Input: in, Why: why, Err: ErrSyntax} }
func outOfRange(in, why string) error { return &Error{Input: in, Why: why, Err: ErrRange} }

// maxInput bounds the length of what the parsers accept, so that a hostile
// string cannot make them do big-number work. It admits everything
// shape.FormatRate prints (the longest is 316 characters, for the smallest
// float64, since it prints no exponent).
const maxInput = 400

// maxExponent bounds the exponent for the same reason: 10^400 is far beyond
// any float64 and still cheap to build exactly.
const maxExponent = 400

const unitHelp = " (units: k M G T P E = 1000ⁿ, Ki Mi Gi Ti Pi Ei = 1024ⁿ, B = bytes, b or bit = bits, optional /s)"

// number reads the number at the start of s, exactly, and returns what
// follows it.
func number(orig, s string) (v *big.Rat, rest string, err error) {
	if len(s) > maxInput {
		return nil, "", syntax(orig, "longer than "+strconv.Itoa(maxInput)+" characters")
	}
	s = strings.TrimSpace(s)
	sign := ""
	if s != "" && (s[0] == '-' || s[0] == '+') {
		sign, s = s[:1], s[1:]
	}
	i, digits, dots := 0, 0, 0
	for ; i < len(s) && (s[i] >= '0' && s[i] <= '9' || s[i] == '.'); i++ {
		if s[i] == '.' {
			dots++
		} else {
			digits++
		}
	}
	if digits == 0 || dots > 1 {
		return nil, "", syntax(orig, "not a number")
	}
	mantissa := s[:i]
	exp := 0
	if i+1 < len(s) && s[i] == 'e' {
		j := i + 1
		if s[j] == '-' || s[j] == '+' {
			j++
		}
		k := j
		for k < len(s) && s[k] >= '0' && s[k] <= '9' {
			k++
		}
		if k > j { // an exponent, not the start of a unit
			e, err := strconv.Atoi(s[i+1 : k])
			if err != nil || e > maxExponent || e < -maxExponent {
				return nil, "", outOfRange(orig, "exponent too large")
			}
			exp, i = e, k
		}
	}
	v, ok := new(big.Rat).SetString(mantissa)
	if !ok {
		return nil, "", syntax(orig, "not a number")
	}
	if exp != 0 {
		p := new(big.Int).Exp(big.NewInt(10), big.NewInt(int64(abs(exp))), nil)
		if exp > 0 {
			v.Mul(v, new(big.Rat).SetInt(p))
		} else {
			v.Quo(v, new(big.Rat).SetInt(p))
		}
	}
	if sign == "-" {
		v.Neg(v)
	}
	return v, strings.TrimSpace(s[i:]), nil
}

func abs(x int) int {
	if x < 0 {
		return -x
	}
	return x
}

// Number reads a plain number, without unit ("2.5", "1e3"), as a finite
// float64.
func Number(s string) (float64, error) {
	v, rest, err := number(s, s)
	if err != nil {
		return 0, err
	}
	if rest != "" {
		return 0, syntax(s, "not a number")
	}
	f, _ := v.Float64()
	if math.IsInf(f, 0) {
		return 0, outOfRange(s, "too large")
	}
	return f, nil
}

var decimalPrefixes = map[byte]int64{'k': 1e3, 'K': 1e3, 'M': 1e6, 'G': 1e9, 'T': 1e12, 'P': 1e15, 'E': 1e18}

var binaryExponents = map[byte]uint{'k': 1, 'K': 1, 'M': 2, 'G': 3, 'T': 4, 'P': 5, 'E': 6}

// bytes reads number, prefix, unit and per: the quantity in bytes, exactly,
// and whether a "/s" was given.
func bytes(s string) (v *big.Rat, per bool, err error) {
	v, rest, err := number(s, s)
	if err != nil {
		return nil, false, err
	}
	unitErr := func(why string) error { return syntax(s, why+unitHelp) }
	// The prefix.
	if rest != "" {
		if m, ok := decimalPrefixes[rest[0]]; ok {
			if strings.HasPrefix(rest[1:], "i") {
				v.Mul(v, new(big.Rat).SetInt(new(big.Int).Lsh(big.NewInt(1), 10*binaryExponents[rest[0]])))
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
		return nil, false, unitErr("unknown unit " + strconv.Quote(rest))
	}
	return v, per, nil
}

// Size reads a byte count such as "64KiB", "1.5M" or "8Mbit" (no "/s"). A
// fractional count of bytes is rounded to the nearest byte, half up. The
// result is at least 0.
func Size(s string) (int64, error) {
	v, per, err := bytes(s)
	if err != nil {
		return 0, err
	}
	if per {
		return 0, syntax(s, `a size takes no "/s"`)
	}
	if v.Sign() < 0 {
		return 0, outOfRange(s, "a size cannot be negative")
	}
	half := new(big.Rat).Add(v, big.NewRat(1, 2))
	n := new(big.Int).Quo(half.Num(), half.Denom())
	if !n.IsInt64() {
		return 0, outOfRange(s, "more than "+strconv.FormatInt(math.MaxInt64, 10)+" bytes")
	}
	return n.Int64(), nil
}

// isUnlimited reports whether s names no limit.
func isUnlimited(s string) bool {
	switch strings.TrimSpace(s) {
	case "inf", "Inf", "unlimited":
		return true
	}
	return false
}

// ByteRate reads a rate in bytes per second such as "500k", "1MiB/s",
// "2Gbit", "100Mbps" or "1e9" ("/s" is optional); "inf" and "unlimited"
// give +Inf. The rate must be positive and finite as a float64.
func ByteRate(s string) (float64, error) {
	if isUnlimited(s) {
		return math.Inf(1), nil
	}
	v, _, err := bytes(s)
	if err != nil {
		return 0, err
	}
	return positiveRate(s, v)
}

// positiveRate converts a rate to a float64 that is positive and finite.
func positiveRate(s string, v *big.Rat) (float64, error) {
	if v.Sign() <= 0 {
		return 0, outOfRange(s, "a rate must be positive")
	}
	r, _ := v.Float64()
	switch {
	case math.IsInf(r, 0):
		return 0, outOfRange(s, "too large")
	case r == 0:
		return 0, outOfRange(s, "too small")
	}
	return r, nil
}

// periods are the words JobRate accepts after the slash.
var periods = map[string]time.Duration{
	"s": time.Second, "sec": time.Second, "second": time.Second,
	"m": time.Minute, "min": time.Minute, "minute": time.Minute,
	"h": time.Hour, "hour": time.Hour,
	"d": 24 * time.Hour, "day": 24 * time.Hour,
}

// JobRate reads a rate of jobs (or any countable events) as a user writes
// it: "5" or "5/s" (per second), "300/m" or "300/min", "2/h", "1000/d",
// "0.5/s", "1e3", or a count per Go duration, "3/100ms" or "1/1m30s";
// "inf" and "unlimited" give +Inf. The result is in events per second:
// positive, and finite unless the input was "inf" or "unlimited".
func JobRate(s string) (float64, error) {
	if isUnlimited(s) {
		return math.Inf(1), nil
	}
	count, per, hasPer := strings.Cut(s, "/")
	v, rest, err := number(s, count)
	if err != nil {
		return 0, err
	}
	if rest != "" {
		return 0, syntax(s, "want a count, optionally per period, like 5/s or 300/m")
	}
	d := time.Second
	if hasPer {
		if d, err = period(s, per); err != nil {
			return 0, err
		}
	}
	return positiveRate(s, v.Quo(v, big.NewRat(int64(d), int64(time.Second))))
}

// Period reads what follows the slash of a rate ("min" in "100/min"): s,
// m, h, d, their longer names, or a positive Go duration (100ms, 1m30s).
// For commands that need a count and its period apart, such as ratelimit
// proxy's --limit.
func Period(s string) (time.Duration, error) { return period(s, s) }

// period is Period, with errors quoting whole, the value the user typed.
func period(whole, per string) (time.Duration, error) {
	per = strings.TrimSpace(per)
	if p, ok := periods[per]; ok {
		return p, nil
	}
	d, err := time.ParseDuration(per)
	if err != nil || d <= 0 {
		return 0, syntax(whole, strconv.Quote(per)+" is neither s, m, h, d nor a positive duration like 100ms")
	}
	return d, nil
}

// SizeText writes n bytes in the largest binary unit that divides it
// exactly ("32KiB", "256MiB", "1000"), as Size reads it back: a flag's
// default or a bound is best read that way.
func SizeText(n int64) string {
	for _, u := range []struct {
		name string
		size int64
	}{{"GiB", 1 << 30}, {"MiB", 1 << 20}, {"KiB", 1 << 10}} {
		if n != 0 && n%u.size == 0 {
			return strconv.FormatInt(n/u.size, 10) + u.name
		}
	}
	return strconv.FormatInt(n, 10)
}
