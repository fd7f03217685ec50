package distributed

import (
	"errors"

	"github.com/smoothrate/ratelimit/internal/redisscript"
)

// Sentinel errors of this package. Invalid rates, permits, warm-up periods,
// cold factors, burst lengths and clocks are reported with the root
// package's sentinels (ratelimit.ErrInvalidRate and so on), wrapped with the
// offending value and this package's ErrInvalidOption when an option
// carried them; test for all of them with errors.Is.
var (
	// ErrNilClient: New was given a nil Redis client (or a typed nil, such
	// as a nil *redis.Client).
	ErrNilClient = errors.New("distributed: redis client must not be nil")
	// ErrInvalidName: the limiter name is empty, longer than 200 bytes, or
	// contains '{' or '}' (it becomes the keys' hash tag).
	ErrInvalidName = errors.New("distributed: name must be 1-200 bytes without '{' or '}'")
	// ErrInvalidOption: a nil option, an option with an invalid value
	// (which also wraps the value's sentinel: ErrInvalidLease,
	// ratelimit.ErrInvalidBurst, ...), or options that do not go together
	// (WithColdFactor without WithWarmup, WithSafeRate with FailClosed).
	// This package's own, as each package of the module has one.
	ErrInvalidOption = errors.New("distributed: invalid option")
	// ErrInvalidLease: a lease duration or validity is not positive, or a
	// fallback rate is negative or NaN.
	ErrInvalidLease = errors.New("distributed: invalid lease duration, validity or fallback rate")
	// ErrInvalidProcessID: the process id is empty, longer than 200 bytes
	// or contains a space.
	ErrInvalidProcessID = errors.New("distributed: process id must be 1-200 bytes without spaces")
	// ErrCallTimeout: a Redis call took longer than WithCallTimeout. It is
	// the limiter's own bound on one round trip, not the caller's
	// deadline, so it does not match context.DeadlineExceeded: code that
	// treats that as "the caller's time ran out" (package shape reports it
	// as an i/o timeout) must not see a slow Redis as one. Errors matching
	// ErrUnavailable match it when a timeout was the cause.
	ErrCallTimeout = errors.New("distributed: redis call timed out")
	// ErrNameMismatch: a limiter made WithRefuseMismatch found its name
	// holding a limiter of another rate, kind or unit, and did not join
	// it. Errors that match it also match ErrMisconfigured.
	ErrNameMismatch = errors.New("distributed: the name holds a limiter of another rate, kind or unit")
	// ErrClosed: the limiter has been closed.
	ErrClosed = errors.New("distributed: limiter closed")
)

// Redis failures. These three are the module's one set of failure errors:
// the same values as throttle's and rls's ErrStore, ErrUnavailable and
// ErrMisconfigured, so errors.Is answers the same whichever package
// returned the error. A Redis error reads "distributed: <what failed>:
// <cause>" and wraps its cause.
var (
	// ErrStore: a call to Redis failed. Every error matching
	// ErrUnavailable or ErrMisconfigured matches it too.
	ErrStore = redisscript.ErrStore
	// ErrUnavailable: Redis could not be reached, did not answer within
	// the call timeout (ErrCallTimeout), or said it cannot serve now
	// (LOADING, a failover, out of memory under maxmemory), and the
	// limiter fails closed, or fails open but has no fallback rate yet
	// (no lease reply, so no process count, and no safe rate). It wraps
	// the underlying error.
	ErrUnavailable = redisscript.ErrUnavailable
	// ErrMisconfigured: Redis answered, with an error that no retry can
	// fix: a database index it does not have, a missing or wrong
	// password, a cluster client against a server that is not in a
	// cluster (or a cluster node talked to as a single server), an
	// unknown command, a key of the wrong type, a reply the limiter
	// cannot read.
	// It is a configuration error, not an outage: the limiter never fails
	// open on it (a fleet whose processes all run alone at their safe
	// rate, sharing nothing, would look healthy), and it does not match
	// ErrUnavailable. It wraps the client's error.
	ErrMisconfigured = redisscript.ErrMisconfigured
)
