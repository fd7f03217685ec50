package rlqs

import (
	"math"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/smoothrate/ratelimit/internal/fairshare"
)

var t0 = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

const testSettle = 200 * time.Millisecond

func claimants(demands ...float64) []*claimant {
	cs := make([]*claimant, len(demands))
	for i, d := range demands {
		cs[i] = &claimant{demand: d}
	}
	return cs
}

// step allocates at now and assigns the results, as a bucket's tick does.
func step(now time.Time, budget float64, cs []*claimant) {
	allocate(now, budget, cs)
	for _, c := range cs {
		if !c.gone && c.next != c.rate {
			c.assign(now, testSettle, c.next)
		}
	}
}

func rates(cs []*claimant) []float64 {
	out := make([]float64, len(cs))
	for i, c := range cs {
		out[i] = c.rate
	}
	return out
}

func near(got, want []float64, tol float64) bool {
	if len(got) != len(want) {
		return false
	}
	for i := range got {
		if math.Abs(got[i]-want[i]) > tol*max(1, math.Abs(want[i])) {
			return false
		}
	}
	return true
}

func TestAllocate(t *testing.T) {
	inf := math.Inf(1)
	// Unknown demands: equal shares of 99 % of the budget.
	cs := claimants(inf, inf, inf)
	step(t0, 100, cs)
	if got := rates(cs); !near(got, []float64{33, 33, 33}, 1e-9) {
		t.Fatalf("unknown demands: %v", got)
	}
	// Measured, contended: 10 is met, the others split the rest; the
	// lowered ones keep 33 committed until it settles, so the first
	// tick raises nobody beyond what is free (1).
	cs[0].demand, cs[1].demand, cs[2].demand = 10, 60, 80
	step(t0.Add(time.Second), 100, cs)
	if got := rates(cs); !near(got, []float64{10, 33, 33}, 1e-9) {
		t.Fatalf("right after the reports: %v", got)
	}
	if c := committedSum(t0.Add(time.Second), cs); c > 100 {
		t.Fatalf("committed %v", c)
	}
	step(t0.Add(time.Second+testSettle), 100, cs)
	if got := rates(cs); !near(got, []float64{10, 44.5, 44.5}, 1e-9) {
		t.Fatalf("once settled: %v", got)
	}
	// Within the band nothing changes (no new token bucket for 1 %).
	cs[1].demand, cs[2].demand = 61, 79
	before := rates(cs)
	step(t0.Add(2*time.Second), 100, cs)
	if got := rates(cs); !near(got, before, 0) {
		t.Fatalf("small change: %v, was %v", got, before)
	}
}

// TestAllocateUncontended: what nobody asks for is spread evenly, so that
// a client whose demand grows can use it before the next allocation.
func TestAllocateUncontended(t *testing.T) {
	cs := claimants(10, 20)
	step(t0, 100, cs)
	if got := rates(cs); !near(got, []float64{10 + 34.5, 20 + 34.5}, 1e-9) {
		t.Fatalf("%v", got)
	}
}

// TestLowerBeforeRaise: a newcomer into a bucket whose budget is committed
// waits for the others' decreases to settle; until then the commitments
// never exceed the budget.
func TestLowerBeforeRaise(t *testing.T) {
	cs := claimants(50, 50)
	step(t0, 100, cs)
	cs = append(cs, &claimant{demand: math.Inf(1)})
	now := t0.Add(time.Second)
	step(now, 100, cs)
	// The margin (1) is all that is free at once.
	if cs[2].rate > 1.0001 || cs[0].rate != 33 || cs[1].rate != 33 {
		t.Fatalf("at once: %v", rates(cs))
	}
	for now.Before(t0.Add(time.Second + testSettle)) {
		if c := committedSum(now, cs); c > 100+1e-9 {
			t.Fatalf("%v: committed %v", now, c)
		}
		now = now.Add(20 * time.Millisecond)
		step(now, 100, cs)
	}
	step(now, 100, cs)
	if got := rates(cs); !near(got, []float64{33, 33, 33}, 1e-9) {
		t.Fatalf("settled: %v", got)
	}
}

// TestGoneClaimantHolds: a client whose stream closed keeps its rate
// committed until its assignment expires; then others get it.
func TestGoneClaimantHolds(t *testing.T) {
	cs := claimants(100, 100)
	step(t0, 100, cs)
	expires := t0.Add(3 * time.Second)
	cs[1].leave(t0.Add(time.Second), expires)
	step(t0.Add(2*time.Second), 100, cs)
	// Only the margin is free until then.
	if cs[0].rate > 50.5+1e-9 {
		t.Fatalf("before expiry: %v", rates(cs))
	}
	step(expires, 100, cs)
	if cs[0].rate != 99 {
		t.Fatalf("after expiry: %v", rates(cs))
	}
}

// TestLowerBudget: a budget below the commitments (a lower limit, a smaller
// claim) lowers everyone above target and raises nobody.
func TestLowerBudget(t *testing.T) {
	cs := claimants(10, 100)
	step(t0, 100, cs)
	cs[0].demand = 40
	step(t0.Add(time.Second), 50, cs)
	for _, c := range cs {
		if c.next > c.target+1e-9 {
			t.Fatalf("%+v above target", c)
		}
	}
	if cs[0].rate > 10.0001 {
		t.Fatalf("raised under a lower budget: %v", rates(cs))
	}
}

