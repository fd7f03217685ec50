package throttle

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/smoothrate/ratelimit/internal/testlong"
)

// TestRefusalCacheFlood floods one key through a store with the refusal
// cache and through one without, on the same server and clock, and
// requires identical Decisions; it counts the script calls of each.
func TestRefusalCacheFlood(t *testing.T) {
	f := redisFor(t)
	for _, alg := range allAlgorithms {
		t.Run(alg.String(), func(t *testing.T) {
			clk := newSetClock()
			log := newCallLog()
			c := newRedisClient(t, f.srv.Addr())
			c.AddHook(log)
			pre := redisPrefix.Add(1)
			cached := fakeTimeStore(c, WithStoreClock(clk), WithRefusalCache(1000), WithKeyPrefix(fmt.Sprintf("rc%d:", pre)))
			plain := fakeTimeStore(f.client, WithStoreClock(clk), WithKeyPrefix(fmt.Sprintf("rp%d:", pre)))
			l := Limit{Count: 10, Period: time.Second}
			lc, lp := mustNew(t, cached, alg, l), mustNew(t, plain, alg, l)
			// 10 000 in scripts/test-more (testlong): ten times the cache.
			requests := testlong.Pick(3_000, 10_000)
			for i := range requests {
				n := 1
				if i%50 == 7 {
					n = 3 // not always the same request
				}
				dc, dp := mustAllow(t, lc, "hot", n), mustAllow(t, lp, "hot", n)
				if dc != dp {
					t.Fatalf("request %d (n=%d): cached %+v, Redis %+v", i, n, dc, dp)
				}
				clk.Add(time.Millisecond + 37*time.Microsecond)
			}
			calls := log.count("evalsha") + log.count("eval")
			t.Logf("%v, 10/s, one key, a request every 1.037 ms: %d script calls for %d requests (%.4f per request)",
				alg, calls, requests, float64(calls)/float64(requests))
			if calls > requests/10 {
				t.Fatalf("%d script calls for %d requests", calls, requests)
			}
		})
	}
}

func TestRefusalCacheResetAndLimits(t *testing.T) {
	f := redisFor(t)
	ctx := context.Background()
	clk := newSetClock()
	log := newCallLog()
	c := newRedisClient(t, f.srv.Addr())
	c.AddHook(log)
	s := redisStore(c, WithStoreClock(clk), WithRefusalCache(100))
	lim := mustNew(t, s, GCRA, PerMinute(1))
	mustAllow(t, lim, "k", 1)
	if d := mustAllow(t, lim, "k", 1); d.Allowed || s.cache.len() != 1 {
		t.Fatalf("second: %+v, cache %d", d, s.cache.len())
	}
	// Another limit on the same key is not answered from the cache.
	log.reset()
	if d := mustAllow(t, mustNew(t, s, GCRA, Limit{Count: 1, Period: time.Minute, Burst: 2}), "k", 1); !d.Allowed {
		t.Fatalf("under a burst of 2: %+v", d)
	}
	if log.count("evalsha") != 1 {
		t.Fatalf("another limit was answered locally: %v", log.calls)
	}
	// A peek is never cached.
	log.reset()
	mustAllow(t, lim, "k", 0)
	if log.count("evalsha") != 1 {
		t.Fatalf("a peek was answered locally: %v", log.calls)
	}
	// Reset through this store forgets the refusal at once.
	if err := lim.Reset(ctx, "k"); err != nil {
		t.Fatal(err)
	}
	if d := mustAllow(t, lim, "k", 1); !d.Allowed {
		t.Fatalf("after Reset: %+v", d)
	}
	// A Reset by another process is seen once the cached RetryAfter
	// has passed, not before.
	d := mustAllow(t, lim, "k", 1)
	other := mustNew(t, redisStore(f.client, WithStoreClock(clk)), GCRA, PerMinute(1))
	if err := other.Reset(ctx, "k"); err != nil {
		t.Fatal(err)
	}
	clk.Add(d.RetryAfter - time.Microsecond)
	if d := mustAllow(t, lim, "k", 1); d.Allowed || d.RetryAfter != time.Microsecond {
		t.Fatalf("1 µs before the cached RetryAfter: %+v", d)
	}
	clk.Add(time.Microsecond)
	if d := mustAllow(t, lim, "k", 1); !d.Allowed {
		t.Fatalf("at the cached RetryAfter: %+v", d)
	}
}

func TestRefusalCacheBounded(t *testing.T) {
	for _, max := range []int{1, 5, 1000, 5000} {
		c := newRefusalCache(max)
		p := &params{alg: GCRA}
		for i := range 3 * max {
			c.record(request{p: p, key: fmt.Sprint(i), n: 1}, Decision{RetryAfter: time.Hour}, 0)
		}
		if n := c.len(); n > max || n < max/2 {
			t.Errorf("WithRefusalCache(%d): %d entries after %d refusals", max, n, 3*max)
		}
	}
	// Expired entries make room first.
	c := newRefusalCache(2)
	p := &params{alg: GCRA}
	c.record(request{p: p, key: "old", n: 1}, Decision{RetryAfter: time.Microsecond}, 0)
	c.record(request{p: p, key: "live", n: 1}, Decision{RetryAfter: time.Hour}, 0)
	c.record(request{p: p, key: "new", n: 1}, Decision{RetryAfter: time.Hour}, 10)
	if _, ok := c.lookup(request{p: p, key: "live", n: 1}, 20); !ok {
		t.Error("a live entry was evicted while an expired one remained")
	}
}
