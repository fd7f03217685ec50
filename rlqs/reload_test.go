package rlqs

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/smoothrate/ratelimit/internal/redistest"
	"github.com/smoothrate/ratelimit/internal/rlqstest"
)

// TestReloadBurstOnly: a reload that changes a bucket's burst and not its
// limit reaches the Envoys at the next allocation, though their shares do
// not move. It never did: every report renewed the old token bucket.
func TestReloadBurstOnly(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h := newHarness(t, `
domain: edge
buckets:
  - bucket_id: {route: api}
    requests_per_unit: 100
    unit: second
    burst: 10s
`, nil)
		e := h.envoy(rlqstest.Config{})
		h.load(e, api, constant(50), time.Now().Add(8*time.Second))
		time.Sleep(3 * time.Second)
		if mt := e.State(api).Strategy.GetTokenBucket().GetMaxTokens(); mt < 900 {
			t.Fatalf("before the reload: max_tokens %d, want about 990", mt)
		}
		if err := h.srv.SetConfig(mustConfig(t, `
domain: edge
buckets:
  - bucket_id: {route: api}
    requests_per_unit: 100
    unit: second
    burst: 100ms
`)); err != nil {
			t.Fatal(err)
		}
		time.Sleep(4 * time.Second)
		if mt := e.State(api).Strategy.GetTokenBucket().GetMaxTokens(); mt > 10 {
			t.Errorf("4 s after the burst went from 10s to 100ms, the Envoy runs max_tokens %d", mt)
		}
		h.wg.Wait()
	})
}

// TestLimitBlanketLimitOnRedis: a bucket whose limit became a blanket rule
// for longer than its claim lives (its key gone from Redis), then a limit
// again, claims anew: its Envoy gets its share at once. The bucket still
// counted as claimed, so Redis's missing key read as claims lost, which
// holds every share at what its clients ran: DENY_ALL for 3 s, on a
// healthy Redis.
func TestLimitBlanketLimitOnRedis(t *testing.T) {
	srv := redistest.Start(t)
	c := newRedis(t, srv.Addr())
	synctest.Test(t, func(t *testing.T) {
		h := replica(t, srv.Addr(), "one", apiConfig)
		e := h.envoy(rlqstest.Config{})
		h.load(e, api, constant(50), time.Now().Add(20*time.Second))
		time.Sleep(3 * time.Second)
		if st := e.State(api); !st.Assigned || st.Rate == 0 {
			t.Fatalf("before: %+v", st)
		}
		if err := h.srv.SetConfig(mustConfig(t, `
domain: edge
buckets:
  - bucket_id: {route: api}
    blanket_rule: allow_all
`)); err != nil {
			t.Fatal(err)
		}
		time.Sleep(8 * time.Second)
		h.srv.mu.Lock()
		b := h.srv.buckets[canonicalID(api)]
		h.srv.mu.Unlock()
		// Redis expires keys on its own clock, not the bubble's: the
		// claim's key is gone by now, as it would be.
		if err := c.Del(context.Background(), b.storeKey).Err(); err != nil {
			t.Fatal(err)
		}
		if err := h.srv.SetConfig(mustConfig(t, apiConfig)); err != nil {
			t.Fatal(err)
		}
		if got := allowedDuring([]*rlqstest.Envoy{e}, api, func() { time.Sleep(3 * time.Second) }); got[0] < 100 {
			t.Errorf("the limit of 100/s back, the Envoy that wants 50/s admitted %d in 3 s (%v)", got[0], e.State(api).Strategy)
		}
		h.wg.Wait()
	})
}

// lateStore answers a claim that Redis ran as if it had timed out, while
// late is set.
type lateStore struct {
	inner Store
	late  *atomic.Bool
}

func (l lateStore) claim(d time.Duration, c *claim) (grant, error) {
	g, err := l.inner.claim(d, c)
	if err == nil && l.late.Load() {
		return grant{}, fmt.Errorf("%w: i/o timeout", ErrUnavailable)
	}
	return g, err
}

