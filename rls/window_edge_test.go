package rls

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/smoothrate/ratelimit/internal/redistest"
)

// seqClock returns the times of seq in turn, then the last one forever.
type seqClock struct {
	mu  sync.Mutex
	seq []time.Time
}

func (c *seqClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	t := c.seq[0]
	if len(c.seq) > 1 {
		c.seq = c.seq[1:]
	}
	return t
}

func (c *seqClock) Sleep(ctx context.Context, d time.Duration) error { return nil }

// TestMemoryWindowEdgeInFlight: a call whose service read the time just
// before its window's end, and whose store reads it just after, counts in
// that window's counter, which the store keeps a second past its end; it
// was dropped, and the call counted in a fresh one, admitted where the
// reference (whose Redis keeps the counter) refuses.
func TestMemoryWindowEdgeInFlight(t *testing.T) {
	before, after := time.Unix(T0, 999_000_000), time.Unix(T0+1, 0)
	// Each call reads the clock twice: the service, then the store.
	clk := &seqClock{seq: []time.Time{before, before, before, before, before, before, before, after}}
	st, err := NewMemoryStore(WithStoreClock(clk))
	if err != nil {
		t.Fatal(err)
	}
	svc := kService(t, st, "second", 2)
	for i := 1; i <= 4; i++ {
		resp, err := svc.ShouldRateLimit(context.Background(), request("d", 1, desc("k", "v")))
		if err != nil {
			t.Fatal(err)
		}
		if want := i <= 2; (resp.OverallCode == ok) != want {
			t.Errorf("call %d of second %d (limit 2): %v", i, T0, resp.OverallCode)
		}
	}
}

// TestRedisCounterOutlivesItsWindow: a counter in Redis lives a window past
// its end, not exactly to it: a call whose instance read the time just
// before the end (or whose clock lags) still finds it, as with the
// reference, whose counters live their unit plus up to 300 s from the last
// hit.
func TestRedisCounterOutlivesItsWindow(t *testing.T) {
	srv := redistest.Start(t)
	c := redis.NewClient(&redis.Options{Addr: srv.Addr()})
	t.Cleanup(func() { c.Close() })
	start := int64(T0 / 60 * 60)
	st, err := NewRedisStore(c, WithStoreClock(newTestClock(start+10)))
	if err != nil {
		t.Fatal(err)
	}
	svc := kService(t, st, "minute", 5)
	if _, err := svc.ShouldRateLimit(context.Background(), request("d", 1, desc("k", "v"))); err != nil {
		t.Fatal(err)
	}
	keys, err := c.Keys(context.Background(), "*").Result()
	if err != nil || len(keys) != 1 {
		t.Fatalf("keys %v, %v", keys, err)
	}
	// 50 s left in the window, and a window more.
	if ttl := c.TTL(context.Background(), keys[0]).Val(); ttl < 100*time.Second || ttl > 110*time.Second {
		t.Errorf("the counter's TTL is %v, want 110 s (to a minute past the window's end)", ttl)
	}
}

// kService is a Service of domain d whose one descriptor, k, is limited to
// n a unit, over st.
func kService(t *testing.T, st Store, unit string, n int) *Service {
	t.Helper()
	svc, err := New(parseYAML(t, fmt.Sprintf(`
domain: d
descriptors:
  - key: k
    rate_limit: {unit: %s, requests_per_unit: %d}
`, unit, n)), st)
	if err != nil {
		t.Fatal(err)
	}
	return svc
}
