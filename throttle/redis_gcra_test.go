package throttle

import (
	"context"
	"testing"
	"time"
)

// TestRedisGCRAEdges drives gcra_one.lua through the branches the random
// differential tests do not reach (their limits have small den): the debt
// cap after the clock stepped far back, and the exact TTL.
func TestRedisGCRAEdges(t *testing.T) {
	f := redisFor(t)
	ctx := context.Background()

	t.Run("debt cap", func(t *testing.T) {
		// den = 10^6 units per µs, so quo(maxDebt, den) is 2 251 799 813
		// µs (37.5 min, not a whole quotient): a clock an hour behind the
		// TAT hits the cap, one a second behind does not. A full burst
		// (1 µs of debt, a whole one) leaves a state without a fraction,
		// whose capped debt shows in ResetAfter; the last steps fill the
		// bucket exactly and then overflow it by one unit.
		clk := newSetClock()
		const burst = 1_000_000
		l := Limit{Count: 1e12, Period: time.Second, Burst: burst}
		mem := mustNew(t, NewMemoryStore(WithClock(clk)), GCRA, l)
		red := mustNew(t, fakeTimeStore(f.client, WithClock(clk), WithKeyPrefix("cap:")), GCRA, l)
		t0 := clk.Now()
		for i, step := range []struct {
			at time.Duration
			n  int
		}{
			{0, burst}, {-time.Second, 1}, {-time.Second, 0}, {-time.Second, burst + 1},
			{-time.Hour, 0}, {-time.Hour, 1}, {-time.Hour, burst + 1},
			{time.Second, burst}, {time.Second, 1}, {time.Second, 0},
		} {
			clk.Set(t0.Add(step.at))
			dm, err := mem.AllowN(ctx, "k", step.n)
			if err != nil {
				t.Fatal(err)
			}
			dr, err := red.AllowN(ctx, "k", step.n)
			if err != nil {
				t.Fatalf("step %d: %v", i, err)
			}
			if dm != dr {
				t.Fatalf("step %d (at %v, n %d): memory %+v, redis %+v", i, step.at, step.n, dm, dr)
			}
		}
	})

	t.Run("ttl", func(t *testing.T) {
		// The TTL is ResetAfter in whole ms rounded up, never below the
		// floor: 3 per 6 000 001 µs leaves one request's ResetAfter at
		// 2 000 001 µs (2 000 000 whole µs and 1/3), so 2 001 ms; one of 3
		// per second leaves 333 334 µs, so the floor, 1 000 ms (sent as a
		// string) or a test's hour.
		clk := newSetClock()
		for _, c := range []struct {
			name string
			s    *RedisStore
			l    Limit
			want int64 // ms
		}{
			{"exact", NewRedisStore(f.client, WithClock(clk), WithKeyPrefix("ttl1:")), Limit{Count: 3, Period: 6_000_001 * time.Microsecond}, 2001},
			{"floor", NewRedisStore(f.client, WithClock(clk), WithKeyPrefix("ttl2:")), PerSecond(3), 1000},
			{"test floor", fakeTimeStore(f.client, WithClock(clk), WithKeyPrefix("ttl3:")), PerSecond(3), 3_600_000},
		} {
			lim := mustNew(t, c.s, GCRA, c.l)
			before, err := f.client.Time(ctx).Result()
			if err != nil {
				t.Fatal(err)
			}
			if d := mustAllow(t, lim, "k", 1); !d.Allowed {
				t.Fatalf("%s: %+v", c.name, d)
			}
			after := f.client.Time(ctx).Val()
			// The key expires at the server's ms when it was written plus
			// the TTL; the write was between before and after.
			exp, err := f.client.PExpireTime(ctx, c.s.redisKey(GCRA, "k")).Result()
			if err != nil {
				t.Fatal(err)
			}
			at := exp.Milliseconds()
			if at < before.UnixMilli()+c.want || at > after.UnixMilli()+c.want {
				t.Errorf("%s: expires at %d ms, want %d ms after a write in [%d, %d]", c.name, at, c.want, before.UnixMilli(), after.UnixMilli())
			}
		}
	})
}
