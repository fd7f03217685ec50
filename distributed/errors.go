package distributed

import "errors"

// Sentinel errors of this package. Invalid rates, permits, warm-up periods,
// cold factors, burst lengths and clocks are reported with the root
// package's sentinels (ratelimit.ErrInvalidRate and so on), wrapped with the
// offending value; test for all of them with errors.Is.
var (
	// ErrNilClient: New was given a nil Redis client (or a typed nil, such
	// as a nil *redis.Client).
	ErrNilClient = errors.New("distributed: redis client must not be nil")
	// ErrInvalidName: the limiter name is empty, longer than 200 bytes, or
	// contains '{' or '}' (it becomes the keys' hash tag).
	ErrInvalidName = errors.New("distributed: name must be 1-200 bytes without '{' or '}'")
	// ErrInvalidLease: a lease duration, validity or call timeout is not
	// positive, or a fallback rate is negative or NaN.
	ErrInvalidLease = errors.New("distributed: lease durations and timeouts must be positive")
	// ErrInvalidProcessID: the process id is empty, longer than 200 bytes
	// or contains a space.
	ErrInvalidProcessID = errors.New("distributed: process id must be 1-200 bytes without spaces")
	// ErrUnavailable: Redis could not be reached (or answered an error)
	// and the limiter fails closed, or fails open but has no fallback
	// rate yet (no lease reply, so no process count, and no safe rate).
	// It wraps the underlying error.
	ErrUnavailable = errors.New("distributed: redis unavailable and the limiter fails closed")
	// ErrCallTimeout: a Redis call took longer than WithCallTimeout. It is
	// the limiter's own bound on one round trip, not the caller's
	// deadline, so it does not match context.DeadlineExceeded: code that
	// treats that as "the caller's time ran out" (package shape reports it
	// as an i/o timeout) must not see a slow Redis as one. Errors wrapping
	// ErrUnavailable wrap it when a timeout was the cause.
	ErrCallTimeout = errors.New("distributed: redis call timed out")
	// ErrMisconfigured: Redis answered, with an error that no retry can
	// fix: a database index it does not have, a missing or wrong
	// password, a cluster client against a server that is not in a
	// cluster (or a cluster node talked to as a single server), an
	// unknown command, a key of the wrong type.
	// It is a configuration error, not an outage: the limiter never fails
	// open on it (a fleet whose processes all run alone at their safe
	// rate, sharing nothing, would look healthy), and it does not match
	// ErrUnavailable. It wraps the client's error.
	ErrMisconfigured = errors.New("distributed: redis is not set up for this limiter")
	// ErrNameMismatch: a limiter made WithRefuseMismatch found its name
	// holding a limiter of another rate, kind or unit, and did not join
	// it. Errors that wrap it also wrap ErrMisconfigured.
	ErrNameMismatch = errors.New("distributed: the name holds a limiter of another rate, kind or unit")
	// ErrClosed: the limiter has been closed.
	ErrClosed = errors.New("distributed: limiter closed")
)