// TestLateClaimRaisesNone: a replica whose claims Redis runs but answers
// too late keeps what its Envoys run and raises none: Redis may hold its
// claim, lower than the budget it last had, and the other replica takes
// the rest. It kept raising into its old budget: 115.5/s on 100/s.
func TestLateClaimRaisesNone(t *testing.T) {
	srv := redistest.Start(t)
	synctest.Test(t, func(t *testing.T) {
		var late atomic.Bool
		rs, err := NewRedisStore(newRedis(t, srv.Addr()))
		if err != nil {
			t.Fatal(err)
		}
		rs.scriptTime = func() int64 { return time.Now().UnixMicro() }
		hA := newHarness(t, apiConfig, lateStore{rs, &late}, WithServerID("a"))
		time.Sleep(230 * time.Millisecond) // B's claims fall between A's
		hB := replica(t, srv.Addr(), "b", apiConfig)
		a1, a2 := hA.envoy(rlqstest.Config{}), hA.envoy(rlqstest.Config{})
		b1 := hB.envoy(rlqstest.Config{})
		end := time.Now().Add(25 * time.Second)
		hA.load(a1, api, constant(200), end)
		hA.load(a2, api, constant(200), end)
		hB.load(b1, api, constant(200), end)
		time.Sleep(5 * time.Second)
		late.Store(true)
		go a2.Close()
		time.Sleep(8 * time.Second)
		got := ratesDuring([]*rlqstest.Envoy{a1, b1}, api, func() { time.Sleep(8 * time.Second) })
		if total := got[0] + got[1]; total > 101 {
			t.Errorf("the fleet ran %.1f/s on a limit of 100/s (a1 %.1f, b1 %.1f)", total, got[0], got[1])
		}
		hA.wg.Wait()
		hB.wg.Wait()
	})
}

// downStore fails every claim, as a Redis that cannot be reached, while
// down is set.
type downStore struct {
	inner Store
	down  *atomic.Bool
}

func (d downStore) claim(t time.Duration, c *claim) (grant, error) {
	if d.down.Load() {
		return grant{}, fmt.Errorf("%w: dial tcp: i/o timeout", ErrUnavailable)
	}
	return d.inner.claim(t, c)
}

// outageReplicas are two replicas, "a" and "b", on the Redis at addr,
// each with one Envoy, whose claims fail while down is set.
func outageReplicas(t *testing.T, addr, cfg string, down *atomic.Bool) (hA, hB *harness, a, b *rlqstest.Envoy) {
	mk := func(id string) *harness {
		rs, err := NewRedisStore(newRedis(t, addr))
		if err != nil {
			t.Fatal(err)
		}
		rs.scriptTime = func() int64 { return time.Now().UnixMicro() }
		return newHarness(t, cfg, downStore{rs, down}, WithServerID(id))
	}
	hA, hB = mk("a"), mk("b")
	return hA, hB, hA.envoy(rlqstest.Config{}), hB.envoy(rlqstest.Config{})
}

// loadBoth has a (of replica hA) and b (of hB) ask for rate requests a
// second of id until end.
func loadBoth(hA, hB *harness, a, b *rlqstest.Envoy, id map[string]string, rate float64, end time.Time) {
	hA.load(a, id, constant(rate), end)
	hB.load(b, id, constant(rate), end)
}

// checkBack: once Redis answers again, the Envoys a and b (of replicas hA
// and hB) never run more than the limit of api, 100/s, together.
func checkBack(t *testing.T, hA, hB *harness, a, b *rlqstest.Envoy) {
	t.Helper()
	if peak := peakRate([]*rlqstest.Envoy{a, b}, api, 2*time.Second); peak > 100 {
		t.Errorf("Redis back: the Envoys ran %.1f/s together on a limit of 100/s", peak)
	}
	hA.wg.Wait()
	hB.wg.Wait()
}

