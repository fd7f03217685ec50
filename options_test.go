package ratelimit_test

import (
	"errors"
	"testing"

	"github.com/smoothrate/ratelimit"
	"github.com/smoothrate/ratelimit/clocktest"
)

// A typed nil clock is rejected at construction instead of panicking on the
// first call.
func TestWithClockRejectsTypedNil(t *testing.T) {
	var f *clocktest.Fake
	if _, err := ratelimit.NewBursty(1, ratelimit.WithClock(f)); !errors.Is(err, ratelimit.ErrInvalidClock) {
		t.Fatalf("NewBursty(WithClock((*Fake)(nil))) error = %v, want ErrInvalidClock", err)
	}
	if _, err := ratelimit.NewWarmingUp(1, 0, ratelimit.WithClock(f)); !errors.Is(err, ratelimit.ErrInvalidClock) {
		t.Fatalf("NewWarmingUp(WithClock((*Fake)(nil))) error = %v, want ErrInvalidClock", err)
	}
}
