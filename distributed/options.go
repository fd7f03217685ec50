package distributed

import (
	"fmt"
	"log/slog"
	"math"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/smoothrate/ratelimit"
	"github.com/smoothrate/ratelimit/internal/check"
)

// An Option configures a Limiter made by New. A nil option, an option with
// an invalid value and options that do not go together (WithColdFactor
// without WithWarmup, say) are errors, returned by New and wrapping this
// package's ErrInvalidOption (and the sentinel of the value, such as
// ErrInvalidLease), as everywhere in this module.
type Option interface {
	apply(*config) error
}

type optionFunc func(*config) error

func (f optionFunc) apply(c *config) error { return f(c) }

// FailurePolicy says what a limiter does while Redis cannot be reached.
type FailurePolicy uint8

const (
	// FailOpen keeps serving: first the permits already leased, until
	// their leases end, then a local smooth limiter at a fallback rate
	// (the configured safe rate, or R divided by the number of processes
	// Redis last reported). Never the full rate per process: a process
	// that has had no lease reply yet, and so knows no process count,
	// refuses like FailClosed unless a safe rate is set.
	FailOpen FailurePolicy = iota
	// FailClosed refuses: Acquire returns an error wrapping
	// ErrUnavailable and TryAcquire returns false once the leased permits
	// are spent. For limits that must never be exceeded (billing).
	FailClosed
)

// String is the policy's name as the documentation and the ratelimit
// command's messages spell it: "fail-open" or "fail-closed".
func (p FailurePolicy) String() string {
	if p == FailClosed {
		return "fail-closed"
	}
	return "fail-open"
}

// config holds every knob with its default; buildConfig is the only place
// defaults are set.
type config struct {
	clock ratelimit.Clock

	warmup          time.Duration
	coldFactor      float64
	maxBurstSeconds float64
	setWarmup       bool
	setCold         bool
	setBurst        bool

	leaseDuration time.Duration // τ: how long a lease should last at the measured demand
	leaseValidity time.Duration // how long leased permits stay usable
	callTimeout   time.Duration // one Redis round trip
	registryTTL   time.Duration // silent processes leave the fair-share registry

	policy      FailurePolicy
	safeRate    float64 // fail-open rate per process; 0: R / processes
	setSafeRate bool

	processID string

	unit           string // what a permit stands for, recorded with the state
	refuseMismatch bool   // refuse to join a name of another rate, kind or unit

	logger *slog.Logger // nil: no warnings

	// Test hooks (unexported, set by the package's own tests).
	scriptTime   func() int64 // explicit Redis time in µs instead of TIME
	syncPrefetch bool         // prefetch in the caller's goroutine
}

func buildConfig(opts []Option) (config, error) {
	c := config{
		coldFactor:      ratelimit.DefaultColdFactor,
		maxBurstSeconds: ratelimit.DefaultMaxBurstSeconds,
		leaseDuration:   100 * time.Millisecond,
		callTimeout:     50 * time.Millisecond,
		policy:          FailOpen,
	}
	for _, o := range opts {
		if o == nil {
			return config{}, fmt.Errorf("%w: nil option", ErrInvalidOption)
		}
		if err := o.apply(&c); err != nil {
			return config{}, check.Option(ErrInvalidOption, err)
		}
	}
	if c.setSafeRate && c.policy == FailClosed {
		return config{}, fmt.Errorf("%w: WithSafeRate does not apply to the FailClosed policy", ErrInvalidOption)
	}
	if c.setWarmup && c.setBurst {
		return config{}, fmt.Errorf("%w: WithMaxBurstSeconds does not apply to a warming-up limiter", ErrInvalidOption)
	}
	if c.setCold && !c.setWarmup {
		return config{}, fmt.Errorf("%w: WithColdFactor does not apply without WithWarmup", ErrInvalidOption)
	}
	if c.leaseValidity == 0 {
		c.leaseValidity = max(time.Second, 10*c.leaseDuration)
	}
	if c.registryTTL == 0 {
		// The registry counts a process for one to two slots of
		// registryTTL/2 after its last call (lease.lua): a dead process's
		// share goes back to the others within a second, while a busy
		// process, which calls at least every lease duration or so, stays
		// counted without a gap.
		c.registryTTL = max(time.Second, 4*c.leaseDuration)
	}
	if c.processID == "" {
		host, _ := os.Hostname()
		host = strings.ReplaceAll(host, " ", "_")
		c.processID = fmt.Sprintf("%s-%d-%s", host, os.Getpid(), strconv.FormatInt(time.Now().UnixNano(), 36))
	}
	return c, nil
}

