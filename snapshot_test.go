package ratelimit_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/smoothrate/ratelimit"
	"github.com/smoothrate/ratelimit/clocktest"
)

// TestSnapshotWarmingUpShape: a Snapshot carries the whole shape of a
// warming-up limiter, so that a caller (the ratelimit command's trace)
// never rebuilds an engine or restates its formulas to describe it.
func TestSnapshotWarmingUpShape(t *testing.T) {
	l, err := ratelimit.NewWarmingUp(4, 2*time.Second, ratelimit.WithClock(clocktest.NewFake()))
	require.NoError(t, err)
	s := l.Snapshot()
	assert.Equal(t, 250*time.Millisecond, s.StableInterval)
	assert.Equal(t, time.Duration(ratelimit.DefaultColdFactor*float64(250*time.Millisecond)), s.ColdInterval)
	// Guava's thresholdPermits = 0.5 × warmup / stableInterval.
	assert.InDelta(t, 4, s.ThresholdPermits, 1e-12)
	assert.InDelta(t, 8, s.MaxPermits, 1e-12)

	b, err := ratelimit.NewBursty(4, ratelimit.WithClock(clocktest.NewFake()))
	require.NoError(t, err)
	s = b.Snapshot()
	assert.Zero(t, s.ColdInterval, "a bursty limiter's stored permits are free")
	assert.Zero(t, s.ThresholdPermits)
	assert.InDelta(t, ratelimit.DefaultMaxBurstSeconds*4, s.MaxPermits, 1e-12)
}