// peakRate is the most the Envoys' assigned rates for id sum to, looked
// at every 100 ms for d.
func peakRate(envs []*rlqstest.Envoy, id map[string]string, d time.Duration) float64 {
	peak := 0.0
	for end := time.Now().Add(d); time.Now().Before(end); {
		time.Sleep(100 * time.Millisecond)
		sum := 0.0
		for _, e := range envs {
			sum += e.State(id).Rate
		}
		peak = max(peak, sum)
	}
	return peak
}

// TestRedisBackAfterAnOutage: when Redis answers again after an outage of
// every replica, the first to claim is not granted the whole limit while
// the other's Envoys still run their shares: not when the outage outlasted
// the claims (their key still there), nor for a bucket whose Envoys got
// their outage shares (a part of the limit each) before any claim. Both
// ran 148.5/s on a limit of 100/s for about a second.
func TestRedisBackAfterAnOutage(t *testing.T) {
	t.Run("longer than a claim counts", func(t *testing.T) {
		srv := redistest.Start(t)
		synctest.Test(t, func(t *testing.T) {
			var down atomic.Bool
			hA, hB, a, b := outageReplicas(t, srv.Addr(), apiConfig, &down)
			end := time.Now().Add(12 * time.Second)
			loadBoth(hA, hB, a, b, api, 200, end)
			time.Sleep(4 * time.Second)
			down.Store(true)
			time.Sleep(4600 * time.Millisecond) // past a claim's hold (4.2 s), within its key's life (+1 s)
			down.Store(false)
			checkBack(t, hA, hB, a, b)
		})
	})
	t.Run("a bucket new during it", func(t *testing.T) {
		const cfg = `
domain: edge
buckets:
  - bucket_id: {route: api}
    requests_per_unit: 100
    unit: second
  - bucket_id: {route: warm}
    requests_per_unit: 100
    unit: second
`
		warm := map[string]string{"route": "warm"}
		srv := redistest.Start(t)
		synctest.Test(t, func(t *testing.T) {
			var down atomic.Bool
			hA, hB, a, b := outageReplicas(t, srv.Addr(), cfg, &down)
			end := time.Now().Add(10 * time.Second)
			loadBoth(hA, hB, a, b, warm, 20, end)
			time.Sleep(3 * time.Second) // both claimed warm: two replicas seen
			down.Store(true)
			time.Sleep(200 * time.Millisecond)
			loadBoth(hA, hB, a, b, api, 200, end)
			time.Sleep(1500 * time.Millisecond) // each runs R/2, as documented
			down.Store(false)
			checkBack(t, hA, hB, a, b)
		})
	})
}

// perUserConfig gives each user a bucket of its own, 100 requests a
// second.
const perUserConfig = `
domain: edge
buckets:
  - bucket_id: {user: "*"}
    requests_per_unit: 100
    unit: second
`

// blackholeStore waits out every claim's timeout, then fails, while down
// is set (a Redis whose packets are dropped); else it grants the limit.
type blackholeStore struct{ down *atomic.Bool }

func (s blackholeStore) claim(timeout time.Duration, c *claim) (grant, error) {
	if s.down.Load() {
		time.Sleep(timeout)
		return grant{}, fmt.Errorf("%w: i/o timeout", ErrUnavailable)
	}
	if c.release {
		return grant{budget: c.floor, servers: 1}, nil
	}
	return grant{budget: c.rate, target: c.rate, servers: 1, clients: len(c.demands)}, nil
}