// WithLocalClock makes the limiter measure local durations (lease
// lifetimes, waits, demand) on c and sleep on it. The limiter's rate never
// depends on this clock: the global state runs on the Redis server's clock,
// so clock skew between processes changes nothing (hence not the root
// package's WithClock, which is a limiter's whole time). Context deadlines
// are compared with c.Now(), as in the root package.
func WithLocalClock(c ratelimit.Clock) Option {
	return optionFunc(func(cfg *config) error {
		if err := check.Clock(c); err != nil {
			return err
		}
		cfg.clock = c
		return nil
	})
}

// WithWarmup makes the fleet share one SmoothWarmingUp limiter: it starts
// cold, coldFactor (default 3) times slower than the rate, and reaches the
// rate after the warm-up period of sustained use. 0 is a warm limiter that
// stores nothing. Negative is an error wrapping ratelimit.ErrInvalidWarmup.
func WithWarmup(period time.Duration) Option {
	return optionFunc(func(cfg *config) error {
		if err := check.Warmup(period); err != nil {
			return err
		}
		cfg.warmup, cfg.setWarmup = period, true
		return nil
	})
}

// WithColdFactor sets the warming-up limiter's cold factor (default 3,
// finite, at least 1). Only with WithWarmup.
func WithColdFactor(coldFactor float64) Option {
	return optionFunc(func(cfg *config) error {
		if err := check.ColdFactor(coldFactor); err != nil {
			return err
		}
		cfg.coldFactor, cfg.setCold = coldFactor, true
		return nil
	})
}

// WithMaxBurstSeconds sets how many seconds of unused permits the fleet's
// shared bursty bucket stores (default 1). Bursty limiters only.
func WithMaxBurstSeconds(seconds float64) Option {
	return optionFunc(func(cfg *config) error {
		if err := check.MaxBurstSeconds(seconds); err != nil {
			return err
		}
		cfg.maxBurstSeconds, cfg.setBurst = seconds, true
		return nil
	})
}

// WithLeaseDuration sets τ, the target life of a lease: each lease holds
// about τ × the measured demand, capped by the burst and the process's fair
// share of τ × rate. Shorter means tighter windows and more Redis calls
// (about 1/τ per busy process); default 100 ms.
func WithLeaseDuration(d time.Duration) Option {
	return optionFunc(func(cfg *config) error {
		if d <= 0 {
			return fmt.Errorf("%w: lease duration %v", ErrInvalidLease, d)
		}
		cfg.leaseDuration = d
		return nil
	})
}

// WithLeaseValidity sets how long leased permits may be spent after they
// become usable (default max(1 s, 10 τ)). Unspent permits then lapse. It
// bounds how many permits a process can spend on old leases while Redis is
// away.
func WithLeaseValidity(d time.Duration) Option {
	return optionFunc(func(cfg *config) error {
		if d <= 0 {
			return fmt.Errorf("%w: lease validity %v", ErrInvalidLease, d)
		}
		cfg.leaseValidity = d
		return nil
	})
}

