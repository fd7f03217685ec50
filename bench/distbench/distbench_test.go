package distbench

// Decisions per second per process: one process's limiter answering
// "may I have 1 permit now?", every answer yes.
//
//   - local: ratelimit.NewBursty(1e9), TryAcquire(1, 0): no Redis.
//   - distributed: distributed.New(client, name, 1e9), TryAcquire(1, 0) with
//     permits in hand: a fleet rate of 1e9/s, so every lease covers the
//     demand, measured at steady state (demand measured, prefetch ahead of
//     the pool; see warm). remote/op counts calls that waited for Redis.
//   - redis_rate: redis_rate.NewLimiter(client).AllowN(ctx, key,
//     Limit{Rate: 1e6, Burst: 1e6, Period: 1 s}, 1): one EVALSHA per
//     decision, on the same server and client settings.
//
// The Parallel variants run the same calls from several goroutines, each
// library at the concurrency that suits it: local and distributed, which
// never wait, from GOMAXPROCS goroutines (more would only queue for the
// cores); redis_rate, which waits a round trip per call, from 16 ×
// GOMAXPROCS (b.SetParallelism(16)), so that many round trips are in
// flight at once, as in a busy server process. The parallel distributed
// benchmark reports refused/op instead of failing on a refusal (see
// there); the serial one fails on any.
//
// Redis metrics, read with CONFIG RESETSTAT before the measured loop and
// INFO commandstats after it: redis-cmds/s (commands the server executed
// per second of the loop, all from this process) and evalsha-µs/call (the
// server's usec_per_call of EVALSHA, i.e. the script's run time).

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-redis/redis_rate/v10"
	"github.com/redis/go-redis/v9"

	"github.com/smoothrate/ratelimit"
	"github.com/smoothrate/ratelimit/distributed"
)

const (
	rate        = 1e9 // far above any request rate: every call is a grant
	parallelism = 16
)

var (
	srvOnce sync.Once
	srv     *Server
	srvAddr string
	srvErr  error
	names   atomic.Int64
)

func TestMain(m *testing.M) {
	code := m.Run()
	if srv != nil {
		srv.Stop()
	}
	os.Exit(code)
}

// server starts one redis-server for the whole run (persistence off, on a
// free loopback port) and returns its address. Without redis-server on
// PATH the benchmarks are skipped, or fail when CI=true.
func server(b *testing.B) string {
	b.Helper()
	if _, err := exec.LookPath("redis-server"); err != nil {
		if os.Getenv("CI") == "true" {
			b.Fatal("redis-server must be on PATH")
		}
		b.Skip("redis-server is not on PATH (Debian/Ubuntu: apt-get install -y redis-server)")
	}
	srvOnce.Do(func() {
		srv, srvErr = StartServer()
		if srvErr == nil {
			srvAddr = srv.Addr
		}
	})
	if srvErr != nil {
		b.Fatal(srvErr)
	}
	return srvAddr
}

func newClient(b *testing.B) *redis.Client {
	c := redis.NewClient(&redis.Options{
		Addr:                  server(b),
		ContextTimeoutEnabled: true,
		PoolSize:              4 * parallelism,
	})
	b.Cleanup(func() { _ = c.Close() })
	return c
}

// cmdStats is INFO commandstats: command → calls, usec_per_call.
type cmdStat struct {
	calls       int64
	usecPerCall float64
}

func commandStats(b *testing.B, c *redis.Client) map[string]cmdStat {
	b.Helper()
	info, err := c.Info(context.Background(), "commandstats").Result()
	if err != nil {
		b.Fatal(err)
	}
	stats := map[string]cmdStat{}
	for _, line := range strings.Split(info, "\n") {
		name, fields, ok := strings.Cut(strings.TrimSpace(line), ":")
		if !ok || !strings.HasPrefix(name, "cmdstat_") {
			continue
		}
		var st cmdStat
		for _, f := range strings.Split(fields, ",") {
			k, v, _ := strings.Cut(f, "=")
			switch k {
			case "calls":
				st.calls, _ = strconv.ParseInt(v, 10, 64)
			case "usec_per_call":
				st.usecPerCall, _ = strconv.ParseFloat(v, 64)
			}
		}
		stats[strings.TrimPrefix(name, "cmdstat_")] = st
	}
	return stats
}

// redisMeter brackets a measured loop with CONFIG RESETSTAT and INFO
// commandstats.
type redisMeter struct {
	c      *redis.Client
	start  time.Time
	writes bool // every script writes its key with SET or PSETEX: check it
}

func startMeter(b *testing.B, c *redis.Client) *redisMeter {
	b.Helper()
	if err := c.ConfigResetStat(context.Background()).Err(); err != nil {
		b.Fatal(err)
	}
	return &redisMeter{c: c, start: time.Now()}
}

// report adds, per second of the measured loop, the scripts this process
// ran (evalsha/s: EVALSHA and EVAL, the commands it sent) and all the
// commands the server executed (redis-cmds/s: those plus the ones the
// scripts ran inside, TIME, GET, SET, ...), and EVALSHA's
// usec_per_call (evalsha-µs/call). The meter's own CONFIG and INFO are not
// counted.
func (m *redisMeter) report(b *testing.B) {
	b.Helper()
	secs := time.Since(m.start).Seconds()
	stats := commandStats(b, m.c)
	var calls int64
	for name, st := range stats {
		if !strings.HasPrefix(name, "config") && name != "info" {
			calls += st.calls
		}
	}
	// With writes set, every script must write its key on every call: a
	// script that skips its write does less than a limiter must (redis_rate
	// at 1e9/s did: its increment of 1e-9 s vanished in its float TAT, so
	// it never wrote; see redisRate).
	scripts := stats["evalsha"].calls + stats["eval"].calls
	if w := stats["set"].calls + stats["psetex"].calls; m.writes && w < scripts {
		b.Fatalf("%d writes for %d scripts: a script skipped its write", w, scripts)
	}
	b.ReportMetric(float64(scripts)/secs, "evalsha/s")
	b.ReportMetric(float64(calls)/secs, "redis-cmds/s")
	b.ReportMetric(stats["evalsha"].usecPerCall, "evalsha-µs/call")
}