// TestStoreAwayDelaysNoNewcomer: with the store away and 800 buckets, an
// Envoy that joins a bucket whose clients run a share gets its part of it
// within δ and a few allocation intervals, as the bounds say. Every bucket's claim waited the store
// timeout, 16 at a time, in sweeps back to back, and the newcomers waited
// seconds under their no-assignment behaviour. (A bucket whose clients run
// nothing has no share to give while the store is away: see
// TestLateClaimRaisesNone.)
func TestStoreAwayDelaysNoNewcomer(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var down atomic.Bool
		h := newHarness(t, perUserConfig, blackholeStore{&down})
		user := func(i int) map[string]string { return map[string]string{"user": fmt.Sprint(i)} }
		e := h.envoy(rlqstest.Config{})
		for i := range 800 {
			e.Request(user(i))
		}
		for i := range 5 {
			h.load(e, user(i), constant(50), time.Now().Add(10*time.Second))
		}
		time.Sleep(3 * time.Second)
		for i := range 5 {
			if !e.State(user(i)).Assigned {
				t.Fatalf("user %d not assigned before the outage", i)
			}
		}
		down.Store(true)
		time.Sleep(2 * time.Second)
		var late []*rlqstest.Envoy
		for i := range 5 {
			n := h.envoy(rlqstest.Config{})
			n.Request(user(i))
			late = append(late, n)
		}
		// δ (the others' shares lowered first) and a few intervals.
		wait := DefaultSettleTime + 300*time.Millisecond
		time.Sleep(wait)
		for i, n := range late {
			if !n.State(user(i)).Assigned {
				t.Errorf("%v after joining bucket %d during the outage, the Envoy has no assignment", wait, i)
			}
		}
	})
}

// slowReleaseStore grants every claim at once but waits out the timeout
// on each release (a slow Redis), counting how many run at once.
type slowReleaseStore struct {
	mu                      sync.Mutex
	running, most, released int
}

func (s *slowReleaseStore) claim(timeout time.Duration, c *claim) (grant, error) {
	if !c.release {
		return grant{budget: c.rate, target: c.rate, servers: 1, clients: len(c.demands)}, nil
	}
	s.mu.Lock()
	s.running++
	s.most = max(s.most, s.running)
	s.mu.Unlock()
	time.Sleep(timeout)
	s.mu.Lock()
	s.running--
	s.released++
	s.mu.Unlock()
	return grant{budget: c.floor, servers: 1}, nil
}

// TestShutdownReleasesConcurrently: Shutdown gives 100 buckets back to a
// store that takes its whole timeout over each, releaseWorkers at a time:
// in 7 timeouts, not 100. A ctx that ends first ends the wait, with its
// error; the releases still finish.
func TestShutdownReleasesConcurrently(t *testing.T) {
	for _, bounded := range []bool{false, true} {
		synctest.Test(t, func(t *testing.T) {
			st := &slowReleaseStore{}
			h := newHarness(t, perUserConfig, st)
			e := h.envoy(rlqstest.Config{})
			for i := range 100 {
				e.Request(map[string]string{"user": fmt.Sprint(i)})
			}
			time.Sleep(3 * time.Second)
			ctx := context.Background()
			if bounded {
				var cancel context.CancelFunc
				ctx, cancel = context.WithTimeout(ctx, 2*DefaultStoreTimeout)
				defer cancel()
			}
			start := time.Now()
			err := h.srv.Shutdown(ctx)
			took := time.Since(start)
			if bounded {
				if !errors.Is(err, context.DeadlineExceeded) || took != 2*DefaultStoreTimeout {
					t.Fatalf("bounded by 2 store timeouts: %v after %v", err, took)
				}
				time.Sleep(10 * DefaultStoreTimeout)
			} else if err != nil || took != 7*DefaultStoreTimeout {
				t.Fatalf("Shutdown: %v after %v, want 7 store timeouts (%v)", err, took, 7*DefaultStoreTimeout)
			}
			st.mu.Lock()
			defer st.mu.Unlock()
			if st.released != 100 || st.most != releaseWorkers {
				t.Errorf("%d buckets given back, at most %d at once; want 100, %d", st.released, st.most, releaseWorkers)
			}
		})
	}
}
