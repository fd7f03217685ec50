package grpclimit

import (
	"context"
	"net"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/peer"
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

// TestCallerGoneIsNoStoreError: a call whose caller gave up before or
// during its decision is answered with its context's status, and the
// error hook hears nothing: nothing is known of the store (the hook heard
// "store failed: context canceled", and a store-error counter or an
// outage's log with it).
func TestCallerGoneIsNoStoreError(t *testing.T) {
	store := memStore(t)
	var hooked error
	in, err := New(newLimiter(t, store, throttle.PerMinute(3)),
		WithLimit("method", newLimiter(t, store, throttle.PerMinute(3)), Peer(), Method()),
		WithErrorHook(func(_ context.Context, _ string, err error) { hooked = err }))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(peer.NewContext(context.Background(), &peer.Peer{Addr: &net.TCPAddr{IP: net.ParseIP("192.0.2.1"), Port: 1}}))
	cancel()
	_, err = in.check(ctx, "/s/M")
	if status.Code(err) != codes.Canceled || hooked != nil {
		t.Errorf("the caller gone: %v, the hook got %v", err, hooked)
	}
}
