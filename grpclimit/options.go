package grpclimit

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/smoothrate/ratelimit/throttle"
)

// ErrInvalidOption is wrapped by every error New returns: a nil limiter, a
// nil option or function, a limit name the metadata cannot carry, two
// limits with one name.
var ErrInvalidOption = errors.New("grpclimit: invalid option")

// An Option configures the Interceptor New returns. A nil option, an
// option with an invalid value and options that contradict each other
// (WithFailOpen and WithFailClosed) are errors wrapping ErrInvalidOption,
// returned by New, as everywhere in this module.
type Option interface{ apply(*config) }

type optionFunc func(*config)

func (f optionFunc) apply(c *config) { f(c) }

// DefaultName is the name of the limit given to New, as the ratelimit-policy
// and ratelimit metadata show it, unless WithName says otherwise.
const DefaultName = "default"

// config holds every knob with its default; build is the only place
// defaults are set.
type config struct {
	limits       []limitSpec // [0] is New's limiter
	cost         func(ctx context.Context, fullMethod string) int
	skip         func(ctx context.Context, fullMethod string) bool
	failOpen     bool
	setClosed    bool // WithFailClosed was given
	closedRetry  time.Duration
	storeTimeout time.Duration
	onError      func(ctx context.Context, fullMethod string, err error)
	onRefusal    func(ctx context.Context, fullMethod string, d throttle.Decision)
	errs         []error
}

// limitSpec is one limit checked on every call.
type limitSpec struct {
	name  string
	lim   *throttle.Limiter
	parts []KeyPart
}

func build(lim *throttle.Limiter, opts []Option) (*config, error) {
	c := &config{
		limits:      []limitSpec{{name: DefaultName, lim: lim, parts: []KeyPart{Peer()}}},
		closedRetry: time.Second,
	}
	if lim == nil {
		c.errorf("nil limiter")
	}
	for _, o := range opts {
		if o == nil {
			c.errorf("nil option")
			continue
		}
		o.apply(c)
	}
	if c.failOpen && c.setClosed {
		c.errorf("WithFailOpen and WithFailClosed contradict each other")
	}
	seen := map[string]bool{}
	for _, l := range c.limits {
		if !validName(l.name) {
			c.errorf("limit name %q must be 1 to 64 printable ASCII characters without '\"', '\\\\' or ':'", l.name)
		}
		if seen[l.name] {
			c.errorf("two limits named %q: each needs its own name (it also keeps their keys apart)", l.name)
		}
		seen[l.name] = true
		for _, kp := range l.parts {
			if err := kp.check(); err != "" {
				c.errorf("limit %q: %s", l.name, err)
			}
		}
	}
	if len(c.errs) > 0 {
		return nil, errors.Join(c.errs...)
	}
	return c, nil
}

func (c *config) errorf(format string, args ...any) {
	c.errs = append(c.errs, fmt.Errorf("%w: %s", ErrInvalidOption, fmt.Sprintf(format, args...)))
}

// validName: a limit name travels as a structured-field string in the
// metadata and starts the store key; plain printable ASCII keeps both
// simple.
func validName(s string) bool {
	if s == "" || len(s) > 64 {
		return false
	}
	for i := 0; i < len(s); i++ {
		if b := s[i]; b < 0x20 || b > 0x7e || b == '"' || b == '\\' || b == ':' {
			return false
		}
	}
	return true
}

// WithName sets the name of the limit given to New (DefaultName otherwise).
// Clients see it in the metadata and the QuotaFailure detail; it also
// prefixes the limit's keys in the store.
func WithName(name string) Option {
	return optionFunc(func(c *config) { c.limits[0].name = name })
}

// WithKey sets what the limit given to New counts by: the parts are joined,
// so WithKey(Peer(), Method()) gives each client its own allowance per
// method. The default is Peer().
func WithKey(parts ...KeyPart) Option {
	return optionFunc(func(c *config) {
		if len(parts) == 0 {
			c.errorf("WithKey needs at least one part")
			return
		}
		c.limits[0].parts = parts
	})
}

// WithLimit adds a limit checked together with New's: a call passes only
// if every limit allows it, and is counted against all of them or none
// (throttle.AllowAll). All limiters must share one store. name identifies
// the limit in the metadata; parts default to Peer().
func WithLimit(name string, lim *throttle.Limiter, parts ...KeyPart) Option {
	return optionFunc(func(c *config) {
		if lim == nil {
			c.errorf("nil limiter for limit %q", name)
			return
		}
		if len(parts) == 0 {
			parts = []KeyPart{Peer()}
		}
		c.limits = append(c.limits, limitSpec{name: name, lim: lim, parts: parts})
	})
}

// WithCost sets what a call costs (default 1), for example more for an
// expensive method. A cost above a limit's Limit is refused without
// RetryInfo (it can never pass); a negative cost is a bug: the call gets
// codes.Internal and the error goes to WithErrorHook.
func WithCost(cost func(ctx context.Context, fullMethod string) int) Option {
	return optionFunc(func(c *config) {
		if cost == nil {
			c.errorf("nil cost function")
			return
		}
		c.cost = cost
	})
}

// WithSkip exempts the calls for which skip returns true (a health check,
// reflection): they are neither counted nor given metadata.
func WithSkip(skip func(ctx context.Context, fullMethod string) bool) Option {
	return optionFunc(func(c *config) {
		if skip == nil {
			c.errorf("nil skip function")
			return
		}
		c.skip = skip
	})
}

// WithFailOpen lets calls through, without rate-limit metadata, when the
// store fails (Redis down, a timeout). The default is to fail closed.
// Either way the error goes to the hook of WithErrorHook.
func WithFailOpen() Option {
	return optionFunc(func(c *config) { c.failOpen = true })
}

// WithFailClosed (the default, with one second) answers codes.Unavailable
// with a RetryInfo of retryAfter when the store fails. Unavailable, not
// ResourceExhausted: the client is not over its limit, and gRPC clients
// treat Unavailable as the transient failure it is.
func WithFailClosed(retryAfter time.Duration) Option {
	return optionFunc(func(c *config) {
		if retryAfter <= 0 {
			c.errorf("fail-closed retry delay %v must be positive", retryAfter)
			return
		}
		c.setClosed, c.closedRetry = true, retryAfter
	})
}

// WithStoreTimeout bounds each decision of the store (a Redis round trip)
// to d; past it, the decision fails like any store error (see
// WithFailOpen). Without it, only the call's deadline and the Redis
// client's own timeouts bound a decision.
func WithStoreTimeout(d time.Duration) Option {
	return optionFunc(func(c *config) {
		if d <= 0 {
			c.errorf("store timeout %v must be positive", d)
			return
		}
		c.storeTimeout = d
	})
}

// WithErrorHook calls f with every store error, before failing open or
// closed, and with the error of a negative cost, so that they can be
// logged and counted. f must be safe for concurrent use.
func WithErrorHook(f func(ctx context.Context, fullMethod string, err error)) Option {
	return optionFunc(func(c *config) {
		if f == nil {
			c.errorf("nil error hook")
			return
		}
		c.onError = f
	})
}

// WithRefusalHook calls f with the strictest decision of every refused
// call, so that refusals can be counted or logged. f must be safe for
// concurrent use.
func WithRefusalHook(f func(ctx context.Context, fullMethod string, d throttle.Decision)) Option {
	return optionFunc(func(c *config) {
		if f == nil {
			c.errorf("nil refusal hook")
			return
		}
		c.onRefusal = f
	})
}
