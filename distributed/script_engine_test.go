package distributed

import (
	"context"
	_ "embed"
	"fmt"
	"math"
	"math/rand/v2"
	"strconv"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/smoothrate/ratelimit/internal/redisscript"
	"github.com/smoothrate/ratelimit/internal/redistest"
	"github.com/smoothrate/ratelimit/smooth"
)

//go:embed testdata/enginetest.lua
var engineTestLua string

// engineScript runs one engine operation inside Redis at an explicit time.
type engineScript struct {
	t   *testing.T
	c   redis.UniversalClient
	s   *redisscript.Script
	key string
}

func (e *engineScript) run(args ...any) [5]float64 {
	e.t.Helper()
	v, err := e.s.Run(context.Background(), e.c, []string{e.key}, args...).StringSlice()
	if err != nil {
		e.t.Fatalf("script %v: %v", args, err)
	}
	var out [5]float64
	for i := range out {
		if out[i], err = strconv.ParseFloat(v[i], 64); err != nil {
			e.t.Fatalf("script %v: reply %q: %v", args, v, err)
		}
	}
	return out
}

// same compares bit patterns, so that NaN equals NaN and nothing is lost to
// rounding.
func same(a, b float64) bool {
	return math.Float64bits(a) == math.Float64bits(b) || (a != a && b != b) || (a == 0 && b == 0)
}

// TestScriptMatchesEngine drives engine.lua (inside a real Redis, at explicit
// times) and the Go engine in microsecond mode through the same random
// operations, and requires identical moments, nextFreeTicket, stored
// permits, max permits and rates after every step.
func TestScriptMatchesEngine(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	c := redis.NewClient(&redis.Options{Addr: srv.Addr()})
	t.Cleanup(func() { _ = c.Close() })
	sc := redisscript.New(engineLua + "\n" + engineTestLua)

	scenarios := []engineWalk{
		{"b", 1, 0, 0, 5, 1},
		{"b", 0, 0, 0, 100, 2},
		{"b", 2.5, 0, 0, 0.7, 3},
		{"w", 0, 3, 2_000_000, 10, 4},
		{"w", 0, 2.5, 333_333, 1000, 5},
		{"w", 0, 3, 0, 50, 6},
	}
	for _, sn := range scenarios {
		sn.run(t, &engineScript{t: t, c: c, s: sc, key: fmt.Sprintf("engine-%d", sn.seed)}, 2000)
	}

	// A rescale that rounds past the new capacity: a full bucket of 2.5 s
	// at 7/s holds 17.5 permits, and 17.5·30.357142857142854/17.5 is one
	// ulp above 30.357142857142854, the capacity at 85/7 per second. The
	// Go engine caps it, and engine.lua must too (the random walk above
	// takes this path on 386, where math.Exp rounds differently).
	e := &engineScript{t: t, c: c, s: sc, key: "engine-overshoot"}
	g := smooth.NewBursty(smooth.Microsecond, 2.5, 7, 0)
	e.run("new", int64(0), "b", f64(2.5), int64(0), f64(0), f64(7))
	g.SetRate(85.0/7, 10_000_000)
	got := e.run("setrate", int64(10_000_000), f64(85.0/7))
	if !same(got[2], g.StoredPermits()) || g.StoredPermits() != g.MaxPermits() {
		t.Fatalf("full bucket rescaled: script %v, engine %v, capacity %v", got[2], g.StoredPermits(), g.MaxPermits())
	}
}

// engineWalk is one random walk of TestScriptMatchesEngine: a limiter's
// configuration and the seed of its operations.
type engineWalk struct {
	kind        string // "b" bursty, "w" warming up
	burst, cold float64
	warmup      int64 // µs
	rate        float64
	seed        uint64
}

