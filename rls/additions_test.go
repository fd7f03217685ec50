package rls

import (
	"context"
	"fmt"
	"math/rand"
	"testing"
	"time"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"github.com/redis/go-redis/v9"

	"github.com/smoothrate/ratelimit/internal/redistest"
	"github.com/smoothrate/ratelimit/throttle"
)

// ceilSec is a Duration rounded up to whole seconds.
func ceilSec(d time.Duration) int64 { return ceilSeconds(int64(d)) }

// Every algorithm: each answer is the Decision of a throttle.Limiter with
// the same algorithm and limit on the same calls at the same instants.
func TestAlgorithmsFollowThrottle(t *testing.T) {
	storeKinds(t, func(t *testing.T, newStore func(*testClock, ...StoreOption) Store) {
		for _, alg := range []throttle.Algorithm{throttle.GCRA, throttle.TokenBucket, throttle.LeakyBucket, throttle.SlidingWindow, throttle.SlidingLog} {
			t.Run(alg.String(), func(t *testing.T) {
				clock := newTestClock(T0)
				cfg := parseYAML(t, fmt.Sprintf(`
domain: d
descriptors:
  - key: k
    rate_limit: {unit: second, unit_multiplier: 2, requests_per_unit: 5, algorithm: %s}
`, alg))
				svc, err := New(cfg, newStore(clock))
				if err != nil {
					t.Fatal(err)
				}
				ref, err := throttle.New(mustThrottleMemory(t, clock), alg, throttle.Limit{Count: 5, Period: 2 * time.Second})
				if err != nil {
					t.Fatal(err)
				}
				r := rand.New(rand.NewSource(int64(alg)))
				now := time.Unix(T0, 0)
				refused := 0
				for i := 0; i < 300; i++ {
					now = now.Add(time.Duration(r.Intn(400)) * time.Millisecond)
					clock.set(now)
					hits := []uint64{0, 1, 1, 1, 2, 3, 6}[r.Intn(7)]
					got, err := svc.ShouldRateLimit(context.Background(), request("d", 0, withHits(desc("k", "v"), hits)))
					if err != nil {
						t.Fatal(err)
					}
					d, err := ref.AllowN(context.Background(), "k", int(hits))
					if err != nil {
						t.Fatal(err)
					}
					var want *rlsv3.RateLimitResponse
					if d.Allowed {
						want = response(ok, status(ok, "", 5, sec, uint32(d.Remaining), ceilSec(d.ResetAfter)))
					} else {
						refused++
						wait := d.RetryAfter
						if wait == throttle.Never {
							wait = 2 * time.Second
						}
						want = response(over, status(over, "", 5, sec, 0, max(1, ceilSec(wait))))
					}
					checkResponse(t, fmt.Sprintf("call %d (hits %d at +%v)", i, hits, now.Sub(time.Unix(T0, 0))), got, want)
				}
				if refused == 0 {
					t.Error("no call was refused: the sequence tests nothing")
				}
			})
		}
	})
}

// unit_multiplier on the reference's window: windows of 30 s aligned on
// the epoch (T0 is 20 s into one).
func TestUnitMultiplierWindow(t *testing.T) {
	storeKinds(t, func(t *testing.T, newStore func(*testClock, ...StoreOption) Store) {
		clock := newTestClock(T0)
		svc, err := New(parseYAML(t, `
domain: d
descriptors:
  - key: k
    rate_limit: {unit: second, unit_multiplier: 30, requests_per_unit: 2}
`), newStore(clock))
		if err != nil {
			t.Fatal(err)
		}
		req := request("d", 0, desc("k", "v"))
		for i, s := range []struct {
			at   int64
			want *rlsv3.RateLimitResponse
		}{
			{0, response(ok, status(ok, "", 2, sec, 1, 10))},
			{9, response(ok, status(ok, "", 2, sec, 0, 1))},
			{9, response(over, status(over, "", 2, sec, 0, 1))},
			{10, response(ok, status(ok, "", 2, sec, 1, 30))},
		} {
			clock.set(time.Unix(T0+s.at, 0))
			got, err := svc.ShouldRateLimit(context.Background(), req)
			if err != nil {
				t.Fatal(err)
			}
			checkResponse(t, fmt.Sprintf("call %d", i), got, s.want)
		}
	})
}

