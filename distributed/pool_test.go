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
	t.Parallel()
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
	t.Parallel()
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

// TestReportedDemand: the demand a process reports to the fair-share
// registry follows a drop within reportWindow (the 1 s average alone kept
// a freed share from the others for seconds), and stays the smooth average
// while the samples are lumpy (a faster average passed that noise on to
// the others' shares).
func TestReportedDemand(t *testing.T) {
	t.Parallel()
	l := &Limiter{cfg: config{leaseDuration: 100 * time.Millisecond}}
	var now time.Duration
	// 120/s for 3 s, one request every 1/120 s.
	for ; now < 3*time.Second; now += time.Second / 120 {
		l.noteDemand(1, now)
	}
	if math.Abs(l.reported-120) > 2 {
		t.Fatalf("steady 120/s reported as %.1f", l.reported)
	}
	// Down to 20/s: within reportWindow and a sample the report is the
	// new demand, while the 1 s average is still far above it.
	drop := now
	for ; now < drop+reportWindow+100*time.Millisecond; now += time.Second / 20 {
		l.noteDemand(1, now)
	}
	if math.Abs(l.reported-20) > 1 || l.demand < 40 {
		t.Fatalf("%v after a drop to 20/s: reported %.1f (1 s average %.1f), want 20", now-drop, l.reported, l.demand)
	}
	// Lumpy: 100/s on average, arriving as 20 requests every 200 ms. The
	// 50 ms samples are 0 or 400/s; the report stays the average.
	for end := now + 5*time.Second; now < end; now += 200 * time.Millisecond {
		l.noteDemand(20, now)
		for k := 1; k <= 3; k++ {
			l.noteDemand(0, now+time.Duration(k)*50*time.Millisecond)
		}
		if now > end-3*time.Second && l.reported != l.demand {
			t.Fatalf("lumpy demand: reported %.1f, the 1 s average %.1f", l.reported, l.demand)
		}
	}
	if math.Abs(l.reported-100) > 15 {
		t.Fatalf("lumpy 100/s reported as %.1f", l.reported)
	}
}
