package throttle

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/smoothrate/ratelimit"
)

// The defects table of keyed-algorithms.md (the reference articles' code,
// shared/seeds 000-004): one test per row, each on every store. A test's
// doc names the article's failure; its body shows that ours has not got it.

// defectStep is one call of a scripted scenario: at time at (since the
// start), ask for n and expect allowed, remaining and retry.
type defectStep struct {
	at        time.Duration
	n         int
	allowed   bool
	remaining int
	retry     time.Duration
}

// runDefect plays steps on a fresh store for alg and l.
func runDefect(t *testing.T, newStore func(ratelimit.Clock) Store, alg Algorithm, l Limit, steps []defectStep) {
	t.Helper()
	clk := newSetClock()
	start := clk.Now()
	lim := mustNew(t, newStore(clk), alg, l)
	for i, s := range steps {
		clk.Set(start.Add(s.at))
		d := mustAllow(t, lim, "client", s.n)
		if d.Allowed != s.allowed || d.Remaining != s.remaining || d.RetryAfter != s.retry {
			t.Fatalf("%v %v step %d (n=%d at %v): %+v, want allowed %v remaining %d retry %v",
				alg, l, i, s.n, s.at, d, s.allowed, s.remaining, s.retry)
		}
	}
}

// Seed 000 counter: the window test compared now − period with the request
// size, so the window never reset and a key that reached its limit stayed
// refused forever. Ours: every algorithm is back to its full allowance
// one period (ResetAfter) after its last admitted request.
func TestDefectWindowNeverResets(t *testing.T) {
	forEachStore(t, func(t *testing.T, newStore func(ratelimit.Clock) Store) {
		for _, alg := range allAlgorithms {
			clk := newSetClock()
			lim := mustNew(t, newStore(clk), alg, PerMinute(5))
			var d Decision
			for range 6 {
				d = mustAllow(t, lim, "k", 1)
			}
			if d.Allowed || d.ResetAfter <= 0 || d.ResetAfter > 2*time.Minute {
				t.Fatalf("%v: sixth of 5 per minute: %+v", alg, d)
			}
			clk.Add(d.ResetAfter)
			if d := mustAllow(t, lim, "k", 5); !d.Allowed {
				t.Errorf("%v: still refused after ResetAfter: %+v", alg, d)
			}
		}
	})
}

// Seed 000 sliding window, seed 002 Lua and seed 004 pipeline: members were
// millisecond timestamps, so requests in the same millisecond collapsed
// into one entry and a key admitted more than its limit. Ours logs every
// admitted unit, at the same microsecond too.
func TestDefectSameInstantRequestsCollide(t *testing.T) {
	forEachStore(t, func(t *testing.T, newStore func(ratelimit.Clock) Store) {
		runDefect(t, newStore, SlidingLog, PerSecond(3), []defectStep{
			{0, 1, true, 2, 0},
			{0, 1, true, 1, 0},
			{500 * time.Microsecond, 1, true, 0, 0}, // same millisecond
			{500 * time.Microsecond, 1, false, 0, time.Second - 500*time.Microsecond},
			{time.Second, 2, true, 0, 0}, // the two at 0 have expired, the one at 0.5 ms has not
			{time.Second, 1, false, 0, 500 * time.Microsecond},
		})
	})
}

// Seed 000 sliding window, seed 004 pipeline (and mennanov/limiters #110):
// refused requests were logged too, so a client that kept retrying was
// refused forever. Ours writes nothing for a refusal, on every algorithm.
func TestDefectRefusalsLockClientOut(t *testing.T) {
	forEachStore(t, func(t *testing.T, newStore func(ratelimit.Clock) Store) {
		for _, alg := range allAlgorithms {
			clk := newSetClock()
			lim := mustNew(t, newStore(clk), alg, PerSecond(2))
			mustAllow(t, lim, "k", 2)
			// Retry every 10 ms; the first success must come no later than
			// two periods after the admitted requests (the sliding window
			// weighs the previous window's count for a second period).
			var waited time.Duration
			for {
				clk.Add(10 * time.Millisecond)
				waited += 10 * time.Millisecond
				if mustAllow(t, lim, "k", 1).Allowed {
					break
				}
				if waited > 2*time.Second {
					t.Fatalf("%v: a client retrying every 10 ms is still refused after %v", alg, waited)
				}
			}
		}
	})
}

