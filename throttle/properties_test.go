package throttle

import (
	"context"
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/smoothrate/ratelimit"
	"github.com/smoothrate/ratelimit/internal/testlong"
)

const propertySeeds = 25

// storeSeeds is how many random traces per algorithm the property tests
// send through every store (Redis included, a round trip per request): 12
// in scripts/test, propertySeeds in scripts/test-more (testlong).
var storeSeeds = testlong.Pick(12, propertySeeds)

// TestPropertyStoresDecideAsDefined runs random traces (time jumps, a clock
// stepping back, n from 0 to beyond the limit, Resets) through every store
// and requires every Decision to equal the pure definition's (model), and
// the admitted requests to respect the algorithm's admission bound, with
// each admitted request's time taken as the latest at which the key had
// admitted anything (a clock that steps back never creates allowance: what
// a key counted stays counted until time passes it again).
func TestPropertyStoresDecideAsDefined(t *testing.T) {
	forEachStore(t, func(t *testing.T, newStore func(clk ratelimit.Clock) Store) {
		clk := newSetClock()
		s := newStore(clk)
		for _, alg := range allAlgorithms {
			for seed := range uint64(storeSeeds) {
				r := rand.New(rand.NewPCG(seed, uint64(alg)))
				l := randomLimit(r, alg)
				lim := mustNew(t, s, alg, l)
				key := fmt.Sprintf("prop-%d", seed)
				start := clocktestEpochMicros + r.Int64N(1e9)
				m, _ := newModel(alg, l)
				var adm []admitted
				var latest int64
				for i, o := range randomTrace(r, l, 300, start, true) {
					if r.IntN(200) == 0 {
						if err := lim.Reset(context.Background(), key); err != nil {
							t.Fatal(err)
						}
						m, _ = newModel(alg, l)
						adm, latest = nil, 0
					}
					clk.Set(time.UnixMicro(o.at))
					got := mustAllow(t, lim, key, int(o.n))
					want := m.decide(o.at, o.n)
					if got != want {
						t.Fatalf("%v %v seed %d op %d (n=%d at %d): store %+v, definition %+v", alg, l, seed, i, o.n, o.at, got, want)
					}
					if got.Allowed && o.n > 0 {
						latest = max(latest, o.at)
						adm = append(adm, admitted{at: latest, n: o.n})
					}
				}
				if err := checkBound(alg, l, adm); err != nil {
					t.Fatalf("%v %v seed %d: %v", alg, l, seed, err)
				}
			}
		}
	})
}

var clocktestEpochMicros = newSetClock().Now().UnixMicro()

// TestPropertyPeeksAndRefusalsChangeNothing: a store that saw a trace and a
// store that saw only the trace's admitted requests (no peeks, no
// refusals) decide those requests identically.
func TestPropertyPeeksAndRefusalsChangeNothing(t *testing.T) {
	forEachStore(t, func(t *testing.T, newStore func(clk ratelimit.Clock) Store) {
		clkA, clkB := newSetClock(), newSetClock()
		a, b := newStore(clkA), newStore(clkB)
		for _, alg := range allAlgorithms {
			for seed := range uint64(storeSeeds / 2) {
				r := rand.New(rand.NewPCG(seed, 7))
				l := randomLimit(r, alg)
				la, lb := mustNew(t, a, alg, l), mustNew(t, b, alg, l)
				key := fmt.Sprintf("quiet-%d", seed)
				skipped := 0
				for i, o := range randomTrace(r, l, 300, clocktestEpochMicros, false) {
					clkA.Set(time.UnixMicro(o.at))
					da := mustAllow(t, la, key, int(o.n))
					if !da.Allowed || o.n == 0 {
						skipped++
						continue
					}
					clkB.Set(time.UnixMicro(o.at))
					if db := mustAllow(t, lb, key, int(o.n)); db != da {
						t.Fatalf("%v seed %d op %d: with peeks and refusals %+v, without %+v", alg, seed, i, da, db)
					}
				}
				if skipped == 0 {
					t.Fatalf("%v seed %d: the trace had no peek and no refusal", alg, seed)
				}
			}
		}
	})
}

// TestPropertyRetryAfterExact: on a monotone clock, a refused request with
// a finite RetryAfter is allowed at now+RetryAfter and still refused 1 µs
// earlier, if nothing else happens.
func TestPropertyRetryAfterExact(t *testing.T) {
	for _, alg := range allAlgorithms {
		checked := 0
		for seed := range uint64(propertySeeds * 2) {
			r := rand.New(rand.NewPCG(seed, 3))
			l := randomLimit(r, alg)
			m, _ := newModel(alg, l)
			for _, o := range randomTrace(r, l, 200, clocktestEpochMicros, false) {
				before := m.clone()
				d := m.decide(o.at, o.n)
				if err := checkRetryAfter(before, d, o); err != nil {
					t.Fatalf("%v %v seed %d: %v", alg, l, seed, err)
				}
				if !d.Allowed && d.RetryAfter > 0 {
					checked++
				}
			}
		}
		if checked < 100 {
			t.Errorf("%v: only %d refusals checked", alg, checked)
		}
	}
}

