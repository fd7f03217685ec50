// Package throttle answers "may key K do this now?" for millions of keys
// (users, IP addresses, routes): the keyed, veto-style limiters of the
// classic articles and of redis-cell, go-redis/redis_rate and friends. A
// "no" is final (the caller answers 429 or degrades); nobody waits. For a
// limiter that makes callers wait their turn, use the root package.
//
// A Limiter applies one Limit (Count per Period, Burst at once) with one
// Algorithm to any number of keys; it holds no state itself. Allow and
// AllowN return a Decision with what CL.THROTTLE answers: allowed, limit,
// remaining, retry-after (exact; Never when the request can never fit)
// and reset-after. AllowN(ctx, key, 0) peeks. A refused request changes
// nothing, so a client that keeps retrying is never locked out. AllowAll
// checks several (limiter, key) pairs at once, all counted or none ("per
// IP and per route"); CheckAll asks the same without counting.
//
// Six algorithms, each defined exactly where its constant is declared:
// GCRA (redis-cell's CL.THROTTLE), TokenBucket and LeakyBucket (the same
// meter kept as two numbers), FixedWindow (aligned to multiples of the
// period since the Unix epoch), SlidingWindow (Cloudflare's two-counter
// approximation) and SlidingLog (exact, O(Count) memory per key).
// docs/throttle.md says which to choose and shows them on one trace.
//
// State lives in a Store: NewMemoryStore (one process; sharded, bounded by
// WithMaxKeys and WithMaxBytes, expired keys reclaimed as it goes) or NewRedisStore (shared
// by a fleet; one Lua script and one round trip per decision). The
// arithmetic is the pure functions of algorithms.go, on whole microseconds
// and integers below 2^53, which the Redis scripts port line by line: both
// stores return identical Decisions for identical calls and times, and the
// tests replay redis-cell's, throttled's and redis_rate's vectors and the
// reference articles' known defects through both.
//
// Bad input (an invalid limit, n < 0, an empty key) is an error wrapping
// one of the sentinels in errors.go; nothing panics. Options follow the
// module's one convention: a nil option, a bad value or an option that does
// not apply to the store it is given to is an error wrapping
// ErrInvalidOption, returned by the store's constructor.
//
// The package stands alone: its Clock is its own one-method interface, so
// it does not compile the root package's Guava engine.
//
//	store, err := throttle.NewMemoryStore()
//	lim, err := throttle.New(store, throttle.GCRA, throttle.PerMinute(100))
//	d, err := lim.Allow(ctx, "user:42")
//	if !d.Allowed { /* 429, Retry-After: d.RetryAfter */ }
package throttle
