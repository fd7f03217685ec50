package ratelimit_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"

	"github.com/smoothrate/ratelimit"
)

// TestZeroLimiter: a Limiter declared rather than made (var l Limiter, or a
// struct field never set) has no tick and no rate. Every method must say so
// or refuse, not divide by its zero tick (a panic) nor admit everything.
func TestZeroLimiter(t *testing.T) {
	var l ratelimit.Limiter

	assert.False(t, l.TryAcquire(1, 0), "TryAcquire")
	assert.False(t, l.TryAcquire(1, time.Second), "TryAcquire with a timeout")

	d, err := l.Acquire(context.Background(), 1)
	assert.ErrorIs(t, err, ratelimit.ErrNotInitialized)
	assert.Zero(t, d)

	r := l.Reserve(1)
	assert.False(t, r.OK(), "Reserve")
	assert.False(t, r.Cancel(), "Cancel of a refused reservation")

	assert.ErrorIs(t, l.SetRate(5), ratelimit.ErrNotInitialized)
	assert.Zero(t, l.Rate())
	assert.Equal(t, ratelimit.Snapshot{}, l.Snapshot())
	assert.Equal(t, "RateLimiter[stableRate=0.0qps]", l.String())

	// Refused, and still refused: nothing above changed the zero value
	// into a limiter that lets everything through.
	assert.False(t, l.TryAcquire(1, 0))
}

// TestNilContext: Acquire(nil, n) is an error, not the panic of ctx.Err(),
// and books nothing.
func TestNilContext(t *testing.T) {
	l, err := ratelimit.NewBursty(1)
	assert.NoError(t, err)
	//lint:ignore SA1012 testing the nil check
	d, err := l.Acquire(nil, 1) //nolint:staticcheck
	assert.ErrorIs(t, err, ratelimit.ErrNilContext)
	assert.Zero(t, d)
	assert.True(t, l.TryAcquire(1, 0), "the refused call booked nothing")
}
