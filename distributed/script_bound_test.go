package distributed

import (
	"context"
	"fmt"
	"math/rand/v2"
	"sort"
	"testing"

	"github.com/smoothrate/ratelimit/internal/redistest"
)

// TestScriptBoundWithRefunds drives lease.lua directly, at explicit times,
// with several processes asking for random leases (random sizes, needs and
// maximum waits) and refunding random parts of what they were granted. If
// every permit is spent at the moment its lease becomes usable, then for
// every T the permits spent by T must stay within R·T + B + the largest
// lease, and so must the permits usable in any window W: R·W + B + the
// largest lease. This is the debit-before-spend invariant, refunds
// included.
func TestScriptBoundWithRefunds(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	c := newClient(t, srv)
	const (
		rate  = 200.0
		burst = 1.5
		B     = rate * burst
	)
	type grant struct {
		proc   int
		moment int64 // µs since start
		n      int64
	}
	for seed := uint64(1); seed <= 3; seed++ {
		rng := rand.New(rand.NewPCG(seed, 7))
		name := fmt.Sprintf("bound%d", seed)
		keys := keysOf(name)
		base := func(op string, now int64, pid int) []any {
			return []any{op, redisEpoch + now, "b", f64(rate), f64(burst), 0, "3", 1,
				fmt.Sprintf("p%d", pid), 1_000_000, 3_000_000}
		}
		run := func(args []any) reply {
			t.Helper()
			v, err := leaseScript.Run(context.Background(), c, keys, args...).Slice()
			if err != nil {
				t.Fatalf("script %v: %v", args, err)
			}
			r, err := parseReply(v)
			if err != nil {
				t.Fatal(err)
			}
			return r
		}
		var grants []*grant
		var largest, incarnation, refunded int64
		now := int64(0)
		for step := 0; step < 1500; step++ {
			now += int64(rng.IntN(10_000))
			if rng.IntN(60) == 0 {
				now += 3_000_000 // idle: the bucket fills
			}
			pid := rng.IntN(4)
			if rng.IntN(5) == 0 {
				// Refund part of one of this process's grants that is
				// not usable yet (so not spent).
				var pending []*grant
				for _, g := range grants {
					if g.proc == pid && g.moment > now && g.n > 0 {
						pending = append(pending, g)
					}
				}
				if len(pending) > 0 {
					g := pending[rng.IntN(len(pending))]
					k := 1 + rng.Int64N(g.n)
					args := append(base("refund", now, pid), k, 1, "0", incarnation)
					r := run(args)
					if r.granted > k {
						t.Fatalf("refunded %d of %d", r.granted, k)
					}
					refunded += r.granted
					g.n -= k // the permits are gone either way
				}
				continue
			}
			need := int64(rng.IntN(3))
			if rng.IntN(50) == 0 {
				need = 1 + rng.Int64N(400)
			}
			want := 1 + rng.Int64N(60)
			maxWait := rng.Int64N(1_200_000)
			args := append(base("lease", now, pid), need, want, maxWait, f64(rng.Float64()*300), 100_000)
			r := run(args)
			incarnation = r.incarnation
			if r.granted > 0 {
				largest = max(largest, r.granted)
				grants = append(grants, &grant{proc: pid, moment: now + r.wait.Microseconds(), n: r.granted})
				if r.wait.Microseconds() > maxWait {
					t.Fatalf("granted with wait %v beyond the maximum %d µs", r.wait, maxWait)
				}
			}
		}
		sort.Slice(grants, func(i, j int) bool { return grants[i].moment < grants[j].moment })
		// For every window [m_i, m_j] between two lease moments, the
		// permits usable in it must stay within R·(m_j − m_i) + B +
		// largest lease (which also covers every [0, T]), plus what the
		// engine's truncation of each price to whole µs gives away: under
		// 1 µs × R per lease. Exact integer arithmetic in µs·permits/s:
		// spent(i..j)·1e6 − R·(m_j − m_i) = S_j − S'_i with
		// S_j = P_j·1e6 − R·m_j and S'_i = P_{i−1}·1e6 − R·m_i.
		const r = int64(rate)
		limit := int64(B+float64(largest))*1_000_000 + r*int64(len(grants))
		var prefix, lowest, worst int64
		for j, g := range grants {
			before := prefix*1_000_000 - r*g.moment
			if j == 0 || before < lowest {
				lowest = before
			}
			prefix += g.n
			excess := prefix*1_000_000 - r*g.moment - lowest
			worst = max(worst, excess)
			if excess > limit {
				t.Fatalf("seed %d: a window ending at %d µs admits %.6f permits over R·W, more than B + largest lease + truncation = %.6f",
					seed, g.moment, float64(excess)/1e6, float64(limit)/1e6)
			}
		}
		t.Logf("seed %d: %d grants, largest %d, %d permits refunded, worst excess over R·W %.6f (bound %.6f)", seed, len(grants), largest, refunded, float64(worst)/1e6, float64(limit)/1e6)
		if refunded == 0 {
			t.Fatalf("seed %d: no refund took effect", seed)
		}
	}
}

// TestRefundNeverBeforeNow: a refund rolls nextFreeTicket back by the
// permits' price, but never before the present: time that has passed is
// not given back.
func TestRefundNeverBeforeNow(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	c := newClient(t, srv)
	keys := keysOf("rb")
	args := func(op string, now int64) []any {
		return []any{op, redisEpoch + now, "b", "100", "0", 0, "3", 1, "p", 1_000_000, 3_000_000}
	}
	v, err := leaseScript.Run(context.Background(), c, keys, append(args("lease", 0), 10, 10, 0, "100", 100_000)...).Slice()
	if err != nil {
		t.Fatal(err)
	}
	r, err := parseReply(v)
	if err != nil || r.granted != 10 || r.wait != 0 {
		t.Fatalf("lease: %+v %v", r, err)
	}
	// At 50 ms the debt is 50 ms; refunding 10 permits (100 ms) may only
	// take it back to now.
	v, err = leaseScript.Run(context.Background(), c, keys, append(args("refund", 50_000), 10, 1, "0", r.incarnation)...).Slice()
	if err != nil {
		t.Fatal(err)
	}
	rr, _ := parseReply(v)
	if got := stateField(t, c, "rb", "next"); got != redisEpoch+50_000 {
		t.Fatalf("next after the refund: %v, want now (%v)", got, int64(redisEpoch+50_000))
	}
	if rr.granted != 5 {
		t.Fatalf("refund reported %d permits given back, want the 5 still unpaid", rr.granted)
	}
}
