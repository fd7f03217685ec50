package distributed

import (
	"context"
	"fmt"
	"math"
	"math/rand/v2"
	"sort"
	"strings"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/smoothrate/ratelimit/internal/redistest"
)

// scriptCaller runs lease.lua directly at explicit times for one limiter
// name, as the tests of the registry need.
type scriptCaller struct {
	t    *testing.T
	c    redis.UniversalClient
	keys []string
	rate float64
}

func (sc scriptCaller) lease(now int64, pid string, want, maxWait int64, demand float64, tau int64) reply {
	sc.t.Helper()
	// The compact form, as a Limiter sends it: hot.lua answers when it can.
	args := compactLease(packDoubles(float64(redisEpoch+now), 0, sc.rate, 1, 0, 3, 1, 1_000_000, 1_000_000,
		0, float64(want), float64(maxWait), demand, float64(tau), 0), pid, "")
	v, err := leaseScript.Run(context.Background(), sc.c, sc.keys, args...).Result()
	if err != nil {
		sc.t.Fatalf("lease %s %s: %v", pid, args[1:], err)
	}
	r, err := parseReply(v)
	if err != nil {
		sc.t.Fatal(err)
	}
	return r
}

// maxMin is the exact max-min fair share of rate among demands (water
// filling): the share of process i.
func maxMin(rate float64, demands []float64) []float64 {
	idx := make([]int, len(demands))
	for i := range idx {
		idx[i] = i
	}
	sort.Slice(idx, func(a, b int) bool { return demands[idx[a]] < demands[idx[b]] })
	level, remaining := math.Inf(1), rate
	for k, i := range idx {
		if l := remaining / float64(len(idx)-k); demands[i] > l {
			level = l
			break
		}
		remaining -= demands[i]
	}
	out := make([]float64, len(demands))
	for i, d := range demands {
		if level < math.Inf(1) {
			out[i] = level // contended: the level is every process's ceiling
		} else {
			out[i] = d + remaining/float64(len(demands))
		}
	}
	return out
}

// TestFairShareCloseToMaxMin: the share the script gives each process
// (read as the lease cap, τ × share) is within 2.3 % of the exact max-min
// share over the reported demands, contended or not: the histogram rounds
// each demand to 1/16 octave (2.2 %), and the cached level is at most 10 ms
// old (the probes come 20 ms after the last registration).
func TestFairShareCloseToMaxMin(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	c := newClient(t, srv)
	const rate = 1e6
	for _, tc := range []struct {
		name  string
		total float64 // Σ demand / rate
		seed  uint64
	}{{"contended", 2, 1}, {"contended-mild", 1.1, 2}, {"spare", 0.6, 3}} {
		rng := rand.New(rand.NewPCG(tc.seed, 9))
		demands := make([]float64, 12)
		var sum float64
		for i := range demands {
			demands[i] = math.Exp(rng.Float64() * 4) // log-uniform over e^4 ≈ 55×
			sum += demands[i]
		}
		for i := range demands {
			demands[i] *= tc.total * rate / sum
		}
		sc := scriptCaller{t: t, c: c, keys: keysOf("fair-" + tc.name), rate: rate}
		now := int64(0)
		for i, d := range demands {
			sc.lease(now, fmt.Sprint(i), 1, 0, d, 100_000)
			now += 100
		}
		now += 20_000
		want := maxMin(rate, demands)
		worst := 0.0
		for i, d := range demands {
			// τ = 0.1 s: the cap is 0.1 × share permits, about 1e4.
			r := sc.lease(now, fmt.Sprint(i), 1<<40, 1_000_000, d, 100_000)
			got := float64(r.granted) / 0.1
			worst = max(worst, math.Abs(got/want[i]-1))
			if math.Abs(got-want[i]) > 0.023*want[i]+10 {
				t.Errorf("%s: process %d (demand %.0f): share %.0f, exact max-min %.0f (%.2f %% off)",
					tc.name, i, d, got, want[i], 100*(got/want[i]-1))
			}
			if r.processes != len(demands) {
				t.Errorf("%s: %d processes reported, want %d", tc.name, r.processes, len(demands))
			}
		}
		t.Logf("%s (Σ demand = %v R): largest deviation from the exact max-min share %.2f %%", tc.name, tc.total, 100*worst)
	}
}