// checkRetryAfter checks d, the decision of o on before, for exactness.
func checkRetryAfter(before *model, d Decision, o op) error {
	switch {
	case d.Allowed:
		if d.RetryAfter != 0 {
			return fmt.Errorf("allowed with RetryAfter %v", d.RetryAfter)
		}
		return nil
	case d.RetryAfter == Never:
		if o.n <= int64(d.Limit) {
			return fmt.Errorf("n=%d ≤ limit %d refused as Never", o.n, d.Limit)
		}
		return nil
	case d.RetryAfter <= 0 || d.RetryAfter%time.Microsecond != 0:
		return fmt.Errorf("refused n=%d at %d with RetryAfter %v", o.n, o.at, d.RetryAfter)
	}
	wait := int64(d.RetryAfter / time.Microsecond)
	if later := before.clone().decide(o.at+wait, o.n); !later.Allowed {
		return fmt.Errorf("n=%d at %d: RetryAfter %v, still refused then: %+v", o.n, o.at, d.RetryAfter, later)
	}
	if wait > 1 {
		if early := before.clone().decide(o.at+wait-1, o.n); early.Allowed {
			return fmt.Errorf("n=%d at %d: RetryAfter %v, but allowed 1 µs earlier", o.n, o.at, d.RetryAfter)
		}
	}
	return nil
}

// TestPropertyMetersAgree: on a monotone clock the token bucket and the
// leaky bucket decide exactly as GCRA (three ways to keep one meter).
func TestPropertyMetersAgree(t *testing.T) {
	for seed := range uint64(propertySeeds * 2) {
		r := rand.New(rand.NewPCG(seed, 5))
		l := randomLimit(r, GCRA)
		if err := checkMetersAgree(l, randomTrace(r, l, 300, clocktestEpochMicros, false)); err != nil {
			t.Fatalf("%v seed %d: %v", l, seed, err)
		}
	}
}

func checkMetersAgree(l Limit, ops []op) error {
	g, err := newModel(GCRA, l)
	if err != nil {
		return err
	}
	tb, _ := newModel(TokenBucket, l)
	lb, _ := newModel(LeakyBucket, l)
	for i, o := range ops {
		dg := g.decide(o.at, o.n)
		if dt := tb.decide(o.at, o.n); dt != dg {
			return fmt.Errorf("op %d (n=%d at %d): GCRA %+v, token bucket %+v", i, o.n, o.at, dg, dt)
		}
		if dl := lb.decide(o.at, o.n); dl != dg {
			return fmt.Errorf("op %d (n=%d at %d): GCRA %+v, leaky bucket %+v", i, o.n, o.at, dg, dl)
		}
	}
	return nil
}

// TestPropertyClockBackNoAllowance: at any moment when the clock has
// stepped back behind the key's latest admitted request, a request allowed
// now would also be allowed at that latest time, and Remaining is no
// larger now than then. (Peeks and refusals write nothing, so a key cannot
// know of times at which it admitted nothing.)
func TestPropertyClockBackNoAllowance(t *testing.T) {
	for _, alg := range allAlgorithms {
		backs := 0
		for seed := range uint64(propertySeeds * 2) {
			r := rand.New(rand.NewPCG(seed, 11))
			l := randomLimit(r, alg)
			m, _ := newModel(alg, l)
			var latest int64
			for i, o := range randomTrace(r, l, 300, clocktestEpochMicros, true) {
				if o.at < latest {
					backs++
					if err := checkNoAllowance(m, o, latest); err != nil {
						t.Fatalf("%v %v seed %d op %d: %v", alg, l, seed, i, err)
					}
				}
				if d := m.decide(o.at, o.n); d.Allowed && o.n > 0 {
					latest = max(latest, o.at)
				}
			}
		}
		if backs < 100 {
			t.Errorf("%v: the clock stepped back only %d times", alg, backs)
		}
	}
}

func checkNoAllowance(m *model, o op, latest int64) error {
	now, then := m.clone().decide(o.at, o.n), m.clone().decide(latest, o.n)
	if now.Allowed && !then.Allowed {
		return fmt.Errorf("n=%d allowed at %d (clock stepped back) but refused at %d: %+v vs %+v", o.n, o.at, latest, now, then)
	}
	peekNow, peekThen := m.clone().decide(o.at, 0), m.clone().decide(latest, 0)
	if peekNow.Remaining > peekThen.Remaining {
		return fmt.Errorf("remaining %d at %d (clock stepped back) > %d at %d", peekNow.Remaining, o.at, peekThen.Remaining, latest)
	}
	return nil
}