// run applies steps random operations to engine.lua (through e) and to
// the Go engine, and fails at the first that leaves them different.
func (sn engineWalk) run(t *testing.T, e *engineScript, steps int) {
	t.Helper()
	rng := rand.New(rand.NewPCG(sn.seed, 42))
	now := int64(rng.IntN(1_000_000))
	var g smooth.Engine
	if sn.kind == "b" {
		g = smooth.NewBursty(smooth.Microsecond, sn.burst, sn.rate, now)
	} else {
		g = smooth.NewWarmingUp(smooth.Microsecond, sn.warmup, sn.cold, sn.rate, now)
	}
	got := e.run("new", now, sn.kind, f64(sn.burst), sn.warmup, f64(sn.cold), f64(sn.rate))
	check := func(step int, what string, moment int64, got [5]float64) {
		t.Helper()
		want := [5]float64{float64(moment), float64(g.NextFreeTicket()), g.StoredPermits(), g.MaxPermits(), g.Rate()}
		for i, name := range []string{"moment", "next", "stored", "max", "rate"} {
			if !same(got[i], want[i]) {
				t.Fatalf("%+v step %d %s: %s: script %v, engine %v", sn, step, what, name, got[i], want[i])
			}
		}
	}
	check(0, "new", 0, got)
	for step := 1; step <= steps; step++ {
		// Time mostly moves forward a little, sometimes a lot,
		// sometimes not at all, sometimes backwards.
		switch r := rng.IntN(20); {
		case r < 12:
			now += int64(rng.IntN(200_000))
		case r < 15:
			now += int64(rng.IntN(5_000_000))
		case r < 17:
			now -= int64(rng.IntN(100_000))
		}
		if now < 0 {
			now = 0
		}
		switch r := rng.IntN(10); {
		case r < 8:
			n := 1 + rng.IntN(20)
			if rng.IntN(10) == 0 {
				n = 1 + rng.IntN(1000)
			}
			moment, _ := g.Reserve(n, now)
			check(step, fmt.Sprintf("reserve %d at %d", n, now), moment, e.run("reserve", now, n))
		default:
			rate := math.Exp(rng.Float64()*12 - 2) // 0.14 .. 22000
			switch rng.IntN(12) {
			case 0:
				rate = math.Inf(1)
			case 1:
				rate = float64(1 + rng.IntN(100))
			}
			g.SetRate(rate, now)
			check(step, fmt.Sprintf("setrate %v at %d", rate, now), 0, e.run("setrate", now, f64(rate)))
		}
	}
}

// FuzzScriptMatchesEngine: TestScriptMatchesEngine's walk from fuzzed
// configurations and seeds (one Redis per fuzzing process).
//
//	go test ./distributed -run XXX -fuzz FuzzScriptMatchesEngine -fuzztime 2m
func FuzzScriptMatchesEngine(f *testing.F) {
	f.Add(false, 2.5, 0.0, int64(0), 0.7, uint64(3))
	f.Add(true, 0.0, 3.0, int64(2_000_000), 10.0, uint64(4))
	f.Add(false, 2.5, 0.0, int64(0), 7.0, uint64(9))
	srv := redistest.Start(f)
	c := redis.NewClient(&redis.Options{Addr: srv.Addr()})
	f.Cleanup(func() { _ = c.Close() })
	sc := redisscript.New(engineLua + "\n" + engineTestLua)
	f.Fuzz(func(t *testing.T, warm bool, burst, cold float64, warmup int64, rate float64, seed uint64) {
		// The configurations the root package accepts (its New validates).
		// (cold and warmup matter to a warming-up limiter only, burst to a
		// bursty one.)
		if !(rate > 0) || math.IsInf(rate, 0) ||
			!warm && !(burst >= 0 && burst <= 1e6) ||
			warm && (!(cold >= 1 && cold <= 1e3) || warmup < 0 || warmup > 1e12) {
			t.Skip()
		}
		sn := engineWalk{kind: "b", burst: burst, rate: rate, seed: seed}
		if warm {
			sn = engineWalk{kind: "w", cold: cold, warmup: warmup, rate: rate, seed: seed}
		}
		sn.run(t, &engineScript{t: t, c: c, s: sc, key: "fuzz"}, 200)
	})
}
