package rls

import (
	"cmp"
	"errors"
	"fmt"
	"time"

	"github.com/smoothrate/ratelimit/internal/redisscript"
)

// An Option configures a Service. Bad values and nil options are reported
// by New (ErrInvalidOption); nothing panics.
type Option interface{ apply(*serviceConfig) }

type optionFunc func(*serviceConfig)

func (f optionFunc) apply(c *serviceConfig) { f(c) }

// Default header names of WithRateLimitHeaders: the reference's
// HEADER_RATELIMIT_LIMIT, _REMAINING and _RESET defaults.
const (
	DefaultLimitHeader     = "RateLimit-Limit"
	DefaultRemainingHeader = "RateLimit-Remaining"
	DefaultResetHeader     = "RateLimit-Reset"
)

// DefaultStoreTimeout bounds each call's store work (WithStoreTimeout).
const DefaultStoreTimeout = 50 * time.Millisecond

// defaultStoreTimeout is DefaultStoreTimeout, except in this package's
// tests, whose round trips on a loaded machine may take longer (TestMain).
var defaultStoreTimeout = DefaultStoreTimeout

// DefaultNearLimitRatio is the reference's NEAR_LIMIT_RATIO.
const DefaultNearLimitRatio = 0.8

// serviceConfig holds every Service knob; buildConfig sets the defaults.
type serviceConfig struct {
	storeTimeout     time.Duration
	storeBound       redisscript.Bound // storeTimeout's, made once
	headers          bool
	limitHeader      string
	remainingHeader  string
	resetHeader      string
	ietfHeaders      bool
	onlyAdmitted     bool
	nearLimitRatio   float32
	globalShadowMode bool
	errs             []error
}

func buildConfig(opts []Option) (serviceConfig, error) {
	c := serviceConfig{storeTimeout: defaultStoreTimeout, nearLimitRatio: DefaultNearLimitRatio}
	for _, o := range opts {
		if o == nil {
			c.errs = append(c.errs, fmt.Errorf("%w: nil option", ErrInvalidOption))
			continue
		}
		o.apply(&c)
	}
	c.storeBound = redisscript.NewBound(c.storeTimeout)
	return c, errors.Join(c.errs...)
}

// WithStoreTimeout bounds the store's work in each ShouldRateLimit (d > 0;
// default DefaultStoreTimeout; 0: only the caller's deadline). A store
// that fails or takes longer gives gRPC UNAVAILABLE at once, so that
// Envoy's failure_mode_deny decides, instead of the reference's 10 s wait
// on a dead Redis. The memory store never waits and ignores it.
func WithStoreTimeout(d time.Duration) Option {
	return optionFunc(func(c *serviceConfig) {
		if d < 0 {
			c.errs = append(c.errs, fmt.Errorf("%w: store timeout %v must not be negative", ErrInvalidOption, d))
			return
		}
		c.storeTimeout = d
	})
}

// WithRateLimitHeaders adds the reference's three response headers
// (LIMIT_RESPONSE_HEADERS_ENABLED) to every answer that has a limit: the
// limit, remaining and seconds to reset of the descriptor closest to its
// limit (an over-limit one when there is one). Empty names take the
// defaults (DefaultLimitHeader, …).
func WithRateLimitHeaders(limit, remaining, reset string) Option {
	return optionFunc(func(c *serviceConfig) {
		c.headers = true
		c.limitHeader = cmp.Or(limit, DefaultLimitHeader)
		c.remainingHeader = cmp.Or(remaining, DefaultRemainingHeader)
		c.resetHeader = cmp.Or(reset, DefaultResetHeader)
	})
}

// WithIETFHeaders adds the IETF RateLimit-Policy and RateLimit fields
// (draft-ietf-httpapi-ratelimit-headers) to every answer that has a
// limit, as httplimit writes them: one item per applied limit, named by
// its name or its rule's key, and Retry-After when over the limit. An
// addition: the reference has no such fields.
func WithIETFHeaders() Option {
	return optionFunc(func(c *serviceConfig) { c.ietfHeaders = true })
}

// WithCountOnlyAdmitted makes the reference's fixed windows count only the
// hits they admit, atomically (one script on Redis): a client that keeps
// retrying over the limit no longer keeps its window full, and raising a
// limit mid-window takes effect at once. An addition that changes the
// reference's answers (it counts refused hits too); the additions'
// algorithms never count refused hits.
func WithCountOnlyAdmitted() Option {
	return optionFunc(func(c *serviceConfig) { c.onlyAdmitted = true })
}

// WithNearLimitRatio sets the share of a limit above which hits count as
// near_limit (the reference's NEAR_LIMIT_RATIO, default 0.8; 0 < r ≤ 1).
func WithNearLimitRatio(r float32) Option {
	return optionFunc(func(c *serviceConfig) {
		if !(r > 0 && r <= 1) {
			c.errs = append(c.errs, fmt.Errorf("%w: near-limit ratio %v must be in (0, 1]", ErrInvalidOption, r))
			return
		}
		c.nearLimitRatio = r
	})
}

// WithGlobalShadowMode decides and counts every call as usual but always
// answers OK overall (the reference's SHADOW_MODE).
func WithGlobalShadowMode() Option {
	return optionFunc(func(c *serviceConfig) { c.globalShadowMode = true })
}