// Seed 000 sliding window: no TTL, so keys lived forever. Ours: the memory
// store reclaims a key once its state has expired (the Redis store sets a
// TTL on every key; its own tests check it).
func TestDefectKeysLiveForever(t *testing.T) {
	clk := newSetClock()
	s := memStore(WithStoreClock(clk))
	for _, alg := range allAlgorithms {
		lim := mustNew(t, s, alg, PerSecond(10))
		for i := range 100 {
			mustAllow(t, lim, string(rune('a'+i%26))+string(rune('A'+i/26)), 1)
		}
	}
	clk.Add(3 * time.Second) // every window, log and meter is full again
	lim := mustNew(t, s, GCRA, PerSecond(10))
	// Each insert inspects a couple of entries of its own shard; 4 000
	// inserts over the store's shards (64 per processor) visit every
	// shard's table several times over.
	for i := range 4000 {
		mustAllow(t, lim, fmt.Sprint("fresh", i), 1)
	}
	if st := s.Stats(); st.Expired != 600 || st.Keys != 4000 {
		t.Fatalf("Stats = %+v: want the 600 expired keys reclaimed by 4 000 inserts, and those kept", st)
	}
}

// Seed 000 token bucket: the wait was computed as a fraction and returned
// as a Long, so a 0.33 s wait became 0. Ours is exact to the microsecond,
// rounded up.
func TestDefectFractionalWaitTruncated(t *testing.T) {
	forEachStore(t, func(t *testing.T, newStore func(ratelimit.Clock) Store) {
		for _, alg := range []Algorithm{GCRA, TokenBucket, LeakyBucket} {
			runDefect(t, newStore, alg, PerSecond(3), []defectStep{
				{0, 3, true, 0, 0},
				{0, 1, false, 0, 333334 * time.Microsecond},
				{333333 * time.Microsecond, 1, false, 0, time.Microsecond},
				{333334 * time.Microsecond, 1, true, 0, 0},
			})
		}
	})
}

// Seed 000 funnel: HMGET listed 'requestNeed' where 'water' belonged
// (fields shifted) and read requestNeed from an undefined global, so the
// script errored. Ours: a leaky bucket's level, leak and cost are where
// they belong: pour 3 of 5, leak 1 per second, and a request of 2 costs 2.
func TestDefectFunnelFieldsShifted(t *testing.T) {
	forEachStore(t, func(t *testing.T, newStore func(ratelimit.Clock) Store) {
		runDefect(t, newStore, LeakyBucket, Limit{Count: 1, Period: time.Second, Burst: 5}, []defectStep{
			{0, 3, true, 2, 0},
			{time.Second, 0, true, 3, 0}, // one unit leaked
			{time.Second, 2, true, 1, 0},
			{time.Second, 2, false, 1, time.Second},
		})
	})
}

// Seed 001 counter: the count was read, incremented in a local copy and
// never written back, so the limit never applied; the read-then-write was
// not atomic either. Ours: from eight goroutines at once, a key admits
// exactly its limit, on every algorithm.
func TestDefectCounterNeverWrittenBack(t *testing.T) {
	forEachStore(t, func(t *testing.T, newStore func(ratelimit.Clock) Store) {
		for _, alg := range allAlgorithms {
			lim := mustNew(t, newStore(newSetClock()), alg, PerHour(20))
			var wg sync.WaitGroup
			var mu sync.Mutex
			allowed := 0
			for range 8 {
				wg.Add(1)
				go func() {
					defer wg.Done()
					for range 10 {
						d, err := lim.Allow(context.Background(), "k")
						if err != nil {
							t.Error(err)
							return
						}
						if d.Allowed {
							mu.Lock()
							allowed++
							mu.Unlock()
						}
					}
				}()
			}
			wg.Wait()
			if allowed != 20 {
				t.Errorf("%v: %d of 80 concurrent requests admitted, want exactly 20", alg, allowed)
			}
		}
	})
}

// Seed 001 token bucket: the whole bucket was refilled once per interval,
// a fixed window in disguise. Ours refills continuously: 10 per second
// gives one token back every 100 ms, not ten at once after a second.
func TestDefectRefillOncePerInterval(t *testing.T) {
	forEachStore(t, func(t *testing.T, newStore func(ratelimit.Clock) Store) {
		runDefect(t, newStore, TokenBucket, PerSecond(10), []defectStep{
			{0, 10, true, 0, 0},
			{100 * time.Millisecond, 2, false, 1, 100 * time.Millisecond},
			{100 * time.Millisecond, 1, true, 0, 0},
			{450 * time.Millisecond, 0, true, 3, 0},
		})
	})
}

// Seed 002 Lua sliding window: ZCARD ran before ZREMRANGEBYSCORE, so
// expired entries were counted. Ours drops entries older than the period
// before counting: a full log is empty again exactly one period later.
func TestDefectExpiredEntriesCounted(t *testing.T) {
	forEachStore(t, func(t *testing.T, newStore func(ratelimit.Clock) Store) {
		runDefect(t, newStore, SlidingLog, PerSecond(4), []defectStep{
			{0, 4, true, 0, 0},
			{time.Second - time.Microsecond, 1, false, 0, time.Microsecond},
			{time.Second, 4, true, 0, 0},
		})
	})
}

