package distributed

import (
	"context"
	"testing"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/smoothrate/ratelimit"
)

// TestZeroLimiter: a Limiter declared rather than made by New has no
// client. Acquire used to start a lease in the background, whose goroutine
// called the nil client and killed the process; every method must refuse
// instead, with ratelimit.ErrNotInitialized where it returns an error.
func TestZeroLimiter(t *testing.T) {
	t.Parallel()
	var l Limiter
	_, err := l.Acquire(context.Background(), 1)
	assert.ErrorIs(t, err, ratelimit.ErrNotInitialized)
	assert.False(t, l.TryAcquire(1, 0))
	assert.ErrorIs(t, l.SetRate(5), ratelimit.ErrNotInitialized)
	assert.Zero(t, l.Rate())
	assert.Equal(t, Stats{}, l.Stats())
	assert.NoError(t, l.Close(context.Background()), "nothing to close")
}

// TestTypedNilClient: a nil *redis.Client in the interface is not == nil;
// New must refuse it as it refuses a nil interface.
func TestTypedNilClient(t *testing.T) {
	t.Parallel()
	l, err := New((*redis.Client)(nil), "x", 1)
	assert.ErrorIs(t, err, ErrNilClient)
	assert.Nil(t, l)
}

// panickyClient is a client whose every call panics (its embedded
// interface is nil): the worst bad state a background call can meet.
type panickyClient struct{ redis.UniversalClient }

// TestClientPanicIsAnError: a panic inside the client, in the goroutine that
// runs a Redis call, becomes that call's error instead of ending the
// process.
func TestClientPanicIsAnError(t *testing.T) {
	t.Parallel()
	l, err := New(panickyClient{}, "x", 10, WithFailurePolicy(FailClosed))
	require.NoError(t, err)
	_, err = l.Acquire(context.Background(), 1)
	require.Error(t, err)
	assert.Contains(t, err.Error(), "panicked")
	assert.False(t, l.TryAcquire(1, 0))
	assert.Error(t, l.SetRate(20))
	assert.ErrorContains(t, l.Stats().LastError, "panicked")
	_ = l.Close(context.Background())
}
