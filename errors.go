package ratelimit

import (
	"errors"

	"github.com/smoothrate/ratelimit/internal/check"
)

// Sentinel errors for invalid arguments. Every constructor, option and method
// that rejects an argument returns one of these, wrapped with the offending
// value; test for them with errors.Is. Nothing in this package panics on bad
// input, and a rejected call changes no state. Package distributed checks
// the same arguments with the same code and returns the same sentinels.
var (
	// ErrInvalidRate: the rate is zero, negative or NaN. +Inf is valid
	// and means unlimited.
	ErrInvalidRate = check.ErrInvalidRate
	// ErrInvalidPermits: the permit count is zero or negative.
	ErrInvalidPermits = errors.New("ratelimit: requested permits must be positive")
	// ErrInvalidWarmup: the warm-up period is negative.
	ErrInvalidWarmup = check.ErrInvalidWarmup
	// ErrInvalidColdFactor: the cold factor is NaN, infinite or below 1.
	ErrInvalidColdFactor = check.ErrInvalidColdFactor
	// ErrInvalidBurst: maxBurstSeconds is NaN, infinite or negative.
	ErrInvalidBurst = check.ErrInvalidBurst
	// ErrInvalidResolution: the resolution is neither time.Nanosecond nor
	// time.Microsecond.
	ErrInvalidResolution = errors.New("ratelimit: resolution must be time.Nanosecond or time.Microsecond")
	// ErrInvalidClock: a nil Clock was given, or a typed nil such as
	// (*clocktest.Fake)(nil).
	ErrInvalidClock = check.ErrInvalidClock
	// ErrNilContext: a nil context.Context was passed (to Acquire, say).
	// The standard library calls that a programming error and may panic;
	// this module returns this error instead, from every method that takes
	// a context, so that nothing panics on it. Package throttle returns the
	// same value as throttle.ErrNilContext.
	ErrNilContext = check.ErrNilContext
	// ErrInvalidOption: a nil option, an option with an invalid value
	// (which also wraps the value's sentinel, ErrInvalidBurst say), or one
	// that does not apply to this kind of limiter (a cold factor for a
	// bursty limiter, say).
	ErrInvalidOption = errors.New("ratelimit: invalid option")
)

// ErrNotInitialized: a limiter or wrapper was declared but never made by its
// constructor (its zero value). Its methods refuse rather than panic or let
// everything through. Package distributed and package shape report their
// zero values with it too.
var ErrNotInitialized = errors.New("ratelimit: zero value used: make limiters and wrappers with their constructors")
