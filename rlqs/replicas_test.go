package rlqs

import (
	"errors"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/smoothrate/ratelimit/internal/redistest"
	"github.com/smoothrate/ratelimit/internal/rlqstest"
)

// replica starts a Server with a RedisStore on addr in a harness of its
// own (its own network: its Envoys reach it only), the script running at
// the bubble's time.
func replica(t *testing.T, addr, id string, config string, opts ...Option) *harness {
	t.Helper()
	s, err := NewRedisStore(newRedis(t, addr))
	if err != nil {
		t.Fatal(err)
	}
	s.scriptTime = func() int64 { return time.Now().UnixMicro() }
	return newHarness(t, config, s, append([]Option{WithServerID(id)}, opts...)...)
}

// TestTwoReplicas: two servers on one redis-server share one bucket's
// 100/s among all their Envoys: one Envoy on the first, three on the
// second, all wanting more than the limit, get a quarter each (not the
// first's one Envoy half of it).
func TestTwoReplicas(t *testing.T) {
	srv := redistest.Start(t)
	synctest.Test(t, func(t *testing.T) {
		h1 := replica(t, srv.Addr(), "one", apiConfig)
		h2 := replica(t, srv.Addr(), "two", apiConfig)
		envs := []*rlqstest.Envoy{h1.envoy(rlqstest.Config{}), h2.envoy(rlqstest.Config{}), h2.envoy(rlqstest.Config{}), h2.envoy(rlqstest.Config{})}
		end := time.Now().Add(20 * time.Second)
		h1.load(envs[0], api, constant(100), end)
		for _, e := range envs[1:] {
			h2.load(e, api, constant(100), end)
		}
		time.Sleep(3 * time.Second)
		got := ratesDuring(envs, api, func() { time.Sleep(15 * time.Second) })
		within(t, "one and three Envoys", got, []float64{24.75, 24.75, 24.75, 24.75}, 0.1)
		if total := got[0] + got[1] + got[2] + got[3]; total < 95 || total > 105 {
			t.Errorf("the fleet admitted %.2f/s of 100/s", total)
		}
		if s := h1.srv.Stats(); s.StoreErrors != 0 || s.StoreCalls == 0 {
			t.Errorf("stats %+v", s)
		}
	})
}

// TestRedisRestart: while Redis is away each replica keeps the shares it
// last had and says so through its store hook; Redis restarted empty,
// the replicas claim again (raising nobody until each has), and the
// shares are the fair ones again.
func TestRedisRestart(t *testing.T) {
	srv := redistest.Start(t)
	// The server is killed and restarted from outside the bubble: the
	// goroutine that waits for its process must not belong to it (the
	// bubble would wait for it to end).
	do := outside(t)
	synctest.Test(t, func(t *testing.T) {
		var mu sync.Mutex
		var errs, oks int
		var last error
		hook := WithStoreHook(func(err error) {
			mu.Lock()
			defer mu.Unlock()
			if err != nil {
				errs++
				last = err
			} else {
				oks++
			}
		})
		h1 := replica(t, srv.Addr(), "one", apiConfig, hook)
		h2 := replica(t, srv.Addr(), "two", apiConfig)
		envs := []*rlqstest.Envoy{h1.envoy(rlqstest.Config{}), h2.envoy(rlqstest.Config{})}
		end := time.Now().Add(20 * time.Second)
		h1.load(envs[0], api, constant(100), end)
		h2.load(envs[1], api, constant(100), end)
		time.Sleep(3 * time.Second)
		within(t, "before", ratesDuring(envs, api, func() { time.Sleep(2 * time.Second) }), []float64{49.5, 49.5}, 0.05)

		do(srv.Kill)
		within(t, "while Redis is away", ratesDuring(envs, api, func() { time.Sleep(5 * time.Second) }), []float64{49.5, 49.5}, 0.05)
		mu.Lock()
		if errs == 0 || !errors.Is(last, ErrUnavailable) {
			t.Errorf("the hook saw %d errors, the last %v", errs, last)
		}
		oksBefore := oks
		mu.Unlock()

		do(srv.Restart)
		time.Sleep(5 * time.Second)
		mu.Lock()
		if oks == oksBefore {
			t.Error("no claim succeeded after the restart")
		}
		mu.Unlock()
		within(t, "after the restart", ratesDuring(envs, api, func() { time.Sleep(4 * time.Second) }), []float64{49.5, 49.5}, 0.05)
	})
}

// outside returns a function that runs f in a goroutine outside any
// synctest bubble and waits for it; the bubble's clock stands still
// meanwhile.
func outside(t *testing.T) func(f func()) {
	calls := make(chan func())
	done := make(chan struct{})
	go func() {
		for f := range calls {
			f()
			done <- struct{}{}
		}
	}()
	t.Cleanup(func() { close(calls) })
	return func(f func()) {
		calls <- f
		<-done
	}
}

// TestRedisAwayFromTheStart: a replica that has never reached Redis knows
// no share of a new bucket: its Envoys stay under their no-assignment
// behaviour (not the whole limit on every replica), and the hook says why.
func TestRedisAwayFromTheStart(t *testing.T) {
	addr := redistest.ClosedAddr(t)
	synctest.Test(t, func(t *testing.T) {
		var mu sync.Mutex
		var last error
		h := replica(t, addr, "one", apiConfig, WithStoreHook(func(err error) {
			mu.Lock()
			last = err
			mu.Unlock()
		}))
		e := h.envoy(rlqstest.Config{})
		h.load(e, api, constant(10), time.Now().Add(2*time.Second))
		h.wg.Wait()
		if st := e.State(api); st.Assigned {
			t.Errorf("assigned without Redis: %+v", st)
		}
		mu.Lock()
		defer mu.Unlock()
		if !errors.Is(last, ErrUnavailable) {
			t.Errorf("hook: %v", last)
		}
		if s := h.srv.Stats(); s.StoreErrors == 0 || s.StoreMisconfigured != 0 {
			t.Errorf("stats %+v", s)
		}
	})
}
