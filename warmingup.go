package ratelimit

import (
	"fmt"
	"time"

	"github.com/smoothrate/ratelimit/internal/check"
	"github.com/smoothrate/ratelimit/smooth"
)

// NewWarmingUp returns a limiter of Guava's SmoothWarmingUp kind at
// permitsPerSecond with the given warm-up period: it starts cold, issuing
// permits coldFactor (default 3, see WithColdFactor) times more slowly than
// the stable rate, and speeds up to the stable rate over the warm-up period
// of sustained use. Left idle, it cools down again at the rate it warmed up.
// Use it to spare a cold backend (caches, connection pools, JIT) a sudden
// full load.
//
// The warm-up period is truncated to the limiter's resolution. A warm-up of
// 0 gives a warm limiter at the stable rate that stores nothing (Guava's
// limiter stops limiting in that case); a negative one is an error wrapping
// ErrInvalidWarmup. The rate must be positive and not NaN (ErrInvalidRate);
// +Inf means unlimited. WithMaxBurstSeconds and WithInitiallyFull do not
// apply and are errors.
func NewWarmingUp(permitsPerSecond float64, warmup time.Duration, opts ...Option) (*Limiter, error) {
	if err := check.Warmup(warmup); err != nil {
		return nil, err
	}
	if err := check.Rate(permitsPerSecond); err != nil {
		return nil, err
	}
	cfg, err := buildConfig(opts)
	if err != nil {
		return nil, err
	}
	if cfg.setBurst || cfg.setFull {
		return nil, fmt.Errorf("%w: a burst option (WithMaxBurstSeconds, WithInitiallyFull) does not apply to a warming-up limiter", ErrInvalidOption)
	}
	return newLimiter(cfg, func(tps float64) smooth.Engine {
		return smooth.NewWarmingUp(tps, int64(warmup/cfg.resolution), cfg.coldFactor, permitsPerSecond, 0)
	}), nil
}
