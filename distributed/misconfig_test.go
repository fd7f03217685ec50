package distributed

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/smoothrate/ratelimit/internal/redistest"
)

// TestMisconfiguredRedisIsNotAnOutage: a Redis that answers, but with an
// error no retry can fix, used to be reported as unreachable, and a
// fail-open limiter with a safe rate then ran alone for as long as the
// process lived: a fleet that never shared and said nothing. Each such
// error is now a configuration error (ErrMisconfigured, not ErrUnavailable)
// and the limiter refuses instead of failing open, even with a safe rate.
func TestMisconfiguredRedisIsNotAnOutage(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	// Another program's value where the limiter keeps its state.
	srv.CLI("SET", "ratelimit:{taken}:state", "a string, not a hash")

	opts := func() *redis.Options {
		return &redis.Options{Addr: srv.Addr(), ContextTimeoutEnabled: true, MaxRetries: -1, DialTimeout: 2 * time.Second}
	}
	client := func(change func(*redis.Options)) redis.UniversalClient {
		o := opts()
		change(o)
		c := redis.NewClient(o)
		t.Cleanup(func() { _ = c.Close() })
		return c
	}
	cluster := redis.NewClusterClient(&redis.ClusterOptions{Addrs: []string{srv.Addr()}, ContextTimeoutEnabled: true, MaxRedirects: -1})
	t.Cleanup(func() { _ = cluster.Close() })

	check := func(t *testing.T, c redis.UniversalClient, name, want string) {
		l, err := New(c, name, 100, WithSafeRate(50), WithCallTimeout(2*time.Second), WithProcessID("p"))
		require.NoError(t, err)
		defer l.Close(context.Background())
		for i := range 2 { // the lease call, then the fallback path
			_, err = l.Acquire(context.Background(), 1)
			assert.ErrorIs(t, err, ErrMisconfigured, "Acquire %d", i)
			assert.False(t, errors.Is(err, ErrUnavailable), "Acquire %d: %v matches ErrUnavailable", i, err)
			assert.ErrorContains(t, err, want, "Acquire %d", i)
		}
		assert.False(t, l.TryAcquire(1, 0), "TryAcquire")
		st := l.Stats()
		assert.Zero(t, st.FallbackAdmitted, "admitted by the safe rate")
		assert.True(t, st.InFallback)
		assert.Zero(t, st.FallbackRate, "refusing, not running alone at the safe rate")
		assert.True(t, isMisconfiguration(st.LastError), "%v", st.LastError)
	}

	t.Run("no such database", func(t *testing.T) {
		check(t, client(func(o *redis.Options) { o.DB = 99 }), "x", "DB index is out of range")
	})
	t.Run("cluster client, standalone server", func(t *testing.T) {
		check(t, cluster, "x", "cluster support disabled")
	})
	t.Run("wrong type under the name", func(t *testing.T) {
		check(t, client(func(*redis.Options) {}), "taken", "holds a string, not the limiter state hash")
	})
	// Last: from here on the server wants a password.
	srv.CLI("CONFIG", "SET", "requirepass", "secret")
	t.Run("no password", func(t *testing.T) {
		// A lease's EVALSHA is short (the compact form): NOAUTH. A
		// long one gets a protocol error instead, which
		// TestMisconfigurationClass covers.
		check(t, client(func(*redis.Options) {}), "x", "NOAUTH")
	})
	t.Run("wrong password", func(t *testing.T) {
		check(t, client(func(o *redis.Options) { o.Password = "wrong" }), "x", "WRONGPASS")
	})
}

// TestMisconfigurationClass: the server's replies that no retry can fix, and
// some that a retry can.
func TestMisconfigurationClass(t *testing.T) {
	t.Parallel()
	for _, msg := range []string{
		"ERR DB index is out of range",
		"NOAUTH Authentication required.",
		"WRONGPASS invalid username-password pair or user is disabled.",
		"NOPERM User x has no permissions to run the 'evalsha' command",
		"ERR AUTH <password> called without any password configured for the default user. Are you sure your configuration is correct?",
		"ERR This instance has cluster support disabled",
		"ERR unknown command 'EVALSHA', with args beginning with: ",
		"WRONGTYPE Operation against a key holding the wrong kind of value",
		"ERR Protocol error: unauthenticated multibulk length",
		"ERR ratelimit: key ratelimit:{x}:state holds a string, not the limiter state hash script: 24d0, on @user_script:183.",
	} {
		assert.True(t, isMisconfiguration(errors.New(msg)), msg)
	}
	for _, msg := range []string{
		"dial tcp 127.0.0.1:1: connect: connection refused",
		"LOADING Redis is loading the dataset in memory",
		"READONLY You can't write against a read only replica.",
		"CLUSTERDOWN The cluster is down",
		"TRYAGAIN Multiple keys request during rehashing of slot",
		"i/o timeout",
	} {
		assert.False(t, isMisconfiguration(errors.New(msg)), msg)
	}
	assert.False(t, isMisconfiguration(nil))
}

// TestStatsFallbackRate: Stats says at what rate a process runs alone, so
// that a caller (the ratelimit command's notices) need not restate the
// formula: the safe rate during an outage, 0 when failing closed.
func TestStatsFallbackRate(t *testing.T) {
	t.Parallel()
	down := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1", MaxRetries: -1, DialerRetries: 1})
	t.Cleanup(func() { _ = down.Close() })
	for _, tc := range []struct {
		opt  Option
		want float64
	}{{WithSafeRate(50), 50}, {WithFailurePolicy(FailClosed), 0}} {
		l, err := New(down, "x", 100, tc.opt, WithProcessID("p"))
		require.NoError(t, err)
		assert.Zero(t, l.Stats().FallbackRate, "before any failure")
		_, err = l.Acquire(context.Background(), 1)
		st := l.Stats()
		assert.True(t, st.InFallback, "%v", err)
		assert.Equal(t, tc.want, st.FallbackRate)
		_ = l.Close(context.Background())
	}
}

// TestRedisNowhereLogsNothing: a client pointed at a closed port gives an
// outage (Join's error is the call's, not a misconfiguration; Acquire
// wraps ErrUnavailable: without a safe rate it fails closed), and
// go-redis prints none of its "failed to dial" lines about it: the limiter
// dials first while the server is not known to be reachable
// (redisscript.Gate).
func TestRedisNowhereLogsNothing(t *testing.T) {
	t.Parallel()
	log := redistest.CaptureClientLog(t)
	addr := redistest.ClosedAddr(t)
	c := redis.NewClient(&redis.Options{Addr: addr, ContextTimeoutEnabled: true, DialerRetries: 1}) // a failed dial logs before the call returns
	t.Cleanup(func() { _ = c.Close() })
	l, err := New(c, "nowhere", 100, WithCallTimeout(time.Second), WithProcessID("p"))
	require.NoError(t, err)
	defer l.Close(context.Background())
	err = l.Join(context.Background())
	assert.ErrorContains(t, err, "connection refused", "Join")
	assert.False(t, isMisconfiguration(err), "Join: %v", err)
	for i := range 3 {
		_, err := l.Acquire(context.Background(), 1)
		assert.ErrorIs(t, err, ErrUnavailable, "Acquire %d", i)
	}
	assert.False(t, l.TryAcquire(1, 0), "TryAcquire")
	assert.Empty(t, log.About(addr), "go-redis's log")
}
