// Package distributed shares one smooth rate limit among many processes
// through Redis.
//
// Every process that creates a Limiter with the same name on the same Redis
// draws from one global limiter: a SmoothBursty (or, with WithWarmup, a
// SmoothWarmingUp, so that a cold fleet warms up together) whose state lives
// in one Redis hash and is advanced by the same formulas as package smooth,
// inside a Lua script. Processes do not ask Redis for every permit: they
// lease batches and hand them out from memory, so Redis sees about ten
// calls per second per busy process whatever the request rate.
//
// # Protocol
//
// Debit before spend. A permit is always taken from the global state before
// any process hands it out; the local side never lends ahead. The script
// (hot.lua + engine.lua + lease.lua, run with EVALSHA and EVAL on NOSCRIPT;
// hot.lua answers the common lease in straight-line code, the rest comes to
// lease.lua) does, in one atomic step:
//
//   - read the time from Redis TIME (integer µs), never from the caller, so
//     clock skew between processes changes nothing;
//   - create the state on first use, or apply a newer config version once;
//   - count the caller in the registry of live processes, in O(1) steps
//     whatever the fleet's size: processes count for one to two slots of
//     half a second after their last call, in a histogram of their
//     demands;
//   - compute this process's max-min fair share of the rate (water
//     filling over the histogram, cached: recomputed at most every 10 ms,
//     and only after a count changed) and cap the lease at
//     share × τ;
//   - reserve the lease as Guava reserves a request (stored permits first,
//     the cost pushed onto nextFreeTicket), provided it becomes usable
//     within the caller's maximum wait and the process's own fair-share
//     clock allows it; otherwise reply with how far ahead the next lease is
//     (the retry-after);
//   - set a TTL on every key (at least 1 s, more while debt is booked).
//
// The reply carries durations, not instants: the permits are usable wait
// after the reply arrived (the script ran before that) and valid until
// validity after the request was sent (the script ran after that), on the
// process's monotonic clock. A slow round trip can only delay or shorten a
// lease.
//
// Locally, a Limiter keeps the leased permits in a pool. Acquire and
// TryAcquire take from it; when what is left would not last until a new
// lease could be usable, one background call prefetches the next lease
// (never more than one call in flight per Limiter). Lease size follows an
// exponentially weighted average of the demand callers asked for (not what
// they got) times τ (WithLeaseDuration, default 100 ms). When Redis says the
// next lease is not available before some time, the Limiter does not ask
// again before then, and TryAcquire answers false locally. Permits that
// demand no longer needs are refunded (nextFreeTicket rolled back by their
// price, never before now, only under the config version they were leased
// under), and so are all unspent permits on Close.
//
// # Bounds
//
// While Redis is healthy, for every T and any number of processes,
//
//	admitted(0, T) ≤ R·T + B + largest single lease
//
// where B is the global stored-permit capacity, and in any window W the
// extra over R·W + B is at most what processes hold locally, about R·τ. A
// Redis failover forgets unreplicated debits (+ R × replication lag); a
// full outage admits about R × (processes / processes last reported) under
// the default failure policy; a partition of k processes out of N admits up
// to R·(1 + k/N) once their registry entries expire. See docs/distributed.md.
//
// # Failures
//
// Each Redis call is bounded by WithCallTimeout (default 50 ms). On an
// error or timeout the Limiter follows its FailurePolicy: FailOpen (the
// default) spends the permits it already holds, then runs a local smooth
// limiter at the safe rate or R divided by the last reported process count;
// FailClosed refuses (Acquire returns an error wrapping ErrUnavailable,
// and ErrCallTimeout if the call timed out: the limiter's own bound on a
// round trip is not reported as the caller's context.DeadlineExceeded).
// Never the full R per process: a FailOpen limiter that has not had a
// lease reply yet (no process count) and has no safe rate refuses like
// FailClosed until Redis answers.
// Meanwhile it probes Redis with jittered, growing pauses and resumes
// leasing on the first success. SCRIPT FLUSH and FLUSHALL are recovered
// from (the state is recreated, the newest config version wins).
//
// A Redis that answers with an error no retry can fix is set up wrong, not
// away: no such database, NOAUTH or WRONGPASS, cluster support disabled,
// an unknown command, a key of the wrong type under the name (never
// silently reset). Such errors wrap ErrMisconfigured, not ErrUnavailable,
// and no policy fails open on them: a fleet whose processes each ran alone
// at their safe rate would share nothing and look healthy.
// Join at start-up tells them apart before any work (errors.Is(err,
// ErrMisconfigured)). Stats.FallbackRate says at what rate the process runs
// alone, 0 while it refuses.
//
// # Redis
//
// All keys of a limiter share the hash tag {name}, are passed in KEYS and
// live in one cluster slot, so any redis.UniversalClient works: a single
// server, a failover client, or a Cluster. Leases are writes and always go
// to the primary. Give the client ContextTimeoutEnabled: true so that the
// call timeout also bounds the socket I/O (WithLogger makes New warn, once,
// when it is missing). With a redis.ClusterClient, also
// set ClusterStateReloadInterval to a few hundred milliseconds: go-redis
// re-reads the slot map only on MOVED/ASK/READONLY replies or after that
// interval (60 s by default), and a dead primary answers none of them, so
// after a failover the limiter would otherwise stay in fallback for up to a
// minute (TestClusterFailover: leasing resumes about 3 s after the kill with
// 250 ms).
//
// # Options
//
// The module's one convention: a nil option, an option with an invalid
// value and options that do not go together (WithColdFactor without
// WithWarmup, WithSafeRate with FailClosed) are errors returned by New,
// wrapping this package's ErrInvalidOption and the sentinel of the value
// (ErrInvalidLease, ratelimit.ErrInvalidBurst, ...). WithLocalClock is not
// the root package's WithClock: the fleet's rate runs on Redis's clock,
// and this one only measures local durations.
package distributed
