package rlqs

import (
	"context"
	"fmt"
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
