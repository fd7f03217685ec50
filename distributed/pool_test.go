package distributed

import (
	"context"
	"math"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/smoothrate/ratelimit/clocktest"
	"github.com/smoothrate/ratelimit/internal/redistest"
)

// TestPoolBookkeeping: the running totals that keep the hot path O(1)
// (held, nextLapse) agree, after every operation of a random sequence, with
// a full recount of the pool: what is held is the sum of the tranches not
// yet lapsed, what lapsed is counted once, and a take never succeeds with
// fewer permits held than asked.
func TestPoolBookkeeping(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	l := &Limiter{nextLapse: math.MaxInt64}
	var now time.Duration
	var inserted, taken, lapsed int64
	for step := 0; step < 20000; step++ {
		switch op := rng.IntN(10); {
		case op < 3:
			tr := tranche{
				n:       1 + rng.Int64N(50),
				usable:  now + time.Duration(rng.IntN(20))*time.Millisecond - 5*time.Millisecond,
				expires: now + time.Duration(1+rng.IntN(200))*time.Millisecond,
			}
			l.insertLocked(tr)
			inserted += tr.n
		case op < 8:
			n := 1 + rng.Int64N(30)
			before := l.heldLocked(now)
			at, got, ok, _ := l.takeLocked(n, now, now+10*time.Millisecond)
			if ok {
				if before < n || got.n != n || at > now+10*time.Millisecond {
					t.Fatalf("step %d: took %+v at %v with %d held, asked %d", step, got, at, before, n)
				}
				taken += n
				if rng.IntN(4) == 0 { // a cancelled Acquire gives it back
					l.insertLocked(got)
					taken -= n
				}
			}
		default:
			now += time.Duration(rng.IntN(30)) * time.Millisecond
		}
		// Recount from scratch.
		var want int64
		for _, tr := range l.pool {
			if now < tr.expires {
				want += tr.n
			}
		}
		if got := l.heldLocked(now); got != want {
			t.Fatalf("step %d: held %d, recount %d", step, got, want)
		}
		for _, tr := range l.pool {
			if now >= tr.expires || tr.n <= 0 {
				t.Fatalf("step %d: pruned pool keeps %+v at %v", step, tr, now)
			}
			if l.nextLapse > tr.expires {
				t.Fatalf("step %d: nextLapse %v after a tranche's end %v", step, l.nextLapse, tr.expires)
			}
		}
		lapsed = l.st.PermitsLapsed
	}
	// Every permit inserted is held, taken or lapsed, exactly once.
	if got := l.heldLocked(now) + taken + lapsed; got != inserted {
		t.Fatalf("held %d + taken %d + lapsed %d = %d, inserted %d", l.held, taken, lapsed, got, inserted)
	}
	if lapsed == 0 || taken == 0 {
		t.Fatalf("the sequence exercised too little: lapsed %d taken %d", lapsed, taken)
	}
}

// TestLeaseSizeFollowsRisingDemand: when demand jumps, leases grow to the
// new demand × τ within a couple of 50 ms samples. Through the 1 s average
// alone they would reach about 15 % of it after 150 ms (1 − e^(−0.15)),
// and prefetched leases would run dry before their refill arrived.
func TestLeaseSizeFollowsRisingDemand(t *testing.T) {
	srv := redistest.Start(t)
	base := clocktest.NewFake()
	l := newSim(t, newClient(t, srv), "rise", "p", 1e6, base)
	drive(base, 2*time.Second, 100, l)
	if st := l.Stats(); st.LargestLease > 20 {
		t.Fatalf("at 100/s the largest lease is %d, want about 10", st.LargestLease)
	}
	got := drive(base, 150*time.Millisecond, 10000, l)
	st := l.Stats()
	// τ = 100 ms at 10000/s: 1000 permits.
	if st.LargestLease < 900 || st.LargestLease > 2100 {
		t.Fatalf("150 ms after demand rose to 10000/s the largest lease is %d, want about 1000: %+v", st.LargestLease, st)
	}
	if got[0] != 1500 {
		t.Fatalf("admitted %d of 1500 with a rate of 1e6/s", got[0])
	}
	_ = l.Close(context.Background())
}
