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

// DefaultMaxDescriptors is how many descriptors one call may carry
// (WithMaxDescriptors). Envoy sends one descriptor per rate_limits entry
// of the route that yields one, and routes have a handful (Envoy
// Gateway writes one per rule of a policy, at most 64 of them): 1024 is
// far above any configuration we know of, while it bounds a call's work
// to 1024 counters (a few batches on Redis, a fraction of a millisecond
// in memory) however a client fills its request.
const DefaultMaxDescriptors = 1024

// DefaultMaxDescriptorBytes is the longest entries' part of a store key
// kept as is (WithMaxDescriptorBytes): Envoy Gateway's descriptors (route
// names as key and value, a few nested entries) take a few hundred bytes.
const DefaultMaxDescriptorBytes = 1024

// MaxDescriptorBytesLimit is the most WithMaxDescriptorBytes takes: a key
// must fit in a MemoryStore shard of the smallest WithMaxBytes.
const MaxDescriptorBytesLimit = 8 << 10

// DefaultNearLimitRatio is the reference's NEAR_LIMIT_RATIO.
const DefaultNearLimitRatio = 0.8

// serviceConfig holds every Service knob; buildConfig sets the defaults.
type serviceConfig struct {
	storeTimeout       time.Duration
	storeBound         redisscript.Bound // storeTimeout's, made once
	maxDescriptors     int
	maxDescriptorBytes int
	maxSeries          int
	maxLabelBytes      int
	mode               countMode // countWhole with onlyAdmitted
	headers            bool
	limitHeader        string
	remainingHeader    string
	resetHeader        string
	ietfHeaders        bool
	onlyAdmitted       bool
	nearLimitRatio     float32
	globalShadowMode   bool
	errs               []error
}

func buildConfig(opts []Option) (serviceConfig, error) {
	c := serviceConfig{storeTimeout: defaultStoreTimeout, nearLimitRatio: DefaultNearLimitRatio, maxDescriptors: DefaultMaxDescriptors, maxDescriptorBytes: DefaultMaxDescriptorBytes,
		maxSeries: DefaultMaxMetricSeries, maxLabelBytes: DefaultMaxMetricLabelBytes}
	for _, o := range opts {
		if o == nil {
			c.errs = append(c.errs, fmt.Errorf("%w: nil option", ErrInvalidOption))
			continue
		}
		o.apply(&c)
	}
	if c.onlyAdmitted {
		c.mode = countWhole
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

// WithMaxDescriptors bounds the descriptors of one call (n ≥ 1; default
// DefaultMaxDescriptors). A call with more is answered gRPC
// INVALID_ARGUMENT at once, before any store work, and counted as a
// service error: the work of a call is linear in its descriptors, and a
// client must not be able to make one call cost what thousands do. An
// addition: the reference takes any number.
func WithMaxDescriptors(n int) Option {
	return optionFunc(func(c *serviceConfig) {
		if n < 1 {
			c.errs = append(c.errs, fmt.Errorf("%w: max descriptors %d must be at least 1", ErrInvalidOption, n))
			return
		}
		c.maxDescriptors = n
	})
}

// WithMaxDescriptorBytes bounds the part of a store key that a
// descriptor's entries make (their keys and values, "key_value_" each, as
// the reference writes them) to n bytes (0 ≤ n ≤ MaxDescriptorBytesLimit;
// default DefaultMaxDescriptorBytes). A descriptor whose part is longer is
// counted under "sha256:" and the first 16 bytes of the part's SHA-256 in
// hex instead, so that a value of 60 KiB (the longest header Envoy
// passes) or of 1 MB costs a store what a short one does while its limit
// still applies to it alone: two different descriptors share a counter
// only if their parts' digests agree in 128 bits, which among 2^32
// distinct long descriptors happens with a probability below 2^-64. (A
// short descriptor whose own entries spell a hashed part shares that
// counter: spelling it needs the long descriptor's digest, so a client
// gains nothing it could not get by sending the long descriptor.) The
// reference keeps every value in its keys, so such descriptors' Redis
// keys differ from the reference's; 0 hashes every descriptor.
func WithMaxDescriptorBytes(n int) Option {
	return optionFunc(func(c *serviceConfig) {
		if n < 0 || n > MaxDescriptorBytesLimit {
			c.errs = append(c.errs, fmt.Errorf("%w: max descriptor bytes %d must be in [0, %d]", ErrInvalidOption, n, MaxDescriptorBytesLimit))
			return
		}
		c.maxDescriptorBytes = n
	})
}

// WithMetricSeriesLimit bounds the metric series that requests name, each
// kind on its own: the rules' series keyed by a request's values
// (detailed_metric, value_to_metric, a descriptor's own limit) and the
// unknown domains (domain_not_found). Each kind keeps at most series
// series apart, whose labels take at most bytes bytes together, none more
// than a 256th of it or 64 bytes, whichever is more (defaults
// DefaultMaxMetricSeries and DefaultMaxMetricLabelBytes: 4096 series, 1
// MiB, labels of up to 4 KiB; both at least 1); past any bound, a new one
// is counted in the kind's "(other)" series (for rules, its domain's
// OtherRuleKey, "domain.(other)"). The series of the
// configuration's own rules are never folded. The reference keeps one
// series per value, without bound.
func WithMetricSeriesLimit(series, bytes int) Option {
	return optionFunc(func(c *serviceConfig) {
		if series < 1 || bytes < 1 {
			c.errs = append(c.errs, fmt.Errorf("%w: metric series limit %d series, %d bytes: both must be at least 1", ErrInvalidOption, series, bytes))
			return
		}
		c.maxSeries, c.maxLabelBytes = series, bytes
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
