package grpclimit

import (
	"context"
	"errors"
	"time"

	"github.com/smoothrate/ratelimit/internal/keyopt"
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
// defaults are set. The limits and the store-failure policy are kept as
// httplimit keeps them (internal/keyopt).
type config struct {
	keyopt.Config[KeyPart]
	cost      func(ctx context.Context, fullMethod string) int
	skip      func(ctx context.Context, fullMethod string) bool
	onError   func(ctx context.Context, fullMethod string, err error)
	onRefusal func(ctx context.Context, fullMethod string, d throttle.Decision)
}

// limitSpec is one limit checked on every call.
type limitSpec = keyopt.Limit[KeyPart]

func build(lim *throttle.Limiter, opts []Option) (*config, error) {
	c := &config{Config: keyopt.New(ErrInvalidOption, lim, DefaultName, Peer())}
	keyopt.Apply(&c.Config, opts, func(o Option) { o.apply(c) })
	// A limit name travels as a structured-field string in the metadata
	// and starts the store key.
	if err := c.Check("limit name", KeyPart.check); err != nil {
		return nil, err
	}
	return c, nil
}

// WithName sets the name of the limit given to New (DefaultName otherwise).
// Clients see it in the metadata and the QuotaFailure detail; it also
// prefixes the limit's keys in the store.
func WithName(name string) Option {
	return optionFunc(func(c *config) { c.SetName(name) })
}

// WithKey sets what the limit given to New counts by: the parts are joined,
// so WithKey(Peer(), Method()) gives each client its own allowance per
// method. The default is Peer().
func WithKey(parts ...KeyPart) Option {
	return optionFunc(func(c *config) { c.SetKey(parts) })
}

// WithLimit adds a limit checked together with New's: a call passes only
// if every limit allows it, and is counted against all of them or none
// (throttle.AllowAll). All limiters must share one store. name identifies
// the limit in the metadata; parts default to Peer().
func WithLimit(name string, lim *throttle.Limiter, parts ...KeyPart) Option {
	return optionFunc(func(c *config) { c.AddLimit(name, lim, parts) })
}

// WithCost sets what a call costs (default 1), for example more for an
// expensive method. A cost above a limit's Limit is refused without
// RetryInfo (it can never pass); a negative cost is a bug: the call gets
// codes.Internal and the error goes to WithErrorHook.
func WithCost(cost func(ctx context.Context, fullMethod string) int) Option {
	return optionFunc(func(c *config) {
		if cost == nil {
			c.Errorf("nil cost function")
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
			c.Errorf("nil skip function")
			return
		}
		c.skip = skip
	})
}

// WithFailOpen lets calls through, without rate-limit metadata, when the
// store has an outage: the error wraps throttle.ErrUnavailable (Redis down
// or unreachable, a Redis timeout, WithStoreTimeout's bound). The default
// is to fail closed. Either way the error goes to the hook of
// WithErrorHook.
//
// Any other store error is answered codes.Internal, with or without
// WithFailOpen: a Redis set up wrong (throttle.ErrMisconfigured: a wrong
// password, no such database, a cluster node given as a single server, a
// script it cannot run) or a failure not known to be an outage. Passing
// would run unlimited until someone notices; Unavailable would tell
// clients to retry what no retry fixes.
func WithFailOpen() Option {
	return optionFunc(func(c *config) { c.FailOpen = true })
}

// WithFailClosed (the default, with one second) answers codes.Unavailable
// with a RetryInfo of retryAfter when the store fails. Unavailable, not
// ResourceExhausted: the client is not over its limit, and gRPC clients
// treat Unavailable as the transient failure it is.
func WithFailClosed(retryAfter time.Duration) Option {
	return optionFunc(func(c *config) { c.SetFailClosed(retryAfter, "retry delay") })
}

// WithStoreTimeout bounds each decision of the store (a Redis round trip)
// to d; past it, the decision fails like any store error (see
// WithFailOpen). Without it, only the call's deadline and the Redis
// client's own timeouts bound a decision.
func WithStoreTimeout(d time.Duration) Option {
	return optionFunc(func(c *config) { c.SetStoreTimeout(d) })
}

// WithErrorHook calls f with every store error, before failing open or
// closed, and with the error of a negative cost, so that they can be
// logged and counted. f must be safe for concurrent use.
func WithErrorHook(f func(ctx context.Context, fullMethod string, err error)) Option {
	return optionFunc(func(c *config) {
		if f == nil {
			c.Errorf("nil error hook")
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
			c.Errorf("nil refusal hook")
			return
		}
		c.onRefusal = f
	})
}