// TestDeadProcessStopsCountingWithinASecond: a process that calls every
// 400 ms stays counted; once it stops, it is no longer counted between
// 0.5 s and 1 s (the registry TTL) plus one level refresh after its last
// call, and the survivor's share grows to the whole rate.
func TestDeadProcessStopsCountingWithinASecond(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	sc := scriptCaller{t: t, c: newClient(t, srv), keys: keysOf("reclaim"), rate: 1000}
	var last int64
	for now := int64(0); now <= 3_000_000; now += 50_000 {
		if now%400_000 == 0 {
			sc.lease(now, "b", 1, 1_000_000, 500, 100_000)
			last = now
		}
		if r := sc.lease(now, "a", 1, 1_000_000, 500, 100_000); now > 50_000 && r.processes != 2 {
			t.Fatalf("at %d µs a live process calling every 400 ms was not counted: %d processes", now, r.processes)
		}
	}
	for now := last + 50_000; ; now += 50_000 {
		if r := sc.lease(now, "a", 1, 1_000_000, 500, 100_000); r.processes == 1 {
			if gone := now - last; gone < 500_000 || gone > 1_010_000+50_000 {
				t.Fatalf("the dead process stopped counting %d µs after its last call, want 0.5–1.01 s", gone)
			}
			// Uncontended alone: its share is its demand plus the whole
			// spare; with τ = 1 s the lease cap is the whole rate.
			if r := sc.lease(now, "a", 1<<20, 1_000_000, 500, 1_000_000); r.granted < 990 {
				t.Fatalf("the survivor's lease cap is %d, want the whole rate (1000)", r.granted)
			}
			return
		}
		if now-last > 2_000_000 {
			t.Fatal("the dead process still counts 2 s after its last call")
		}
	}
}

// TestLeaseCostIndependentOfFleet: with 2 000 registered processes a lease
// runs the same few Redis commands as with one, and never reads the whole
// registry (HGETALL only ever reads the small demand histogram).
func TestLeaseCostIndependentOfFleet(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	c := newClient(t, srv)
	for _, n := range []int{1, 2000} {
		sc := scriptCaller{t: t, c: c, keys: keysOf(fmt.Sprint("cost", n)), rate: 1e6}
		now := int64(0)
		for i := range n {
			sc.lease(now, fmt.Sprint(i), 1, 0, float64(1+i%500), 100_000)
			now += 100 // 2 000 processes register within 0.2 s: one slot
		}
		srv.CLI("CONFIG", "RESETSTAT")
		const leases = 300
		for k := range leases {
			sc.lease(now, fmt.Sprint(k%n), 10, 1_000_000, float64(1+k%500), 100_000)
			now += 1_000 // 0.3 s: crosses a slot, 30 level refreshes
		}
		var inside int64
		stats := commandStats(srv)
		for k, st := range stats {
			if k != "evalsha" && k != "eval" && !strings.HasPrefix(k, "config") {
				inside += st.calls
			}
		}
		hgetall := stats["hgetall"].calls
		perLease := float64(inside) / leases
		t.Logf("%d processes: %.2f commands per lease, %d HGETALL (histogram) in %d leases", n, perLease, hgetall, leases)
		// At an explicit time the script sets the two keys' TTLs on
		// every call (with Redis's TIME, rarely): 2 of them.
		if perLease > 10 {
			t.Errorf("%d processes: %.2f Redis commands per lease, want at most 10", n, perLease)
		}
		if hgetall > 40 {
			t.Errorf("%d processes: %d HGETALL in %d leases: the level is not cached", n, hgetall, leases)
		}
		// Demands of 1–500/s span 9 octaves: at most 16 × 9 + 1 buckets
		// in each of the two slots; one process is in one bucket.
		limit := int64(2 * (16*9 + 1))
		if n == 1 {
			limit = 1
		}
		if l, _ := c.HLen(context.Background(), keysOf(fmt.Sprint("cost", n))[1]).Result(); l > limit {
			t.Errorf("the demand histogram has %d fields for %d processes, want at most %d", l, n, limit)
		}
	}
}
