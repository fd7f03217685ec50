package distributed

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/smoothrate/ratelimit/internal/redistest"
)

// TestRedisKilledUnderLoadFailsFast: Redis killed while Acquire runs in
// several goroutines, failing closed, with a client whose retries outlast
// the call timeout. The permits already leased are served; the call that
// met the dead server waits out the call timeout, and then every refusal
// comes at once (the limiter probes Redis through the gate, whose dial is
// refused), as an outage: ErrUnavailable and ErrStore.
func TestRedisKilledUnderLoadFailsFast(t *testing.T) {
	const (
		callTimeout = time.Second
		fast        = 200 * time.Millisecond // generous, well under the call timeout
		workers     = 4
		slowAllowed = 2 // per worker: the calls that waited for the one that met the dead server
	)
	srv := redistest.Start(t)
	o := &redis.Options{Addr: srv.Addr(), ContextTimeoutEnabled: true, DialerRetries: 1}
	redistest.SlowRetries(o)
	c := redis.NewClient(o)
	t.Cleanup(func() { _ = c.Close() })
	l, err := New(c, "killed-under-load", 1e5, WithFailurePolicy(FailClosed), WithCallTimeout(callTimeout),
		WithLeaseDuration(10*time.Millisecond), WithLeaseValidity(50*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close(context.Background()) })
	calls := redistest.KillUnderLoad(t, srv, workers, 500, func() error {
		_, err := l.Acquire(context.Background(), 1)
		return err
	})
	redistest.CheckFast(t, calls, fast, slowAllowed)
	failed := 0
	for w, cs := range calls {
		for i, call := range cs {
			if call.Err == nil {
				continue // from a lease taken before the kill
			}
			failed++
			if !errors.Is(call.Err, ErrUnavailable) || !errors.Is(call.Err, ErrStore) {
				t.Errorf("worker %d, call %d after the kill: %v, want ErrUnavailable and ErrStore", w, i, call.Err)
			}
		}
	}
	if failed == 0 {
		t.Fatal("no call failed after the kill: the test is not looking")
	}
}
