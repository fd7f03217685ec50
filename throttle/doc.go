// Package throttle answers "may key K do this now?" for millions of keys
// (users, IP addresses, routes): the keyed, veto-style limiters of the
// classic articles and of redis-cell, go-redis/redis_rate and friends. A
// "no" is final (the caller answers 429 or degrades); nobody waits. For a
// limiter that makes callers wait their turn, use the root package.
//
// Six algorithms, each defined exactly where its constant is declared:
// GCRA (redis-cell's CL.THROTTLE, exact answers), TokenBucket and
// LeakyBucket (the same meter kept as two numbers), FixedWindow,
// SlidingWindow (Cloudflare's two-counter approximation) and SlidingLog
// (exact, O(Count) memory per key). docs/throttle.md says which to choose.
//
// State lives in a Store: NewMemoryStore (one process; sharded, bounded,
// least-recently-used eviction) or NewRedisStore (shared by a fleet; one Lua
// script and one round trip per decision). Both implement the same integer
// arithmetic and return identical Decisions for identical calls and times.
//
//	store := throttle.NewMemoryStore()
//	lim, err := throttle.New(store, throttle.GCRA, throttle.PerMinute(100))
//	d, err := lim.Allow(ctx, "user:42")
//	if !d.Allowed { /* 429, Retry-After: d.RetryAfter */ }
package throttle