// rate_limits: 2 per second and 3 per minute on one descriptor, both the
// reference's counting windows: over when either is, reporting it.
func TestRateLimitsListWindows(t *testing.T) {
	storeKinds(t, func(t *testing.T, newStore func(*testClock, ...StoreOption) Store) {
		clock := newTestClock(T0)
		svc, err := New(parseYAML(t, `
domain: d
descriptors:
  - key: k
    rate_limits:
      - {unit: second, requests_per_unit: 2, name: burst}
      - {unit: minute, requests_per_unit: 3, name: sustained}
`), newStore(clock))
		if err != nil {
			t.Fatal(err)
		}
		req := request("d", 0, desc("k", "v"))
		for i, s := range []struct {
			at   int64
			want *rlsv3.RateLimitResponse
		}{
			{0, response(ok, status(ok, "burst", 2, sec, 1, 1))},
			{0, response(ok, status(ok, "burst", 2, sec, 0, 1))},
			{0, response(over, status(over, "burst", 2, sec, 0, 1))}, // sustained: 3 of 3
			{1, response(over, status(over, "sustained", 3, mnt, 0, 39))},
			{40, response(ok, status(ok, "burst", 2, sec, 1, 1))},
		} {
			clock.set(time.Unix(T0+s.at, 0))
			got, err := svc.ShouldRateLimit(context.Background(), req)
			if err != nil {
				t.Fatal(err)
			}
			checkResponse(t, fmt.Sprintf("call %d", i), got, s.want)
		}
	})
}

// rate_limits of throttle's algorithms are decided as throttle.AllowAll
// decides them: all counted or none.
func TestRateLimitsListAllOrNothing(t *testing.T) {
	storeKinds(t, func(t *testing.T, newStore func(*testClock, ...StoreOption) Store) {
		clock := newTestClock(T0)
		svc, err := New(parseYAML(t, `
domain: d
descriptors:
  - key: k
    rate_limits:
      - {unit: second, requests_per_unit: 2, algorithm: gcra}
      - {unit: minute, requests_per_unit: 5, algorithm: sliding-window}
`), newStore(clock))
		if err != nil {
			t.Fatal(err)
		}
		ts := mustThrottleMemory(t, clock)
		a, _ := throttle.New(ts, throttle.GCRA, throttle.Limit{Count: 2, Period: time.Second})
		b, _ := throttle.New(ts, throttle.SlidingWindow, throttle.Limit{Count: 5, Period: time.Minute})
		r := rand.New(rand.NewSource(7))
		now := time.Unix(T0, 0)
		var refusedBy [2]int
		for i := 0; i < 200; i++ {
			now = now.Add(time.Duration([]int{0, 0, 50, 400, 2000, 20000}[r.Intn(6)]) * time.Millisecond)
			clock.set(now)
			got, err := svc.ShouldRateLimit(context.Background(), request("d", 0, desc("k", "v")))
			if err != nil {
				t.Fatal(err)
			}
			ds, err := throttle.AllowAll(context.Background(), throttle.Check{Limiter: a, Key: "k", N: 1}, throttle.Check{Limiter: b, Key: "k", N: 1})
			if err != nil {
				t.Fatal(err)
			}
			if want := ds.Allowed(); (got.OverallCode == ok) != want {
				t.Fatalf("call %d at +%v: %v, throttle.AllowAll allowed=%v", i, now.Sub(time.Unix(T0, 0)), got.OverallCode, want)
			}
			for j, d := range ds {
				if !d.Allowed {
					refusedBy[j]++
				}
			}
			if ds.Allowed() {
				s := ds.Strictest()
				if got.Statuses[0].LimitRemaining != uint32(s.Remaining) {
					t.Fatalf("call %d: remaining %d, want %d", i, got.Statuses[0].LimitRemaining, s.Remaining)
				}
			}
		}
		if refusedBy[0] == 0 || refusedBy[1] == 0 {
			t.Errorf("refusals per limit %v: the sequence does not test both", refusedBy)
		}
	})
}

// WithCountOnlyAdmitted: the reference's window counts only what it
// admits, as throttle's FixedWindow does.
func TestCountOnlyAdmitted(t *testing.T) {
	storeKinds(t, func(t *testing.T, newStore func(*testClock, ...StoreOption) Store) {
		cfg := parseYAML(t, `
domain: d
descriptors:
  - key: k
    rate_limit: {unit: minute, requests_per_unit: 3}
`)
		clock := newTestClock(T0)
		store := newStore(clock)
		ref, err := New(cfg, store)
		if err != nil {
			t.Fatal(err)
		}
		only, err := New(cfg, store, WithCountOnlyAdmitted())
		if err != nil {
			t.Fatal(err)
		}
		// The same hits on two keys: the reference counts the refused 2.
		for i, s := range []struct {
			hits     uint64
			ref, oua *rlsv3.RateLimitResponse
		}{
			{2, response(ok, status(ok, "", 3, mnt, 1, 40)), response(ok, status(ok, "", 3, mnt, 1, 40))},
			{2, response(over, status(over, "", 3, mnt, 0, 40)), response(over, status(over, "", 3, mnt, 0, 40))},
			{1, response(over, status(over, "", 3, mnt, 0, 40)), response(ok, status(ok, "", 3, mnt, 0, 40))},
			{0, response(over, status(over, "", 3, mnt, 0, 40)), response(ok, status(ok, "", 3, mnt, 0, 40))},
		} {
			got, err := ref.ShouldRateLimit(context.Background(), request("d", 0, withHits(desc("k", "ref"), s.hits)))
			if err != nil {
				t.Fatal(err)
			}
			checkResponse(t, fmt.Sprintf("reference call %d", i), got, s.ref)
			got, err = only.ShouldRateLimit(context.Background(), request("d", 0, withHits(desc("k", "oua"), s.hits)))
			if err != nil {
				t.Fatal(err)
			}
			checkResponse(t, fmt.Sprintf("count-only-admitted call %d", i), got, s.oua)
		}
		// Against throttle's FixedWindow on random calls.
		tl, _ := throttle.New(mustThrottleMemory(t, clock), throttle.FixedWindow, throttle.Limit{Count: 3, Period: time.Minute})
		r := rand.New(rand.NewSource(3))
		now := time.Unix(T0, 0)
		for i := 0; i < 300; i++ {
			now = now.Add(time.Duration(r.Intn(5000)) * time.Millisecond)
			clock.set(now)
			hits := uint64(r.Intn(3))
			got, err := only.ShouldRateLimit(context.Background(), request("d", 0, withHits(desc("k", "random"), hits)))
			if err != nil {
				t.Fatal(err)
			}
			d, _ := tl.AllowN(context.Background(), "k", int(hits))
			if (got.OverallCode == ok) != d.Allowed || (d.Allowed && got.Statuses[0].LimitRemaining != uint32(d.Remaining)) {
				t.Fatalf("call %d (hits %d at +%v): %v remaining %d; throttle allowed=%v remaining %d", i, hits, now.Sub(time.Unix(T0, 0)), got.OverallCode, got.Statuses[0].LimitRemaining, d.Allowed, d.Remaining)
			}
		}
	})
}