func newDistributed(b *testing.B, c *redis.Client) *distributed.Limiter {
	b.Helper()
	name := fmt.Sprintf("distbench-%d-%d", os.Getpid(), names.Add(1))
	l, err := distributed.New(c, name, rate, distributed.WithProcessID(name))
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = l.Close(context.Background()) })
	return l
}

// warm brings l to steady state: its demand measured, leases sized from it
// and prefetched in the background, and a whole batch of calls granted
// without waiting for Redis.
func warm(b *testing.B, l *distributed.Limiter) {
	b.Helper()
	const batch = 1 << 16
	sized := int64(-1) // leases when the demand was first measured
	for round := 0; ; round++ {
		before := l.Stats().RemoteDecisions
		granted := 0
		for range batch {
			if l.TryAcquire(1, 0) {
				granted++
			}
		}
		st := l.Stats()
		if sized < 0 && st.Demand > 0 {
			sized = st.Leases
		}
		// Two leases since then: a lease sized from the demand has
		// been spent down to the watermark and a prefetch has
		// replaced it.
		if sized >= 0 && st.Leases >= sized+2 && st.RemoteDecisions == before && granted == batch {
			return
		}
		if round > 1000 {
			b.Fatalf("no steady state after %d calls: %+v", round*batch, st)
		}
	}
}

// scriptRate is the rate of the one-script-per-call limiters (redis_rate,
// and throttle's RedisStore in keyed_test.go): far above any request rate
// here, so every call is allowed, and low enough that redis_rate's
// increment (1/rate s) survives its float TAT (seconds since 2017, whose
// ulp is about 6e-8 s): at 1e9/s it vanished, the TAT never moved, and
// redis_rate skipped its SET on every call, doing less than a limiter
// does (redisMeter.report now fails such a run).
const scriptRate = 1e6

func redisRate(b *testing.B, c *redis.Client) func() bool {
	lim := redis_rate.NewLimiter(c)
	limit := redis_rate.Limit{Rate: scriptRate, Burst: scriptRate, Period: time.Second}
	key := fmt.Sprintf("distbench-rr-%d-%d", os.Getpid(), names.Add(1))
	ctx := context.Background()
	return func() bool {
		res, err := lim.AllowN(ctx, key, limit, 1)
		return err == nil && res.Allowed == 1
	}
}

func BenchmarkDecision(b *testing.B) {
	b.Run("local", func(b *testing.B) {
		l, err := ratelimit.NewBursty(rate)
		if err != nil {
			b.Fatal(err)
		}
		b.ReportAllocs()
		for b.Loop() {
			if !l.TryAcquire(1, 0) {
				b.Fatal("refused")
			}
		}
	})
	b.Run("distributed", func(b *testing.B) {
		c := newClient(b)
		l := newDistributed(b, c)
		warm(b, l)
		before := l.Stats()
		m := startMeter(b, c)
		b.ReportAllocs()
		b.ResetTimer()
		for b.Loop() {
			if !l.TryAcquire(1, 0) {
				b.Fatalf("refused with permits in hand: %+v", l.Stats())
			}
		}
		b.StopTimer()
		m.report(b)
		b.ReportMetric(float64(l.Stats().RemoteDecisions-before.RemoteDecisions)/float64(b.N), "remote/op")
	})
	b.Run("redis_rate", func(b *testing.B) { serialScript(b, redisRate) })
}

// parallel runs op from p × GOMAXPROCS goroutines and returns how many
// calls it refused.
func parallel(b *testing.B, p int, op func() bool) int64 {
	var refused atomic.Int64
	b.SetParallelism(p)
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			if !op() {
				refused.Add(1)
			}
		}
	})
	return refused.Load()
}

func BenchmarkDecisionParallel(b *testing.B) {
	b.Run("local", func(b *testing.B) {
		l, err := ratelimit.NewBursty(rate)
		if err != nil {
			b.Fatal(err)
		}
		b.ReportAllocs()
		if n := parallel(b, 1, func() bool { return l.TryAcquire(1, 0) }); n > 0 {
			b.Fatalf("%d of %d calls refused", n, b.N)
		}
	})
	b.Run("distributed", func(b *testing.B) {
		c := newClient(b)
		l := newDistributed(b, c)
		warm(b, l)
		before := l.Stats()
		m := startMeter(b, c)
		b.ReportAllocs()
		b.ResetTimer()
		refused := parallel(b, 1, func() bool { return l.TryAcquire(1, 0) })
		b.StopTimer()
		m.report(b)
		// Not a failure here: with every core spinning in TryAcquire, the
		// goroutine that receives a prefetch can wait for a core (and
		// redis-server too) past the watermark, and calls are then
		// refused locally, never waiting for Redis. How often is the
		// figure.
		b.ReportMetric(float64(refused)/float64(b.N), "refused/op")
		b.ReportMetric(float64(l.Stats().RemoteDecisions-before.RemoteDecisions)/float64(b.N), "remote/op")
	})
	b.Run("redis_rate", func(b *testing.B) { parallelScript(b, redisRate) })
}