// TestYieldToTheShort: claimants kept just above their targets (within the
// band) give the difference back when others are clearly short and
// nothing is free: three newcomers among 200 lower everyone's target by
// 1.5 %, which alone changes nobody's token bucket.
func TestYieldToTheShort(t *testing.T) {
	inf := math.Inf(1)
	cs := make([]*claimant, 200)
	for i := range cs {
		cs[i] = &claimant{demand: inf}
	}
	step(t0, 100, cs)
	cs = append(cs, &claimant{demand: inf}, &claimant{demand: inf}, &claimant{demand: inf})
	step(t0.Add(time.Second), 100, cs)
	share := 99.0 / 203
	// At once the newcomers share what is free (the margin) and, being
	// short, make the others yield: lowered now, freed once settled.
	if math.Abs(cs[0].rate-share) > 1e-12 || math.Abs(cs[200].rate-1.0/3) > 1e-9 {
		t.Fatalf("at once: an old claimant at %v, a newcomer at %v (share %v)", cs[0].rate, cs[200].rate, share)
	}
	now := t0.Add(time.Second)
	for range 30 {
		now = now.Add(50 * time.Millisecond)
		step(now, 100, cs)
		if c := committedSum(now, cs); c > 100+1e-9 {
			t.Fatalf("committed %v", c)
		}
	}
	for i, c := range cs {
		if c.rate < share*(1-allocShort) || c.rate > share*(1+allocBand) {
			t.Fatalf("claimant %d at %v, share %v", i, c.rate, share)
		}
	}
}

func committedSum(now time.Time, cs []*claimant) float64 {
	s := 0.0
	for _, c := range cs {
		s += c.committed(now)
	}
	return s
}

// TestAllocateInvariant drives the allocator through random histories:
// demands change, clients join and leave, the budget moves, time steps by
// random amounts, and every rate assigned is a token bucket's (rounded
// down). At every instant the commitments stay within the budget (or
// where they already were, after the budget fell); once demands stop
// changing, every rate comes within the band and margin of its max-min
// share.
func TestAllocateInvariant(t *testing.T) {
	for seed := range uint64(200) {
		runAllocation(t, rand.New(rand.NewPCG(seed, 7)))
	}
}

func FuzzAllocateInvariant(f *testing.F) {
	f.Add(uint64(1), uint64(2))
	f.Add(uint64(42), uint64(0))
	f.Fuzz(func(t *testing.T, a, b uint64) {
		runAllocation(t, rand.New(rand.NewPCG(a, b)))
	})
}

func runAllocation(t *testing.T, rng *rand.Rand) {
	t.Helper()
	budget := []float64{1, 10, 100, 5000}[rng.IntN(4)]
	var cs []*claimant
	now := t0
	var expiries []time.Time
	tick := func() {
		before := committedSum(now, cs)
		allocate(now, budget, cs)
		for _, c := range cs {
			if c.gone || c.next == c.rate {
				continue
			}
			r := 0.0
			if tb, ok := encodeRate(c.next, 0, tokenBucket{}); ok {
				r = tb.rate()
			}
			if r > c.next*(1+1e-12) {
				t.Fatalf("encoded %v above %v", r, c.next)
			}
			c.assign(now, testSettle, r)
		}
		if after := committedSum(now, cs); after > max(budget, before)*(1+1e-9) {
			t.Fatalf("budget %v: committed %v, was %v", budget, after, before)
		}
	}
	for range 300 {
		switch k := rng.IntN(10); {
		case k < 2 || len(cs) == 0:
			d := math.Inf(1)
			if rng.IntN(2) == 0 {
				d = rng.ExpFloat64() * budget / 3
			}
			cs = append(cs, &claimant{demand: d})
		case k < 6:
			c := cs[rng.IntN(len(cs))]
			if !c.gone {
				c.demand = rng.ExpFloat64() * budget / 2
			}
		case k < 7:
			c := cs[rng.IntN(len(cs))]
			if !c.gone {
				e := now.Add(time.Duration(rng.IntN(4000)) * time.Millisecond)
				c.leave(now, e)
				expiries = append(expiries, e)
			}
		case k < 8:
			budget *= 0.5 + rng.Float64()
		}
		now = now.Add(time.Duration(rng.IntN(300)) * time.Millisecond)
		tick()
	}
	// Settle: demands fixed, time passes, every hold expires.
	for range 100 {
		now = now.Add(50 * time.Millisecond)
		tick()
	}
	var active []*claimant
	var demands []float64
	for _, c := range cs {
		if !c.gone {
			active = append(active, c)
			demands = append(demands, c.demand)
		}
	}
	shares := fairshare.Shares(budget, demands, nil)
	for i, c := range active {
		// Below its share by at most the shortfall that makes others
		// yield, the margin and the token bucket's rounding (1 %, or a
		// whole request per 10^6 s for the smallest rates); above it
		// by at most its band (wider when it wants less than its share).
		low := shares[i]*(1-allocShort-allocMargin-0.011) - 2e-6
		high := shares[i]*(1+allocBand) + 2e-6
		if shares[i] >= c.demand {
			high = shares[i]*(1+allocSlack) + 2e-6
		}
		if c.rate < low || c.rate > high {
			t.Fatalf("budget %v demands %v: claimant %d at %v, share %v", budget, demands, i, c.rate, shares[i])
		}
	}
	_ = expiries
}
