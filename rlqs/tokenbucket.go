package rlqs

import (
	"math"
	"time"

	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/wrapperspb"
)

// tokenBucket is an assignment's token bucket (envoy.type.v3.TokenBucket)
// as Envoy's rate_limit_quota filter reads it: a bucket that starts with
// maxTokens, never holds more, and refills continuously at
// tokensPerFill / fillInterval per second. Three facts of the filter
// (Envoy 1.36, source/extensions/filters/http/rate_limit_quota) shape it:
//
//   - it reads fill_interval in whole seconds only (a shorter one would
//     divide by zero), so fillInterval is a whole number of seconds;
//   - it tells a new bucket from the one it runs by max_tokens,
//     tokens_per_fill and the nanoseconds of fill_interval only, not its
//     seconds, so two buckets that differ only in fillInterval must not
//     follow each other (encodeRate makes them differ);
//   - a bucket it takes as new starts full, which the bound counts.
type tokenBucket struct {
	maxTokens     uint32
	tokensPerFill uint32
	fillInterval  time.Duration
}

// rate is the bucket's refill rate, requests per second.
func (tb tokenBucket) rate() float64 {
	if tb.fillInterval <= 0 {
		return 0
	}
	return float64(tb.tokensPerFill) / tb.fillInterval.Seconds()
}

// sameForEnvoy reports whether Envoy takes b for the bucket it runs, a
// (and only extends its time to live).
func (a tokenBucket) sameForEnvoy(b tokenBucket) bool {
	return a.maxTokens == b.maxTokens && a.tokensPerFill == b.tokensPerFill &&
		a.fillInterval%time.Second == b.fillInterval%time.Second
}

// Bounds of encodeRate.
const (
	// minFillPrecision: the fill interval grows (by tens of seconds) until
	// tokensPerFill is at least this, so that rounding it down costs at
	// most 1 % of the rate.
	minFillPrecision = 100
	maxFillInterval  = 1_000_000 * time.Second
)

// encodeRate returns the token bucket of rate r (requests per second) with
// a capacity of burst × r (at least one token), whose rate is at most r
// (and within 1 % of it when r is at least 1e-4/s), and that Envoy does
// not mistake for prev if its rate differs. ok is false when r is too low
// for any bucket (below one request per maxFillInterval): assign a
// blanket DENY_ALL instead.
func encodeRate(r float64, burst time.Duration, prev tokenBucket) (tb tokenBucket, ok bool) {
	if !(r > 0) {
		return tokenBucket{}, false
	}
	f := time.Second
	for r*f.Seconds() < minFillPrecision && f < maxFillInterval {
		f *= 10
	}
	p := math.Floor(r * f.Seconds())
	if p < 1 {
		return tokenBucket{}, false
	}
	tb = tokenBucket{
		tokensPerFill: uint32(min(p, math.MaxUint32)),
		fillInterval:  f,
		maxTokens:     uint32(min(max(1, math.Floor(r*burst.Seconds())), math.MaxUint32)),
	}
	if tb.sameForEnvoy(prev) && tb.fillInterval != prev.fillInterval {
		// Envoy would keep prev's bucket, at prev's rate.
		if tb.tokensPerFill > 1 {
			tb.tokensPerFill-- // a slightly lower rate: safe
		} else {
			tb.maxTokens++ // one token more of burst, counted by the bound
		}
	}
	return tb, true
}

// strategy is tb as Envoy's RateLimitStrategy.
func (tb tokenBucket) strategy() *typev3.RateLimitStrategy {
	return &typev3.RateLimitStrategy{Strategy: &typev3.RateLimitStrategy_TokenBucket{TokenBucket: &typev3.TokenBucket{
		MaxTokens:     tb.maxTokens,
		TokensPerFill: wrapperspb.UInt32(tb.tokensPerFill),
		FillInterval:  durationpb.New(tb.fillInterval),
	}}}
}

// blanketStrategy is b as Envoy's RateLimitStrategy.
func blanketStrategy(b Blanket) *typev3.RateLimitStrategy {
	rule := typev3.RateLimitStrategy_ALLOW_ALL
	if b == DenyAll {
		rule = typev3.RateLimitStrategy_DENY_ALL
	}
	return &typev3.RateLimitStrategy{Strategy: &typev3.RateLimitStrategy_BlanketRule_{BlanketRule: rule}}
}
