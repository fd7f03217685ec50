package check_test

import (
	"context"
	"math"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"

	"github.com/smoothrate/ratelimit/internal/check"
)

type fakeClock struct{}

func (*fakeClock) Now() time.Time                             { return time.Time{} }
func (*fakeClock) Sleep(context.Context, time.Duration) error { return nil }

func TestChecks(t *testing.T) {
	assert.ErrorIs(t, check.Clock(nil), check.ErrInvalidClock)
	// The drift this package ended: a typed nil is not == nil, but a
	// limiter would panic on its first Now.
	err := check.Clock((*fakeClock)(nil))
	assert.ErrorIs(t, err, check.ErrInvalidClock)
	assert.ErrorContains(t, err, "*check_test.fakeClock(nil)")
	assert.NoError(t, check.Clock(&fakeClock{}))

	for _, r := range []float64{0, math.Copysign(0, -1), -1, math.NaN(), math.Inf(-1)} {
		assert.ErrorIs(t, check.Rate(r), check.ErrInvalidRate, "%v", r)
	}
	assert.NoError(t, check.Rate(math.Inf(1)))
	assert.NoError(t, check.Rate(math.SmallestNonzeroFloat64))

	for _, s := range []float64{-1, math.NaN(), math.Inf(1)} {
		assert.ErrorIs(t, check.MaxBurstSeconds(s), check.ErrInvalidBurst, "%v", s)
	}
	assert.NoError(t, check.MaxBurstSeconds(0))
	for _, f := range []float64{0.999, math.NaN(), math.Inf(1)} {
		assert.ErrorIs(t, check.ColdFactor(f), check.ErrInvalidColdFactor, "%v", f)
	}
	assert.NoError(t, check.ColdFactor(1))
	assert.ErrorIs(t, check.Warmup(-1), check.ErrInvalidWarmup)
	assert.NoError(t, check.Warmup(0))
}
