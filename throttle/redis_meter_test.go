package throttle

import (
	"context"
	"testing"
	"time"
)

// sameDecisions runs steps (a time from t0, a limiter index, a key's n)
// through the memory store's limiters mem and the Redis store's red under
// clk, and requires equal Decisions.
func sameDecisions(t *testing.T, clk *setClock, mem, red []*Limiter, steps []meterStep) {
	t.Helper()
	ctx := context.Background()
	t0 := clk.Now()
	for i, step := range steps {
		clk.Set(t0.Add(step.at))
		dm, err := mem[step.lim].AllowN(ctx, "k", step.n)
		if err != nil {
			t.Fatal(err)
		}
		dr, err := red[step.lim].AllowN(ctx, "k", step.n)
		if err != nil {
			t.Fatalf("step %d: %v", i, err)
		}
		if dm != dr {
			t.Fatalf("step %d (at %v, limiter %d, n %d): memory %+v, redis %+v", i, step.at, step.lim, step.n, dm, dr)
		}
	}
}

type meterStep struct {
	at  time.Duration
	lim int
	n   int
}

// TestRedisMeterEdges drives the meter scripts (meter_head.lua, a
// *_debt.lua, meter_tail.lua) through the branches the random differential
// tests do not reach (their limits have small den and short periods): the
// debt caps, a bucket's last microsecond before it is full or empty, and
// the exact TTL.
func TestRedisMeterEdges(t *testing.T) {
	f := redisFor(t)

	t.Run("GCRA/debt cap", func(t *testing.T) {
		// den = 10^6 units per µs, so quo(maxDebt, den) is 2 251 799 813
		// µs (37.5 min, not a whole quotient): a clock an hour behind the
		// TAT hits the cap, one a second behind does not. A full burst
		// (1 µs of debt, a whole one) leaves a state without a fraction,
		// whose capped debt shows in ResetAfter; the last steps fill the
		// bucket exactly and then overflow it by one unit.
		clk := newSetClock()
		const burst = 1_000_000
		l := Limit{Count: bigInt(t, 1e12), Period: time.Second, Burst: burst}
		mem := mustNew(t, memStore(WithStoreClock(clk)), GCRA, l)
		red := mustNew(t, fakeTimeStore(f.client, WithStoreClock(clk), WithKeyPrefix("cap:")), GCRA, l)
		var steps []meterStep
		for _, s := range []struct {
			at time.Duration
			n  int
		}{
			{0, burst}, {-time.Second, 1}, {-time.Second, 0}, {-time.Second, burst + 1},
			{-time.Hour, 0}, {-time.Hour, 1}, {-time.Hour, burst + 1},
			{time.Second, burst}, {time.Second, 1}, {time.Second, 0},
		} {
			steps = append(steps, meterStep{at: s.at, n: s.n})
		}
		sameDecisions(t, clk, []*Limiter{mem}, []*Limiter{red}, steps)
	})

	for _, alg := range []Algorithm{TokenBucket, LeakyBucket} {
		t.Run(alg.String()+"/full and empty", func(t *testing.T) {
			// 3 per second with a burst of 2: den 3 units per µs, a
			// request 10^6 units, the bucket 2·10^6, which takes
			// 666 666⅔ µs to refill (drain): peeks around that moment see
			// the last partial µs and then the full (empty) bucket.
			clk := newSetClock()
			l := Limit{Count: 3, Period: time.Second, Burst: 2}
			mem := mustNew(t, memStore(WithStoreClock(clk)), alg, l)
			red := mustNew(t, fakeTimeStore(f.client, WithStoreClock(clk), WithKeyPrefix("edge:"+alg.String()+":")), alg, l)
			steps := []meterStep{{at: 0, n: 2}}
			for us := 666_664; us <= 666_668; us++ {
				steps = append(steps, meterStep{at: time.Duration(us) * time.Microsecond})
			}
			steps = append(steps, meterStep{at: 666_666 * time.Microsecond, n: 2}, meterStep{at: 666_667 * time.Microsecond, n: 1})
			sameDecisions(t, clk, []*Limiter{mem}, []*Limiter{red}, steps)
		})
		t.Run(alg.String()+"/another limit's long debt", func(t *testing.T) {
			// One request of 1 per hour leaves an hour to refill (drain);
			// read by a limit of den 10^6 units per µs, whose most counted
			// debt is quo(maxDebt, den) = 2 251 799 813 µs (37.5 min), the
			// hour is converted, capped (the leaky bucket), and then
			// refills (drains) under the new limit.
			clk := newSetClock()
			hourly := Limit{Count: 1, Period: time.Hour, Burst: 1}
			fast := Limit{Count: bigInt(t, 1e12), Period: time.Second, Burst: 1_000_000}
			ms, rs := memStore(WithStoreClock(clk)), fakeTimeStore(f.client, WithStoreClock(clk), WithKeyPrefix("long:"+alg.String()+":"))
			mem := []*Limiter{mustNew(t, ms, alg, hourly), mustNew(t, ms, alg, fast)}
			red := []*Limiter{mustNew(t, rs, alg, hourly), mustNew(t, rs, alg, fast)}
			sameDecisions(t, clk, mem, red, []meterStep{
				{0, 0, 1}, {0, 1, 0}, {time.Second, 1, 0}, {time.Second, 1, 1},
				{40 * time.Minute, 1, 0}, {40 * time.Minute, 0, 0}, {2 * time.Hour, 1, 1_000_000}, {2 * time.Hour, 0, 0},
			})
		})
	}

	t.Run("ttl", func(t *testing.T) {
		// The TTL is ResetAfter in whole ms rounded up, never below the
		// floor: 3 per 6 000 001 µs leaves one request's ResetAfter at
		// 2 000 001 µs (2 000 000 whole µs and 1/3), so 2 001 ms; one of 3
		// per second leaves 333 334 µs, so the floor, 1 000 ms (sent as a
		// string) or a test's hour. The same for the three meters: each
		// request's ResetAfter is its own emission interval.
		clk := newSetClock()
		for _, alg := range []Algorithm{GCRA, TokenBucket, LeakyBucket} {
			for _, c := range []struct {
				name string
				s    *RedisStore
				l    Limit
				want int64 // ms
			}{
				{"exact", redisStore(f.client, WithStoreClock(clk), WithKeyPrefix("ttl1:")), Limit{Count: 3, Period: 6_000_001 * time.Microsecond}, 2001},
				{"floor", redisStore(f.client, WithStoreClock(clk), WithKeyPrefix("ttl2:")), PerSecond(3), 1000},
				{"test floor", fakeTimeStore(f.client, WithStoreClock(clk), WithKeyPrefix("ttl3:")), PerSecond(3), 3_600_000},
			} {
				checkTTL(t, f, alg, c.name, c.s, c.l, c.want)
			}
		}
	})
}

// checkTTL makes one request under alg and l on s and requires its key to
// expire want ms after the write.
func checkTTL(t *testing.T, f *redisFixture, alg Algorithm, name string, s *RedisStore, l Limit, want int64) {
	t.Helper()
	ctx := context.Background()
	lim := mustNew(t, s, alg, l)
	before, err := f.client.Time(ctx).Result()
	if err != nil {
		t.Fatal(err)
	}
	if d := mustAllow(t, lim, "k", 1); !d.Allowed {
		t.Fatalf("%v %s: %+v", alg, name, d)
	}
	after := f.client.Time(ctx).Val()
	// The key expires at the server's ms when it was written plus the TTL;
	// the write was between before and after.
	exp, err := f.client.PExpireTime(ctx, s.redisKey(alg, "k")).Result()
	if err != nil {
		t.Fatal(err)
	}
	at := exp.Milliseconds()
	if at < before.UnixMilli()+want || at > after.UnixMilli()+want {
		t.Errorf("%v %s: expires at %d ms, want %d ms after a write in [%d, %d]", alg, name, at, want, before.UnixMilli(), after.UnixMilli())
	}
}
