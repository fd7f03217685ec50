package distributed

import (
	"context"
	"fmt"
	"maps"
	"math"
	"math/rand/v2"
	"reflect"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/smoothrate/ratelimit/internal/redistest"
	"github.com/smoothrate/ratelimit/internal/testlong"
)

// TestHotPathMatchesLeaseScript: hot.lua answers the common lease with its
// own straight-line copy of lease.lua's arithmetic. Two names receive the
// same random sequence of operations at the same explicit times, one with
// leases in the compact form (hot.lua whenever it can) and one in the long
// form (always lease.lua): every reply, and every byte stored under both
// names (the state, the registry, the demand histogram), must be equal.
// Processes come and go, demands change bucket, time jumps across registry
// slots and steps back, rates change, refunds and departures happen, and
// some leases ask to join; bursty and warming-up alike.
func TestHotPathMatchesLeaseScript(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	c := newClient(t, srv)
	for _, tc := range []struct {
		kind         string
		rate, warmup float64
		seed         uint64
	}{
		{"b", 1000, 0, 1},
		{"b", 1e6, 0, 2},
		{"b", 37, 0, 3},
		{"w", 1000, 1e6, 4},
		{"w", 200, 3e5, 5},
	} {
		t.Run(fmt.Sprintf("%s-%v-%d", tc.kind, tc.rate, tc.seed), func(t *testing.T) {
			hotTrial(t, c, tc.kind, tc.rate, tc.warmup, tc.seed)
		})
	}
}

func hotTrial(t *testing.T, c *redis.Client, kind string, rate0, warmup float64, seed uint64) {
	ctx := context.Background()
	rng := rand.New(rand.NewPCG(seed, 77))
	hotKeys := keysOf(fmt.Sprint("hot", seed))
	refKeys := keysOf(fmt.Sprint("ref", seed))
	const (
		burst    = 1.0
		cold     = 3.0
		validity = 100_000
		regTTL   = 1_000_000
	)
	kind01 := 0.0
	if kind == "w" {
		kind01 = 1
	}
	now := int64(redisEpoch)
	rate, ver := rate0, int64(1)
	born := int64(0)
	var hot, leases int
	run := func(keys []string, args []any) (reply, any) {
		t.Helper()
		v, err := leaseScript.Run(ctx, c, keys, args...).Result()
		if err != nil {
			t.Fatalf("%v: %v", args, err)
		}
		r, err := parseReply(v)
		if err != nil {
			t.Fatal(err)
		}
		return r, v
	}
	// 1200 steps a trial in scripts/test, 3000 in test-more (testlong).
	for step := range testlong.Pick(1200, 3000) {
		switch x := rng.IntN(100); {
		case x < 3:
			now += 600_000 + rng.Int64N(2_000_000) // across registry slots
		case x < 5:
			now -= rng.Int64N(50_000) // a clock that stepped back
		default:
			now += rng.Int64N(20_000)
		}
		pid := fmt.Sprint("p", rng.IntN(12))
		var hr, rr reply
		var what string
		switch x := rng.IntN(100); {
		case x < 3:
			rate = []float64{rate0, rate0 / 2, rate0 * 3}[rng.IntN(3)]
			args := []any{"setrate", now, kind, f64(rate), f64(burst), warmup, f64(cold), ver, pid, validity, regTTL, f64(rate)}
			what = fmt.Sprint("setrate ", rate)
			hr, _ = run(hotKeys, args)
			rr, _ = run(refKeys, args)
			ver = hr.configVersion
		case x < 8:
			n := rng.Int64N(20)
			leave := []string{"0", "1"}[rng.IntN(2)]
			args := []any{"refund", now, kind, f64(rate), f64(burst), warmup, f64(cold), ver, pid, validity, regTTL,
				n, ver - rng.Int64N(2), leave, born}
			what = fmt.Sprint("refund ", n, " leave ", leave)
			hr, _ = run(hotKeys, args)
			rr, _ = run(refKeys, args)
		default:
			need := rng.Int64N(5)
			want := need + rng.Int64N(100)
			maxWait := []int64{0, rng.Int64N(200_000), 2_000_000}[rng.IntN(3)]
			demand := []float64{0, math.NaN(), rate * rng.Float64(), rate * 4 * rng.Float64(), float64(rng.IntN(50))}[rng.IntN(5)]
			tau := int64(10_000 + rng.IntN(200_000))
			join := 0.0
			if rng.IntN(20) == 0 {
				join = 1
			}
			long := []any{"lease", now, kind, f64(rate), f64(burst), warmup, f64(cold), ver, pid, validity, regTTL,
				need, want, maxWait, f64(demand), tau, "", fmt.Sprint(join)}
			compact := compactLease(packDoubles(float64(now), kind01, rate, burst, warmup, cold, float64(ver), validity, regTTL,
				float64(need), float64(want), float64(maxWait), demand, float64(tau), join), pid, "")
			what = fmt.Sprint("lease ", long)
			var raw any
			hr, raw = run(hotKeys, compact)
			rr, _ = run(refKeys, long)
			leases++
			if _, ok := raw.(string); ok {
				hot++
			}
			born = hr.incarnation
		}
		if !reflect.DeepEqual(hr, rr) {
			t.Fatalf("step %d, %s at %d: hot.lua replied %+v, lease.lua %+v", step, what, now, hr, rr)
		}
		for i := range hotKeys {
			h, err1 := c.HGetAll(ctx, hotKeys[i]).Result()
			r, err2 := c.HGetAll(ctx, refKeys[i]).Result()
			if err1 != nil || err2 != nil || !maps.Equal(h, r) {
				t.Fatalf("step %d, %s at %d: %s holds %q, %s %q (%v, %v)", step, what, now, hotKeys[i], h, refKeys[i], r, err1, err2)
			}
		}
	}
	// Not a vacuous comparison: most leases took the hot path.
	if hot < leases/2 {
		t.Fatalf("hot.lua answered %d of %d leases", hot, leases)
	}
	t.Logf("hot.lua answered %d of %d leases", hot, leases)
}