// Descriptors using additions are decided each on its own, as the
// reference decides descriptors: one refused does not stop another from
// being counted. On Redis, a call whose descriptors all fit is one round
// trip, whatever their number.
func TestAdditionsDescriptorsIndependent(t *testing.T) {
	t.Run("memory", func(t *testing.T) {
		clock := newTestClock(T0)
		store, _ := NewMemoryStore(WithStoreClock(clock))
		svc, err := New(parseYAML(t, independentConfig), store)
		if err != nil {
			t.Fatal(err)
		}
		checkIndependent(t, svc, func() int64 { return 0 })
	})
	t.Run("redis", func(t *testing.T) {
		srv := redistest.Start(t)
		client := redis.NewClient(&redis.Options{Addr: srv.Addr()})
		defer client.Close()
		var rt roundTrips
		clock := newTestClock(T0)
		store, err := NewRedisStore(client, WithStoreClock(clock))
		if err != nil {
			t.Fatal(err)
		}
		svc, err := New(parseYAML(t, independentConfig), store)
		if err != nil {
			t.Fatal(err)
		}
		// Load the scripts first: a first EVALSHA may need an EVAL.
		if _, err := svc.ShouldRateLimit(context.Background(), request("d", 0, withHits(desc("a", "0"), 0), withHits(desc("b", "0"), 0), withHits(desc("c", "0"), 0))); err != nil {
			t.Fatal(err)
		}
		client.AddHook(&rt)
		checkIndependent(t, svc, rt.n.Load)
	})
}

const independentConfig = `
domain: d
descriptors:
  - key: a
    rate_limit: {unit: minute, requests_per_unit: 1, algorithm: gcra}
  - key: b
    rate_limits:
      - {unit: minute, requests_per_unit: 5, algorithm: sliding-window}
      - {unit: hour, requests_per_unit: 50, algorithm: token-bucket}
  - key: c
    rate_limit: {unit: minute, requests_per_unit: 5, algorithm: sliding-log}
`

// checkIndependent runs the calls of TestAdditionsDescriptorsIndependent;
// when trips counts round trips, it checks them too.
func checkIndependent(t *testing.T, svc *Service, trips func() int64) {
	req := request("d", 0, desc("a", "1"), desc("b", "1"), desc("c", "1"))
	var n []int64
	// b reports its sliding window (the fewer remaining), back to
	// full once both its windows have passed: 40 s + 60 s.
	for i, want := range []*rlsv3.RateLimitResponse{
		response(ok, status(ok, "", 1, mnt, 0, 60), status(ok, "", 5, mnt, 4, 100), status(ok, "", 5, mnt, 4, 60)),
		response(over, status(over, "", 1, mnt, 0, 60), status(ok, "", 5, mnt, 3, 100), status(ok, "", 5, mnt, 3, 60)),
		response(over, status(over, "", 1, mnt, 0, 60), status(ok, "", 5, mnt, 2, 100), status(ok, "", 5, mnt, 2, 60)),
	} {
		before := trips()
		got, err := svc.ShouldRateLimit(context.Background(), req)
		if err != nil {
			t.Fatal(err)
		}
		n = append(n, trips()-before)
		checkResponse(t, fmt.Sprintf("call %d", i), got, want)
	}
	if trips() > 0 && (n[0] != 1 || n[1] != 2 || n[2] != 2) {
		t.Errorf("round trips per call %v, want [1 2 2] (all fit: one; a refusal: one more)", n)
	}
}