// WithCallTimeout bounds one Redis round trip (default 50 ms). A call that
// takes longer counts as a failure and puts the limiter under its failure
// policy until a probe succeeds. For the bound to hold even when the server
// hangs, create the client with ContextTimeoutEnabled: true (otherwise the
// abandoned call lingers in the background until the client's ReadTimeout,
// and Close waits for it).
func WithCallTimeout(d time.Duration) Option {
	return optionFunc(func(cfg *config) error {
		if d <= 0 {
			return fmt.Errorf("%w: call timeout %v must be positive", ErrInvalidOption, d)
		}
		cfg.callTimeout = d
		return nil
	})
}

// WithFailurePolicy says what the limiter does while Redis cannot be
// reached: FailOpen (the default) or FailClosed. Any other value is an
// error.
func WithFailurePolicy(p FailurePolicy) Option {
	return optionFunc(func(cfg *config) error {
		if p != FailOpen && p != FailClosed {
			return fmt.Errorf("%w: failure policy %d", ErrInvalidOption, p)
		}
		cfg.policy = p
		return nil
	})
}

// WithSafeRate sets the per-process rate of the FailOpen policy while
// Redis is away (finite or +Inf, not negative); 0, the default, means the
// fleet rate divided by the number of processes Redis last reported. A
// process that Redis has never answered a lease for knows no process count:
// with safe rate 0 it then refuses (Acquire returns an error wrapping
// ErrUnavailable, TryAcquire false) until Redis answers; give a safe rate to
// keep serving through an outage that starts before the first lease. With
// WithFailurePolicy(FailClosed) it is an error.
func WithSafeRate(safeRate float64) Option {
	return optionFunc(func(cfg *config) error {
		if math.IsNaN(safeRate) || safeRate < 0 {
			return fmt.Errorf("%w: safe rate %v", ErrInvalidLease, safeRate)
		}
		cfg.safeRate, cfg.setSafeRate = safeRate, true
		return nil
	})
}

// WithLogger makes the limiter report, at warning level, what it finds
// wrong with its setup but can work with: once, when New is called, a
// client without ContextTimeoutEnabled (WithCallTimeout then cannot bound
// a call to a server that hangs; the call lingers until the client's
// ReadTimeout, and Close waits for it). A nil logger is the default: no
// warnings.
func WithLogger(logger *slog.Logger) Option {
	return optionFunc(func(cfg *config) error {
		cfg.logger = logger
		return nil
	})
}

// WithUnit records what a permit stands for ("bytes", "jobs", ...) in the
// shared state when this limiter creates it, so that a limit of bytes and
// one of jobs cannot share a name by accident: a limiter whose unit
// differs from the stored one reports it (Stats.Mismatch) or, with
// WithRefuseMismatch, refuses to join. At most 64 bytes; default "".
func WithUnit(unit string) Option {
	return optionFunc(func(cfg *config) error {
		if len(unit) > 64 {
			return fmt.Errorf("%w: unit %q is longer than 64 bytes", ErrInvalidName, unit)
		}
		cfg.unit = unit
		return nil
	})
}

// WithRefuseMismatch makes the limiter refuse to join a name whose stored
// limiter has another rate, kind (bursty or warming up) or unit
// (WithUnit) than New was given: its first lease fails, before anything is
// taken or registered, with an error wrapping ErrNameMismatch (and
// ErrMisconfigured: it does not fail open), and it keeps refusing.
// Without it the limiter joins and adopts the stored configuration, as the
// first process to create a name configures the fleet, and Stats reports
// the difference. The check is made by the limiter's first lease only: a
// later SetRate of the fleet is not a mismatch.
func WithRefuseMismatch() Option {
	return optionFunc(func(cfg *config) error {
		cfg.refuseMismatch = true
		return nil
	})
}

// WithProcessID names this process in the fair-share registry (default:
// hostname-pid-start time). Two limiters with the same id share one fair
// share, so give each its own.
func WithProcessID(id string) Option {
	return optionFunc(func(cfg *config) error {
		if id == "" || len(id) > 200 || strings.ContainsAny(id, " \t\r\n") {
			return fmt.Errorf("%w: %q", ErrInvalidProcessID, id)
		}
		cfg.processID = id
		return nil
	})
}