// TestParseHotReply: hot.lua's packed reply reads as lease.lua's nine
// numbers would; a negative, NaN or out-of-range count is refused, as a
// malformed array reply is.
func TestParseHotReply(t *testing.T) {
	t.Parallel()
	ok := packDoubles(5, 1000, 2000, 101000, 3, 7, 1000, 1000, 1.78e15)
	r, err := parseReply(ok)
	if err != nil {
		t.Fatal(err)
	}
	want := reply{granted: 5, wait: time.Millisecond, ahead: 2 * time.Millisecond, validity: 101 * time.Millisecond,
		processes: 3, configVersion: 7, rate: 1000, maxPermits: 1000, incarnation: 1.78e15}
	if r != want {
		t.Fatalf("parsed %+v, want %+v", r, want)
	}
	for _, bad := range []string{
		packDoubles(-1, 0, 0, 0, 1, 1, 1, 1, 1),
		packDoubles(math.NaN(), 0, 0, 0, 1, 1, 1, 1, 1),
		packDoubles(1, math.Inf(1), 0, 0, 1, 1, 1, 1, 1),
		packDoubles(1, 0, 0, 0, 1, 1, 1, 1, 1)[:71], // not 72 bytes: not the packed form
	} {
		if r, err := parseReply(bad); err == nil {
			t.Errorf("parseReply(%q) = %+v, want an error", bad, r)
		}
	}
}

// FuzzHotPathMatchesLeaseScript: one name made by a lease, then two
// leases whose every argument the fuzzer picks (the caller's demand, need,
// want, wait, τ, the time step, which may go back, and the process),
// through hot.lua and through lease.lua on two names: the replies and the
// stored bytes must be equal. Seeds in testdata/fuzz.
func FuzzHotPathMatchesLeaseScript(f *testing.F) {
	srv := redistest.Start(f)
	c := newClient(f, srv)
	f.Add(false, 1000.0, uint16(1), uint16(10), uint32(0), 50.0, uint32(100_000), int32(20_000), uint8(0))
	f.Add(true, 37.0, uint16(0), uint16(500), uint32(2_000_000), math.Inf(1), uint32(1), int32(-50_000), uint8(1))
	f.Add(false, 1e9, uint16(65535), uint16(65535), uint32(1_000_000), math.NaN(), uint32(4_000_000_000), int32(700_000), uint8(2))
	var trial atomic.Int64
	f.Fuzz(func(t *testing.T, warm bool, rate float64, need, extra uint16, maxWait uint32, demand float64, tau uint32, dt int32, pid uint8) {
		if !(rate > 0 && rate <= 1e12) || tau == 0 {
			return // the Go side never sends this rate or τ
		}
		kind, kind01, warmup := "b", 0.0, 0.0
		if warm {
			kind, kind01, warmup = "w", 1, 1e6
		}
		n := trial.Add(1)
		hotKeys, refKeys := keysOf(fmt.Sprint("fh", n)), keysOf(fmt.Sprint("fr", n))
		now := int64(redisEpoch)
		lease := func(keys []string, compact bool, pid string, need, want, maxWait int64, demand float64, tau int64) reply {
			t.Helper()
			var args []any
			if compact {
				args = compactLease(packDoubles(float64(now), kind01, rate, 1, warmup, 3, 1, 100_000, 1_000_000,
					float64(need), float64(want), float64(maxWait), demand, float64(tau), 0), pid, "")
			} else {
				args = []any{"lease", now, kind, f64(rate), "1", warmup, "3", 1, pid, 100_000, 1_000_000,
					need, want, maxWait, f64(demand), tau, "", "0"}
			}
			v, err := leaseScript.Run(context.Background(), c, keys, args...).Result()
			if err != nil {
				t.Fatalf("lease: %v", err)
			}
			r, err := parseReply(v)
			if err != nil {
				t.Fatal(err)
			}
			return r
		}
		both := func(what, pid string, need, want, maxWait int64, demand float64, tau int64) {
			t.Helper()
			h := lease(hotKeys, true, pid, need, want, maxWait, demand, tau)
			r := lease(refKeys, false, pid, need, want, maxWait, demand, tau)
			if h != r {
				t.Fatalf("%s: hot.lua replied %+v, lease.lua %+v", what, h, r)
			}
			for i := range hotKeys {
				hv, err1 := c.HGetAll(context.Background(), hotKeys[i]).Result()
				rv, err2 := c.HGetAll(context.Background(), refKeys[i]).Result()
				if err1 != nil || err2 != nil || !maps.Equal(hv, rv) {
					t.Fatalf("%s: %q and %q differ (%v, %v)", what, hv, rv, err1, err2)
				}
			}
		}
		both("first lease", "a", 1, 5, 0, 10, 100_000)
		p := fmt.Sprint("p", pid%4)
		for i := range 2 {
			now += int64(dt)
			both(fmt.Sprint("fuzzed lease ", i), p, int64(need), int64(need)+int64(extra), int64(maxWait), demand, int64(tau))
		}
	})
}
