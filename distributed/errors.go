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
	// ErrClosed: the limiter has been closed.
	ErrClosed = errors.New("distributed: limiter closed")
)
