package grpclimit

import (
	"context"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/smoothrate/ratelimit/throttle"
)

// TestMisconfiguredNeverFailsOpen: a Redis that answers but refuses the
// password is answered codes.Internal with or without WithFailOpen (never
// passed, never Unavailable, which clients retry), while an outage still
// fails open.
func TestMisconfiguredNeverFailsOpen(t *testing.T) {
	mr := miniredis.RunT(t)
	mr.RequireAuth("right")
	client := redis.NewClient(&redis.Options{Addr: mr.Addr(), Password: "wrong", MaxRetries: -1})
	t.Cleanup(func() { _ = client.Close() })
	store, err := throttle.NewRedisStore(client)
	require.NoError(t, err)
	var hooked error
	hook := WithErrorHook(func(_ context.Context, _ string, err error) { hooked = err })
	for _, opts := range [][]Option{{WithFailOpen()}, {WithFailClosed(time.Second)}} {
		in, err := New(newLimiter(t, store, throttle.PerHour(5)), append(opts, hook)...)
		require.NoError(t, err)
		_, err = check(t, serveWith(t, in), t.Context())
		assert.Equal(t, codes.Internal, status.Code(err), "%v", err)
		assert.ErrorIs(t, hooked, throttle.ErrMisconfigured)
	}

	in, err := New(newLimiter(t, deadRedis(t), throttle.PerHour(5)), hook, WithFailOpen(), WithStoreTimeout(100*time.Millisecond))
	require.NoError(t, err)
	_, err = check(t, serveWith(t, in), t.Context())
	require.NoError(t, err, "an outage fails open")
	assert.ErrorIs(t, hooked, throttle.ErrUnavailable)
}
