package ratelimit

import (
	"fmt"
	"time"

	"github.com/smoothrate/ratelimit/internal/check"
)

// An Option configures a limiter made by NewBursty or NewWarmingUp. A nil
// option, an option with an invalid value and an option that does not apply
// to the constructor it is given to are errors, returned by the constructor
// and wrapping ErrInvalidOption (and the sentinel of the value, such as
// ErrInvalidBurst). Every package of this module treats options so.
type Option interface {
	apply(*config) error
}

type optionFunc func(*config) error

func (f optionFunc) apply(c *config) error { return f(c) }

// The defaults of the limiters' shapes: Guava's fixed values, and so those
// of package distributed and of the ratelimit command too.
const (
	// DefaultMaxBurstSeconds is how many seconds of unused permits a
	// bursty limiter stores unless WithMaxBurstSeconds says otherwise
	// (Guava's RateLimiter.create(rate)).
	DefaultMaxBurstSeconds = 1.0
	// DefaultColdFactor is how many times slower than the stable rate a
	// cold warming-up limiter starts unless WithColdFactor says otherwise
	// (Guava's RateLimiter.create(rate, warmup)).
	DefaultColdFactor = 3.0
)

// config holds every knob with its default; buildConfig is the only place
// defaults are set.
type config struct {
	clock           Clock
	resolution      time.Duration
	maxBurstSeconds float64
	coldFactor      float64
	full            bool

	// What was set, so that options that do not apply can be rejected.
	setBurst, setCold, setFull bool
}

func buildConfig(opts []Option) (config, error) {
	c := config{
		resolution:      time.Nanosecond,
		maxBurstSeconds: DefaultMaxBurstSeconds,
		coldFactor:      DefaultColdFactor,
	}
	for _, o := range opts {
		if o == nil {
			return config{}, fmt.Errorf("%w: nil option", ErrInvalidOption)
		}
		if err := o.apply(&c); err != nil {
			return config{}, check.Option(ErrInvalidOption, err)
		}
	}
	return c, nil
}

// WithClock makes the limiter read time from and sleep on c instead of the
// time package. Use it with package clocktest for deterministic tests, or to
// run a limiter in simulated time.
func WithClock(c Clock) Option {
	return optionFunc(func(cfg *config) error {
		if err := check.Clock(c); err != nil {
			return err
		}
		cfg.clock = c
		return nil
	})
}

// WithMaxBurstSeconds sets how many seconds' worth of unused permits a bursty
// limiter stores (Guava's maxBurstSeconds, fixed at DefaultMaxBurstSeconds =
// 1 there). 0 makes a strict
// metronome. It must be finite and not negative. Bursty limiters only.
func WithMaxBurstSeconds(seconds float64) Option {
	return optionFunc(func(cfg *config) error {
		if err := check.MaxBurstSeconds(seconds); err != nil {
			return err
		}
		cfg.maxBurstSeconds, cfg.setBurst = seconds, true
		return nil
	})
}

// WithInitiallyFull makes a bursty limiter start with its bucket full
// (maxBurstSeconds of permits ready), as if it had been idle, instead of
// Guava's empty start. Bursty limiters only.
func WithInitiallyFull() Option {
	return optionFunc(func(cfg *config) error {
		cfg.full, cfg.setFull = true, true
		return nil
	})
}

// WithColdFactor sets how much slower than the stable rate a cold
// warming-up limiter starts: the throttling interval of a full bucket is
// coldFactor × the stable interval. Default DefaultColdFactor (3, Guava's
// fixed value). It must
// be finite and at least 1. Warming-up limiters only.
func WithColdFactor(coldFactor float64) Option {
	return optionFunc(func(cfg *config) error {
		if err := check.ColdFactor(coldFactor); err != nil {
			return err
		}
		cfg.coldFactor, cfg.setCold = coldFactor, true
		return nil
	})
}

// WithResolution sets the length of the engine's tick. time.Nanosecond, the
// default, keeps per-byte limits exact at any rate. time.Microsecond is
// Guava's resolution: every wait, stored permit and decision is then
// bit-identical to Guava 31.1, including its truncation of each wait to whole
// microseconds (which stops limiting per-byte rates above about 1 MB/s).
// Any other value is an error.
func WithResolution(d time.Duration) Option {
	return optionFunc(func(cfg *config) error {
		if d != time.Nanosecond && d != time.Microsecond {
			return fmt.Errorf("%w: %v", ErrInvalidResolution, d)
		}
		cfg.resolution = d
		return nil
	})
}
