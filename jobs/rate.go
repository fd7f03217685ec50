package jobs

import (
	"errors"
	"fmt"
	"math"
	"strconv"
	"strings"
	"time"
)

// ErrInvalidRate: a job rate that ParseRate cannot read, or that is not
// positive.
var ErrInvalidRate = errors.New("jobs: invalid rate")

// perUnits are the words ParseRate accepts after the slash.
var perUnits = map[string]time.Duration{
	"s": time.Second, "sec": time.Second, "second": time.Second,
	"m": time.Minute, "min": time.Minute, "minute": time.Minute,
	"h": time.Hour, "hour": time.Hour,
	"d": 24 * time.Hour, "day": 24 * time.Hour,
}

// ParseRate reads a rate of jobs as a user writes it: "5" or "5/s" (per
// second), "300/m" or "300/min", "2/h", "1000/d", "0.5/s", or a count per Go
// duration, "3/100ms" or "1/1m30s". "inf" and "unlimited" give +Inf. The
// result is in jobs per second; it must be positive (else ErrInvalidRate).
func ParseRate(s string) (float64, error) {
	s = strings.TrimSpace(s)
	switch s {
	case "inf", "Inf", "unlimited":
		return math.Inf(1), nil
	}
	num, per, hasPer := strings.Cut(s, "/")
	n, err := strconv.ParseFloat(strings.TrimSpace(num), 64)
	if err != nil || strings.ContainsAny(num, "xXpP_") || math.IsNaN(n) || math.IsInf(n, 0) {
		return 0, fmt.Errorf("%w: %q: want a number of jobs, optionally per unit, like 5/s or 300/m", ErrInvalidRate, s)
	}
	if n <= 0 {
		return 0, fmt.Errorf("%w: %q: must be positive", ErrInvalidRate, s)
	}
	d := time.Second
	if hasPer {
		per = strings.TrimSpace(per)
		if u, ok := perUnits[per]; ok {
			d = u
		} else if d, err = time.ParseDuration(per); err != nil || d <= 0 {
			return 0, fmt.Errorf("%w: %q: %q is neither s, m, h, d nor a positive duration like 100ms", ErrInvalidRate, s, per)
		}
	}
	r := n / d.Seconds()
	if r <= 0 || math.IsInf(r, 0) {
		return 0, fmt.Errorf("%w: %q: out of range", ErrInvalidRate, s)
	}
	return r, nil
}
