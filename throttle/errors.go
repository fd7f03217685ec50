package throttle

import (
	"errors"

	"github.com/smoothrate/ratelimit/internal/check"
	"github.com/smoothrate/ratelimit/internal/redisscript"
)

// Sentinel errors. Every rejected argument and every store failure is
// returned as an error wrapping one of these (test with errors.Is); nothing
// in this package panics on bad input, and a rejected call changes no state.
var (
	// ErrInvalidLimit: Count < 1, a Period that is not a positive whole
	// number of microseconds, a negative Burst, a Burst on an algorithm
	// that has none, or numbers too large to compute exactly.
	ErrInvalidLimit = errors.New("throttle: invalid limit")
	// ErrInvalidAlgorithm: not one of the Algorithm constants.
	ErrInvalidAlgorithm = errors.New("throttle: invalid algorithm")
	// ErrInvalidCost: a negative n.
	ErrInvalidCost = errors.New("throttle: n must not be negative")
	// ErrEmptyKey: the key is the empty string.
	ErrEmptyKey = errors.New("throttle: key must not be empty")
	// ErrKeyTooLong: the key is longer than MaxKeyLen bytes.
	ErrKeyTooLong = errors.New("throttle: key longer than MaxKeyLen")
	// ErrInvalidOption: a nil store option, one with a bad value, or one
	// that does not apply to that store, returned by NewMemoryStore or
	// NewRedisStore; a nil client given to NewRedisStore.
	ErrInvalidOption = errors.New("throttle: invalid store option")
	// ErrNilContext: a nil context.Context was passed. The standard
	// library calls that a programming error and may panic; this package
	// returns this error instead (the same value as
	// ratelimit.ErrNilContext).
	ErrNilContext = check.ErrNilContext
	// ErrNilStore: New was given a nil Store, or a Limiter's zero value
	// was used.
	ErrNilStore = errors.New("throttle: no store")
	// ErrInvalidTime: the clock read a time before the Unix epoch or in
	// 2112 or later (microseconds since the epoch must stay below 2^52, so
	// that a time plus a period stays an exact float64 in the Redis
	// scripts).
	ErrInvalidTime = errors.New("throttle: clock time out of range")
	// ErrMixedStores: AllowAll was given limiters over different stores.
	ErrMixedStores = errors.New("throttle: checks use different stores")
	// ErrWrongType: the Redis key holds a value of another type or shape
	// than the algorithm keeps there (another program wrote it).
	ErrWrongType = errors.New("throttle: redis key holds a value of the wrong type")
)

// Store failures. These three are the module's one set of failure errors:
// the same values as rls's and distributed's ErrStore, ErrUnavailable and
// ErrMisconfigured, which httplimit and grpclimit also return, so errors.Is
// answers the same whichever package returned the error. A store error
// reads "throttle: <what failed>: <cause>" and wraps its cause.
var (
	// ErrStore: the store failed (Redis unreachable, a script error, a
	// timeout, the caller's context ended during the call). The
	// underlying error is wrapped too, and so is one of ErrUnavailable or
	// ErrMisconfigured when the failure is one of theirs.
	ErrStore = redisscript.ErrStore
	// ErrUnavailable: the store could not get an answer from Redis: the
	// connection was refused or lost, the call timed out, or the server
	// said it cannot serve now (LOADING, CLUSTERDOWN, MASTERDOWN,
	// TRYAGAIN, a replica that became read-only in a failover, out of
	// memory under maxmemory). It is an outage: a retry later may
	// succeed, and a caller may choose to fail open on it. Errors wrapping
	// it also match ErrStore.
	ErrUnavailable = redisscript.ErrUnavailable
	// ErrMisconfigured: Redis answered with an error that no retry can
	// fix: a missing or wrong password (NOAUTH, WRONGPASS, NOPERM), a
	// database index the server does not have, a cluster client against
	// a server that is not in a cluster, an unknown command, a script the
	// server cannot compile or run, a key of another type (ErrWrongType
	// errors match it too). It is a configuration error, not an outage:
	// never fail open on it. Errors wrapping it also match ErrStore and
	// do not match ErrUnavailable.
	ErrMisconfigured = redisscript.ErrMisconfigured
)
