package jobs

import (
	"errors"
	"fmt"

	"github.com/smoothrate/ratelimit/internal/units"
)

// ErrInvalidRate: a job rate that ParseRate cannot read, or that is not
// positive.
var ErrInvalidRate = errors.New("jobs: invalid rate")

// ParseRate reads a rate of jobs as a user writes it: "5" or "5/s" (per
// second), "300/m" or "300/min", "2/h", "1000/d", "0.5/s", "1e3", or a count
// per Go duration, "3/100ms" or "1/1m30s". "inf" and "unlimited" give +Inf.
// The numbers are those of shape.ParseRate (the same grammar, the ratelimit
// command's), so that a program reads a rate from its flags or its
// configuration as the command does. The result is in jobs per second: a
// positive number, or +Inf for "inf" and "unlimited"; zero, a negative rate,
// NaN and anything malformed wrap ErrInvalidRate.
func ParseRate(s string) (float64, error) {
	r, err := units.JobRate(s)
	if err != nil {
		return 0, fmt.Errorf("%w: %w", ErrInvalidRate, err)
	}
	return r, nil
}