// Seed 004 pipeline sliding window: period*1000 overflowed a Java int for
// periods over about 24.8 days (2^31 ms). Ours computes in int64
// microseconds: 2 per 60 days works on every algorithm, to the
// microsecond, with waits beyond 2^31 ms.
func TestDefectLongPeriodOverflows(t *testing.T) {
	period := 60 * 24 * time.Hour
	javaIntOverflow := time.Duration(1<<31) * time.Millisecond // 2^31 ms
	forEachStore(t, func(t *testing.T, newStore func(ratelimit.Clock) Store) {
		for _, alg := range allAlgorithms {
			clk := newSetClock()
			// At the start of an aligned window, so the fixed window's
			// wait is a whole period too.
			clk.Set(time.Unix(0, 0).Add(period * (time.Duration(clk.Now().UnixNano())/period + 1)))
			lim := mustNew(t, newStore(clk), alg, Limit{Count: 2, Period: period})
			mustAllow(t, lim, "k", 2)
			d := mustAllow(t, lim, "k", 1)
			if d.Allowed || d.RetryAfter <= javaIntOverflow || d.RetryAfter > 2*period {
				t.Fatalf("%v: third of 2 per 60 days: %+v, want a wait of (2^31 ms, 120 days] (the sliding window weighs the previous window for a second period)", alg, d)
			}
			clk.Add(d.RetryAfter - time.Microsecond)
			if d := mustAllow(t, lim, "k", 1); d.Allowed {
				t.Errorf("%v: allowed 1 µs before RetryAfter", alg)
			}
			clk.Add(time.Microsecond)
			if d := mustAllow(t, lim, "k", 1); !d.Allowed {
				t.Errorf("%v: refused at RetryAfter: %+v", alg, d)
			}
		}
	})
}

// Seed 004 local funnel: leak() never advanced the last-leak time, so each
// call re-credited all the leakage since the funnel was made. Ours leaks
// each interval once: pour 2 (burst 2, 1 per second), pour 1 at 1 s; at
// 1.5 s the level is 1.5, so 1 more does not fit (the bug saw 0.5).
func TestDefectLeakNeverAdvances(t *testing.T) {
	forEachStore(t, func(t *testing.T, newStore func(ratelimit.Clock) Store) {
		runDefect(t, newStore, LeakyBucket, Limit{Count: 1, Period: time.Second, Burst: 2}, []defectStep{
			{0, 2, true, 0, 0},
			{time.Second, 1, true, 0, 0},
			{1500 * time.Millisecond, 1, false, 0, 500 * time.Millisecond},
			{2 * time.Second, 1, true, 0, 0},
		})
	})
}

// Seed 004 local funnel: leaked in whole seconds (integer division), so a
// funnel of 10 per second leaked nothing for a whole second. Ours leaks
// continuously: one unit back after 100 ms.
func TestDefectWholeSecondLeak(t *testing.T) {
	forEachStore(t, func(t *testing.T, newStore func(ratelimit.Clock) Store) {
		runDefect(t, newStore, LeakyBucket, Limit{Count: 10, Period: time.Second, Burst: 1}, []defectStep{
			{0, 1, true, 0, 0},
			{99 * time.Millisecond, 1, false, 0, time.Millisecond},
			{100 * time.Millisecond, 1, true, 0, 0},
		})
	})
}

// Seed 004 local funnel: a request larger than the free space reset the
// funnel to completely free instead of being refused. Ours refuses it and
// keeps the level.
func TestDefectReductionLargerThanFreeSpace(t *testing.T) {
	forEachStore(t, func(t *testing.T, newStore func(ratelimit.Clock) Store) {
		runDefect(t, newStore, LeakyBucket, Limit{Count: 1, Period: time.Hour, Burst: 5}, []defectStep{
			{0, 4, true, 1, 0},
			{0, 3, false, 1, 2 * time.Hour},
			{0, 0, true, 1, 0},
			{0, 1, true, 0, 0},
		})
	})
}

// Seed 003 leaky bucket pseudo-code: `water < burst` admitted when one
// more unit would overflow a fractional level (1.5 < 2 let the level reach
// 2.5). Ours admits only when level + cost ≤ burst.
func TestDefectOverflowAtFractionalLevel(t *testing.T) {
	forEachStore(t, func(t *testing.T, newStore func(ratelimit.Clock) Store) {
		runDefect(t, newStore, LeakyBucket, Limit{Count: 1, Period: time.Second, Burst: 2}, []defectStep{
			{0, 2, true, 0, 0},
			{500 * time.Millisecond, 1, false, 0, 500 * time.Millisecond},
			{time.Second, 1, true, 0, 0},
		})
	})
}

