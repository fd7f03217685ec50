package distbench

// Keyed limiters on Redis: throttle.RedisStore against go-redis/redis_rate
// (the same GCRA, one EVALSHA per decision) on the same redis-server and
// client pool. Every call is allowed (a limit of 1e6 per second,
// scriptRate), so both run their whole script, write included (the meter
// checks it).
//
//   - throttle-gcra: throttle.New(throttle.NewRedisStore(c), GCRA,
//     Limit{Count: 1e6, Period: 1 s}).Allow(ctx, key); Redis TIME.
//   - throttle-fixed-window, throttle-sliding-window: the same with those
//     algorithms, for scale.
//   - redis_rate: AllowN(ctx, key, Limit{Rate: 1e6, Burst: 1e6, Period: 1 s}, 1).
//
// BenchmarkKeyedRedis runs one caller; BenchmarkKeyedRedisParallel runs
// 16 × GOMAXPROCS callers (b.SetParallelism(16)) on one client whose pool
// has 64 connections, the same for both libraries. evalsha-µs/call is the
// server's usec_per_call of EVALSHA from INFO commandstats: the time the
// script runs on the server.

import (
	"context"
	"fmt"
	"os"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/smoothrate/ratelimit/throttle"
)

func keyedThrottle(b *testing.B, c *redis.Client, alg throttle.Algorithm) func() bool {
	b.Helper()
	st, err := throttle.NewRedisStore(c)
	if err != nil {
		b.Fatal(err)
	}
	lim, err := throttle.New(st, alg, throttle.Limit{Count: scriptRate, Period: time.Second})
	if err != nil {
		b.Fatal(err)
	}
	key := fmt.Sprintf("keyed-%d-%d", os.Getpid(), names.Add(1))
	ctx := context.Background()
	return func() bool {
		d, err := lim.Allow(ctx, key)
		return err == nil && d.Allowed
	}
}

// keyedCases are the benchmarks' subjects, each returning a call that
// reports whether it was allowed.
var keyedCases = []struct {
	name string
	make func(*testing.B, *redis.Client) func() bool
}{
	{"throttle-gcra", func(b *testing.B, c *redis.Client) func() bool { return keyedThrottle(b, c, throttle.GCRA) }},
	{"throttle-fixed-window", func(b *testing.B, c *redis.Client) func() bool {
		return keyedThrottle(b, c, throttle.FixedWindow)
	}},
	{"throttle-sliding-window", func(b *testing.B, c *redis.Client) func() bool {
		return keyedThrottle(b, c, throttle.SlidingWindow)
	}},
	{"redis_rate", redisRate},
}

func BenchmarkKeyedRedis(b *testing.B) {
	for _, kc := range keyedCases {
		b.Run(kc.name, func(b *testing.B) { serialScript(b, kc.make) })
	}
}

func BenchmarkKeyedRedisParallel(b *testing.B) {
	for _, kc := range keyedCases {
		b.Run(kc.name, func(b *testing.B) { parallelScript(b, kc.make) })
	}
}

// serialScript measures a one-script-per-call limiter made by mk on a
// fresh client, one caller, with the Redis meter around the loop. Every
// call must be allowed.
func serialScript(b *testing.B, mk func(*testing.B, *redis.Client) func() bool) {
	c := newClient(b)
	allow := mk(b, c)
	if !allow() { // loads the script
		b.Fatal("refused")
	}
	m := startMeter(b, c)
	m.writes = true
	b.ReportAllocs()
	b.ResetTimer()
	for b.Loop() {
		if !allow() {
			b.Fatal("refused")
		}
	}
	b.StopTimer()
	m.report(b)
}

// parallelScript is serialScript with 16 × GOMAXPROCS callers.
func parallelScript(b *testing.B, mk func(*testing.B, *redis.Client) func() bool) {
	c := newClient(b)
	allow := mk(b, c)
	if !allow() {
		b.Fatal("refused")
	}
	m := startMeter(b, c)
	m.writes = true
	b.ReportAllocs()
	b.ResetTimer()
	if n := parallel(b, parallelism, allow); n > 0 {
		b.Fatalf("%d of %d calls refused", n, b.N)
	}
	b.StopTimer()
	m.report(b)
}
