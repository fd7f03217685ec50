package ratelimit

import "errors"

// Sentinel errors for invalid arguments. Every constructor, option and method
// that rejects an argument returns one of these, wrapped with the offending
// value; test for them with errors.Is. Nothing in this package panics on bad
// input, and a rejected call changes no state.
var (
	// ErrInvalidRate: the rate is zero, negative or NaN. +Inf is valid
	// and means unlimited.
	ErrInvalidRate = errors.New("ratelimit: rate must be positive")
	// ErrInvalidPermits: the permit count is zero or negative.
	ErrInvalidPermits = errors.New("ratelimit: requested permits must be positive")
	// ErrInvalidWarmup: the warm-up period is negative.
	ErrInvalidWarmup = errors.New("ratelimit: warm-up period must not be negative")
	// ErrInvalidColdFactor: the cold factor is NaN, infinite or below 1.
	ErrInvalidColdFactor = errors.New("ratelimit: cold factor must be finite and at least 1")
	// ErrInvalidBurst: maxBurstSeconds is NaN, infinite or negative.
	ErrInvalidBurst = errors.New("ratelimit: max burst seconds must be finite and not negative")
	// ErrInvalidResolution: the resolution is neither time.Nanosecond nor
	// time.Microsecond.
	ErrInvalidResolution = errors.New("ratelimit: resolution must be time.Nanosecond or time.Microsecond")
	// ErrInvalidClock: a nil Clock was given.
	ErrInvalidClock = errors.New("ratelimit: clock must not be nil")
	// ErrInvalidOption: an option does not apply to this kind of limiter
	// (a cold factor for a bursty limiter, say).
	ErrInvalidOption = errors.New("ratelimit: option does not apply to this limiter")
)

// ErrNotInitialized: a limiter or wrapper was declared but never made by its
// constructor (its zero value). Its methods refuse rather than panic or let
// everything through. Package distributed and package shape report their
// zero values with it too.
var ErrNotInitialized = errors.New("ratelimit: zero value used: make limiters and wrappers with their constructors")