// TestPeekAlwaysAllowed: a peek (n = 0) is allowed and counts nothing on
// every algorithm and store, though another limit on the key has counted
// more than the peeking one allows, or a clock stepped back puts the
// window's estimate over it; and an AllowAll with such a peek goes ahead.
// The windows and the log refused it.
func TestPeekAlwaysAllowed(t *testing.T) {
	forEachStore(t, func(t *testing.T, newStore func(clk ratelimit.Clock) Store) {
		for _, alg := range allAlgorithms {
			t.Run(alg.String(), func(t *testing.T) {
				clk := newSetClock()
				s := newStore(clk)
				big := mustNew(t, s, alg, PerMinute(10))
				small := mustNew(t, s, alg, PerMinute(3))
				if d := mustAllow(t, big, "k", 5); !d.Allowed {
					t.Fatalf("big: %+v", d)
				}
				if d := mustAllow(t, small, "k", 0); !d.Allowed || d.RetryAfter != 0 {
					t.Errorf("peek: %+v; want allowed", d)
				}
				ds, err := AllowAll(context.Background(), Check{Limiter: small, Key: "k", N: 0}, Check{Limiter: big, Key: "other", N: 1})
				if err != nil || !ds.Allowed() {
					t.Errorf("AllowAll with a peek: %+v, %v", ds, err)
				}
			})
		}
		t.Run("sliding window, the clock back", func(t *testing.T) {
			clk := newSetClock()
			lim := mustNew(t, newStore(clk), SlidingWindow, PerSecond(10))
			w := clk.Now().Truncate(time.Second).Add(10 * time.Second)
			clk.Set(w.Add(-500 * time.Millisecond))
			mustAllow(t, lim, "k", 10)
			clk.Set(w.Add(900 * time.Millisecond))
			mustAllow(t, lim, "k", 9)
			clk.Set(w.Add(100 * time.Millisecond)) // an estimate of 18
			if d := mustAllow(t, lim, "k", 0); !d.Allowed || d.RetryAfter != 0 {
				t.Errorf("peek: %+v", d)
			}
		})
	})
}

// TestBucketStepBackKeepsItsKey: a bucket written after the clock stepped
// back refills (leaks) nothing until time passes its last refill again, so
// it is full, and may be forgotten, that much later than ResetAfter from
// now. Its key's expiry (memory) and TTL (Redis, for a single request and
// through AllowAll) were set from now: reclaimed, or expired, early, the
// key was back to full, allowance the clock's step had created.
func TestBucketStepBackKeepsItsKey(t *testing.T) {
	for _, alg := range []Algorithm{TokenBucket, LeakyBucket} {
		for _, all := range []bool{false, true} {
			allow := func(lim *Limiter, n int) Decision {
				t.Helper()
				if !all {
					return mustAllow(t, lim, "victim", n)
				}
				ds, err := AllowAll(context.Background(), Check{lim, "victim", n})
				if err != nil {
					t.Fatal(err)
				}
				return ds[0]
			}
			t.Run(fmt.Sprintf("%v/AllowAll=%v/memory", alg, all), func(t *testing.T) {
				clk := newSetClock()
				s := memStore(WithStoreClock(clk))
				lim := mustNew(t, s, alg, PerSecond(10))
				t0 := clk.Now()
				allow(lim, 5)
				clk.Set(t0.Add(-100 * time.Second)) // the clock steps back
				if d := allow(lim, 5); !d.Allowed {
					t.Fatalf("after the step: %+v", d)
				}
				clk.Set(t0.Add(-98 * time.Second))
				for i := 0; i < 500 && s.Stats().Expired == 0; i++ { // inserts reclaim
					mustAllow(t, lim, fmt.Sprintf("other-%d", i), 1)
				}
				if d := allow(lim, 1); d.Allowed {
					t.Errorf("98 s before the bucket refills again: %+v (%+v)", d, s.Stats())
				}
			})
			t.Run(fmt.Sprintf("%v/AllowAll=%v/miniredis", alg, all), func(t *testing.T) {
				mr, c := miniredisFor(t)
				clk := newSetClock()
				lim := mustNew(t, &miniStore{RedisStore: redisStore(c), mr: mr, clk: clk}, alg, PerSecond(10))
				t0 := clk.Now()
				allow(lim, 5)
				clk.Set(t0.Add(-100 * time.Second))
				if d := allow(lim, 5); !d.Allowed {
					t.Fatalf("after the step: %+v", d)
				}
				clk.Set(t0.Add(-98 * time.Second))
				if d := allow(lim, 1); d.Allowed {
					t.Errorf("98 s before the bucket refills again: %+v", d)
				}
			})
		}
	}
}
