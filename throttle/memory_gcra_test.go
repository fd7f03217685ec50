package throttle

import (
	"math"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/smoothrate/ratelimit"
)

// bigDenCount is a GCRA count whose denominator at a period of 2 µs needs
// more than 32 bits, where int is 64 bits (on 386 no Count can have one,
// and every GCRA state packs).
var bigDenCount = int(min(uint64(math.MaxInt), 1<<33+3))

// TestMemoryGCRAFusedMatchesDefinition holds the MemoryStore's fused GCRA
// path (in Limiter.allow) to the definition (decideState): random traces
// on one key shared by limiters of different limits (so states written
// under another denominator are read, some of them too wide to pack into
// the entry), with the clock stepping back, far
// enough for a huge denominator's debt cap to bind, peeks, and requests
// beyond the burst. Every Decision and every stored state must be the
// definition's, to the bit.
func TestMemoryGCRAFusedMatchesDefinition(t *testing.T) {
	wide := 0 // decisions after which the key's state was wide
	for seed := range uint64(200) {
		r := rand.New(rand.NewPCG(seed, 99))
		clk := newSetClock()
		s := memStore(WithStoreClock(clk))
		var lims []*Limiter
		for range 1 + r.IntN(3) {
			l := randomLimit(r, GCRA)
			switch r.IntN(4) {
			case 0:
				// den = 2^30: the debt cap is 2^21 µs, about two seconds.
				l = Limit{Count: 1 << 30, Period: 3 * time.Microsecond, Burst: 1 + r.IntN(1<<20)}
			case 1:
				// den = 2^33 + 3, too wide to pack into an entry: the
				// state goes wide and back as the limits take turns.
				l = Limit{Count: bigDenCount, Period: 2 * time.Microsecond, Burst: 1 + r.IntN(1<<20)}
			}
			lims = append(lims, mustNew(t, s, GCRA, l))
		}
		var st state
		var ok bool
		now := clocktestEpochMicros + r.Int64N(1e9)
		for i := range 400 {
			lim := lims[r.IntN(len(lims))]
			switch x := r.IntN(20); {
			case x == 0:
				now -= r.Int64N(10_000_000) // far back: the debt cap binds
			case x == 1:
				now += r.Int64N(3 * lim.p.period)
			case x < 6:
			default:
				now += r.Int64N(max(1, 2*lim.p.period/lim.p.count) + 1)
			}
			n := int64(1)
			switch r.IntN(8) {
			case 0:
				n = 0
			case 1:
				n = r.Int64N(lim.p.burst + 3)
			}
			want, write, sh, j := definitionStep(t, s, clk, lim, seed, i, now, n, &st, &ok)
			var stored state
			var expires int64
			if j != none {
				stored, expires = sh.state(j)
				if sh.entries[j].isWide() {
					wide++
				}
			}
			if (j != none) != ok || ok && stored != st {
				t.Fatalf("seed %d op %d: stored %+v (found %v), want %+v (%v)", seed, i, stored, j != none, st, ok)
			}
			if write && expires != now+int64(want.ResetAfter/time.Microsecond) {
				t.Fatalf("seed %d op %d: expires at %d, want now %d + ResetAfter %v", seed, i, expires, now, want.ResetAfter)
			}
		}
	}
	if wide == 0 && int64(bigDenCount) > 1<<32 {
		t.Fatal("no state was ever wide: the wide path went untested")
	}
}

// definitionStep decides n at now for key "k" through lim (over s, whose
// clock is clk) and through the definition (decideState), which keeps the
// key's state in *st and *ok, and fails unless both give the same
// Decision. It returns that Decision, whether the definition wrote, and
// the key's shard and position in it (none if absent). seed and op name
// the step in a failure.
func definitionStep(t *testing.T, s *MemoryStore, clk *setClock, lim *Limiter, seed uint64, op int, now, n int64, st *state, ok *bool) (Decision, bool, *shard, int32) {
	t.Helper()
	clk.Set(time.UnixMicro(now))
	got := mustAllow(t, lim, "k", int(n))
	want, next, write := decideState(&lim.p, *st, *ok, now, n)
	if got != want {
		t.Fatalf("%v seed %d op %d (%+v, n=%d at %d): store %+v, definition %+v", lim.p.alg, seed, op, lim.Limit(), n, now, got, want)
	}
	if write {
		*st, *ok = next, true
	}
	k, sh, h := s.heldKey(lim.p.alg, "k")
	return want, write, sh, sh.lookup(h, k)
}

// TestGCRADenWithItsTopBitSet: a GCRA denominator in [2^31, 2^32) packs
// into an entry with the word's sign bit set; read back signed it was
// negative, "no state", and every decision found the key new: the memory
// store admitted every request where Redis and the definition hold the
// burst. (A Count of 2^31 + 1 a second, a byte count, say.)
func TestGCRADenWithItsTopBitSet(t *testing.T) {
	l := Limit{Count: int(min(uint64(math.MaxInt), 1<<31+1)), Period: time.Second, Burst: 2}
	forEachStore(t, func(t *testing.T, newStore func(clk ratelimit.Clock) Store) {
		clk := newSetClock()
		lim := mustNew(t, newStore(clk), GCRA, l)
		for i := range 5 {
			if d := mustAllow(t, lim, "k", 1); d.Allowed != (i < 2) {
				t.Errorf("request %d at one instant: %+v; want the burst of 2 allowed, then refusals", i, d)
			}
		}
	})
}
