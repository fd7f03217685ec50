// Package check is the one home of the argument checks that the root
// package and package distributed share: a rate, a clock, a burst, a cold
// factor, a warm-up. Both packages used to carry copies, and the copies
// drifted (distributed's WithClock let a typed nil clock through, to panic
// on its first Now). The sentinels live here too, so that the errors are the
// same values whichever package returns them; package ratelimit exports
// them under their public names (ratelimit.ErrInvalidRate and so on).
package check

import (
	"errors"
	"fmt"
	"math"
	"reflect"
	"time"
)

// The sentinels, exported by package ratelimit; their documentation is
// there.
var (
	ErrInvalidRate       = errors.New("ratelimit: rate must be positive")
	ErrInvalidWarmup     = errors.New("ratelimit: warm-up period must not be negative")
	ErrInvalidColdFactor = errors.New("ratelimit: cold factor must be finite and at least 1")
	ErrInvalidBurst      = errors.New("ratelimit: max burst seconds must be finite and not negative")
	ErrInvalidClock      = errors.New("ratelimit: clock must not be nil")
	ErrNilContext        = errors.New("ratelimit: nil context (pass context.Background() or context.TODO())")
)

// Rate accepts a positive rate, +Inf included; zero, negative and NaN wrap
// ErrInvalidRate.
func Rate(permitsPerSecond float64) error {
	if !(permitsPerSecond > 0) { // also catches NaN
		return fmt.Errorf("%w: %v", ErrInvalidRate, permitsPerSecond)
	}
	return nil
}

// Clock accepts a clock that is neither nil nor a typed nil such as
// (*clocktest.Fake)(nil), which is not == nil but would panic on its first
// Now. c is the Clock interface value (any, since the interface is the root
// package's).
func Clock(c any) error {
	if c == nil {
		return ErrInvalidClock
	}
	if IsNil(c) {
		return fmt.Errorf("%w: %T(nil)", ErrInvalidClock, c)
	}
	return nil
}

// IsNil reports whether v is nil or holds a nil pointer, map, slice,
// function or channel: a typed nil, which is not == nil inside an
// interface but fails on its first method call.
func IsNil(v any) bool {
	if v == nil {
		return true
	}
	switch rv := reflect.ValueOf(v); rv.Kind() {
	case reflect.Pointer, reflect.Map, reflect.Slice, reflect.Func, reflect.Chan, reflect.Interface:
		return rv.IsNil()
	}
	return false
}

// MaxBurstSeconds accepts a finite, non-negative number of seconds.
func MaxBurstSeconds(seconds float64) error {
	if math.IsNaN(seconds) || math.IsInf(seconds, 0) || seconds < 0 {
		return fmt.Errorf("%w: %v", ErrInvalidBurst, seconds)
	}
	return nil
}

// ColdFactor accepts a finite cold factor of at least 1.
func ColdFactor(coldFactor float64) error {
	if math.IsNaN(coldFactor) || math.IsInf(coldFactor, 0) || coldFactor < 1 {
		return fmt.Errorf("%w: %v", ErrInvalidColdFactor, coldFactor)
	}
	return nil
}

// Warmup accepts a warm-up period that is not negative.
func Warmup(period time.Duration) error {
	if period < 0 {
		return fmt.Errorf("%w: %v", ErrInvalidWarmup, period)
	}
	return nil
}

// Option returns err, the error of an option, so that it also matches
// invalidOption (the package's ErrInvalidOption), keeping err's message and
// the sentinel err already wraps (ErrInvalidBurst, say): every package
// reports every bad option the same way, and a caller tests for either.
func Option(invalidOption, err error) error {
	if err == nil || errors.Is(err, invalidOption) {
		return err
	}
	return &optionError{err: err, kind: invalidOption}
}

type optionError struct{ err, kind error }

func (e *optionError) Error() string   { return e.err.Error() }
func (e *optionError) Unwrap() []error { return []error{e.err, e.kind} }
