package throttle

import (
	"context"
	"errors"
	"net"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/smoothrate/ratelimit/internal/redisscript"
	"github.com/smoothrate/ratelimit/internal/redistest"
)

// TestMain gives the Redis stores of this package's tests a long default
// call timeout: on a loaded machine (CI, -race) a round trip can take
// longer than DefaultCallTimeout, and a test of decisions must not fail on
// a slow one. TestRedisCallTimeout tests the default itself.
func TestMain(m *testing.M) {
	defaultCallTimeout = 10 * time.Second
	os.Exit(m.Run())
}

// TestRedisCallTimeout: a call to a Redis that does not answer (a server
// stopped with SIGSTOP: the kernel still accepts connections, nothing
// replies) returns an outage error after the store's bound, not after
// go-redis's 3 s read timeout or never, whether the bound is the default
// or WithCallTimeout's; and whether the client honours deadlines (the
// call then runs inline) or not (in a goroutine of its own).
func TestRedisCallTimeout(t *testing.T) {
	srv := redistest.Start(t)
	c := redis.NewClient(&redis.Options{Addr: srv.Addr(), MaxRetries: -1})
	t.Cleanup(func() { _ = c.Close() })
	ctx := context.Background()
	if err := c.Ping(ctx).Err(); err != nil { // a pooled connection, so the stop hits a read
		t.Fatal(err)
	}
	inline := newRedisClient(t, srv.Addr())
	if err := inline.Ping(ctx).Err(); err != nil {
		t.Fatal(err)
	}
	defaultCallTimeout = DefaultCallTimeout
	t.Cleanup(func() { defaultCallTimeout = 10 * time.Second })
	if DefaultCallTimeout < 10*time.Millisecond || DefaultCallTimeout >= 100*time.Millisecond {
		t.Fatalf("DefaultCallTimeout = %v, want tens of milliseconds", DefaultCallTimeout)
	}
	srv.Pause()
	defer srv.Resume()
	for _, tc := range []struct {
		name  string
		store *RedisStore
		bound time.Duration
	}{
		{"default", redisStore(c), DefaultCallTimeout},
		{"WithCallTimeout", redisStore(c, WithCallTimeout(20*time.Millisecond)), 20 * time.Millisecond},
		// A client that honours deadlines: the call runs inline.
		{"inline", redisStore(inline), DefaultCallTimeout},
	} {
		if tc.store.inline != (tc.name == "inline") {
			t.Fatalf("%s: inline = %v", tc.name, tc.store.inline)
		}
		lim := mustNew(t, tc.store, GCRA, PerSecond(10))
		start := time.Now()
		d, err := lim.Allow(ctx, "k")
		took := time.Since(start)
		if !errors.Is(err, ErrUnavailable) || !errors.Is(err, ErrStore) || !errors.Is(err, redisscript.ErrTimeout) || d.Allowed {
			t.Fatalf("%s: %+v, %v; want a refusal wrapping ErrUnavailable and the timeout", tc.name, d, err)
		}
		if errors.Is(err, context.DeadlineExceeded) {
			t.Errorf("%s: %v matches context.DeadlineExceeded: the caller's deadline did not pass", tc.name, err)
		}
		// The bound, not go-redis's 3 s read timeout. (An upper bound
		// on a correctness property, with room for a loaded machine.)
		if took < tc.bound || took > time.Second {
			t.Errorf("%s: the call took %v, want about %v", tc.name, took, tc.bound)
		}
		if err := lim.Reset(ctx, "k"); !errors.Is(err, ErrUnavailable) {
			t.Errorf("%s: Reset: %v, want ErrUnavailable", tc.name, err)
		}
	}
}

// TestRedisNowhere: a client whose address leads nowhere (a listener that
// never accepts, so the handshake completes in the kernel and no reply
// ever comes; and a closed port) gives an outage error within the
// default bound, not after go-redis's 5 s dial or 3 s read timeouts; and
// go-redis prints none of its "failed to dial" lines about it: the store
// dials first while the server is not known to be reachable
// (redisscript.Gate).
func TestRedisNowhere(t *testing.T) {
	closed := redistest.ClosedAddr(t)
	silent, err := net.Listen("tcp", "127.0.0.1:0") // never accepted
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = silent.Close() })
	defaultCallTimeout = DefaultCallTimeout
	t.Cleanup(func() { defaultCallTimeout = 10 * time.Second })
	log := redistest.CaptureClientLog(t)
	for _, addr := range []string{silent.Addr().String(), closed} {
		// One dial attempt a call: go-redis then logs a failed dial
		// before the call returns, so the check below sees it (with
		// its default retries it logs once our bound has passed).
		c := redis.NewClient(&redis.Options{Addr: addr, DialerRetries: 1})
		t.Cleanup(func() { _ = c.Close() })
		lim := mustNew(t, redisStore(c), TokenBucket, PerSecond(10))
		for i := range 3 {
			start := time.Now()
			d, err := lim.Allow(context.Background(), "k")
			took := time.Since(start)
			if !errors.Is(err, ErrUnavailable) || d.Allowed {
				t.Errorf("%s: %+v, %v; want a refusal wrapping ErrUnavailable", addr, d, err)
			}
			if took > time.Second {
				t.Errorf("%s: call %d took %v, want at most about %v", addr, i, took, DefaultCallTimeout)
			}
		}
		if err := lim.Reset(context.Background(), "k"); !errors.Is(err, ErrUnavailable) {
			t.Errorf("%s: Reset: %v, want ErrUnavailable", addr, err)
		}
		if _, err := AllowAll(context.Background(), Check{Limiter: lim, Key: "a", N: 1}, Check{Limiter: lim, Key: "b", N: 1}); !errors.Is(err, ErrUnavailable) {
			t.Errorf("%s: AllowAll: %v, want ErrUnavailable", addr, err)
		}
		if lines := log.About(addr); len(lines) > 0 {
			t.Errorf("%s: go-redis logged:\n%s", addr, strings.Join(lines, "\n"))
		}
	}
}

func TestWithCallTimeoutInvalid(t *testing.T) {
	c := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1"})
	t.Cleanup(func() { _ = c.Close() })
	for _, o := range []StoreOption{WithCallTimeout(0), WithCallTimeout(-time.Second)} {
		if _, err := NewRedisStore(c, o); !errors.Is(err, ErrInvalidOption) {
			t.Errorf("NewRedisStore: %v, want ErrInvalidOption", err)
		}
	}
	// A MemoryStore makes no calls.
	if _, err := NewMemoryStore(WithCallTimeout(time.Second)); !errors.Is(err, ErrInvalidOption) {
		t.Errorf("NewMemoryStore: %v, want ErrInvalidOption", err)
	}
}
