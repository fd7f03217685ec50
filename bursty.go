package ratelimit

import (
	"fmt"

	"github.com/smoothrate/ratelimit/internal/check"
	"github.com/smoothrate/ratelimit/smooth"
)

// NewBursty returns a limiter of Guava's SmoothBursty kind at
// permitsPerSecond: it stores up to maxBurstSeconds (default 1, see
// WithMaxBurstSeconds) of unused permits while idle and hands them out at
// once, then settles to the stable rate. It starts empty, so the first
// request is free and the second pays for it, unless WithInitiallyFull is
// given.
//
// The rate must be positive and not NaN (else an error wrapping
// ErrInvalidRate); +Inf means unlimited. WithColdFactor does not apply and is
// an error.
func NewBursty(permitsPerSecond float64, opts ...Option) (*Limiter, error) {
	if err := check.Rate(permitsPerSecond); err != nil {
		return nil, err
	}
	cfg, err := buildConfig(opts)
	if err != nil {
		return nil, err
	}
	if cfg.setCold {
		return nil, fmt.Errorf("%w: WithColdFactor does not apply to a bursty limiter", ErrInvalidOption)
	}
	return newLimiter(cfg, func(tps float64) smooth.Engine {
		e := smooth.NewBursty(tps, cfg.maxBurstSeconds, permitsPerSecond, 0)
		if cfg.full {
			e.Fill()
		}
		return e
	}), nil
}
