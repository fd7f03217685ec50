package distributed

import (
	"context"
	"fmt"
	"math"
	"testing"
	"time"

	"github.com/smoothrate/ratelimit/clocktest"
	"github.com/smoothrate/ratelimit/internal/redistest"
	"github.com/smoothrate/ratelimit/smooth"
)

// simConfig describes a deterministic fleet simulation: every process has
// its own Redis connection and its own skewed local clock over one shared
// fake time, the script runs at that time (the Redis clock), and each
// process calls TryAcquire(1, 0) at its own steady demand.
type simConfig struct {
	name     string
	rate     float64
	demands  []float64 // permits/s per process
	skews    []time.Duration
	duration time.Duration
	step     time.Duration
	opts     []Option
	// burst is B in the bound: the global stored-permit capacity.
	burst float64
	// idleFirst: the first process creates the shared state, then the
	// fleet stays idle this long (filling the bucket) before the run.
	idleFirst time.Duration
}

type simResult struct {
	admitted     []int64 // per process
	calls        []int64 // Redis calls per process
	callsLate    []int64 // Redis calls per process in the second half
	largestLease int64
	// worst is the largest admitted(0,T) - R·T seen over all T.
	worst float64
	total int64
	// cum[k] is the fleet's admitted(0, k·step]; per[i][k] the same for
	// process i.
	cum []int64
	per [][]int64
}

func runSim(t *testing.T, srv *redistest.Server, sc simConfig) simResult {
	t.Helper()
	base := clocktest.NewFake()
	n := len(sc.demands)
	lims := make([]*Limiter, n)
	for i := range lims {
		opts := append([]Option{
			withSim(base),
			WithLocalClock(skewed{base, sc.skews[i%len(sc.skews)]}),
			WithProcessID(fmt.Sprintf("p%d", i)),
		}, sc.opts...)
		l, err := New(newClient(t, srv), sc.name, sc.rate, opts...)
		if err != nil {
			t.Fatal(err)
		}
		lims[i] = l
	}
	res := simResult{admitted: make([]int64, n), calls: make([]int64, n), callsLate: make([]int64, n), per: make([][]int64, n)}
	if sc.idleFirst > 0 {
		// One permit creates the state; it counts as admitted at T=0.
		if !lims[0].TryAcquire(1, 0) {
			t.Fatal("the first permit of an idle fleet was refused")
		}
		res.admitted[0], res.total = 1, 1
		base.Jump(sc.idleFirst)
	}
	steps := int(sc.duration / sc.step)
	halfCalls := make([]int64, n)
	for k := 0; k < steps; k++ {
		tNow := time.Duration(k) * sc.step
		for i, l := range lims {
			// Attempts due in (tNow-step, tNow] at demand d.
			d := sc.demands[i]
			due := int64(math.Floor(d*tNow.Seconds())) - int64(math.Floor(d*(tNow-sc.step).Seconds()))
			if k == 0 {
				due = 0
			}
			for ; due > 0; due-- {
				if l.TryAcquire(1, 0) {
					res.admitted[i]++
					res.total++
				}
			}
		}
		// admitted(0, T] for T = now must stay within R·T + B + lease.
		res.worst = max(res.worst, float64(res.total)-sc.rate*tNow.Seconds())
		res.cum = append(res.cum, res.total)
		for i := range lims {
			res.per[i] = append(res.per[i], res.admitted[i])
		}
		if k == steps/2 {
			for i, l := range lims {
				halfCalls[i] = l.Stats().RedisCalls
			}
		}
		base.Jump(sc.step)
	}
	for i, l := range lims {
		st := l.Stats()
		res.calls[i] = st.RedisCalls
		res.callsLate[i] = st.RedisCalls - halfCalls[i]
		res.largestLease = max(res.largestLease, st.LargestLease)
		t.Logf("process %d: leases %d empty %d refunds %d lapsed %d local %d remote %d", i, st.Leases, st.EmptyReplies, st.Refunds, st.PermitsLapsed, st.LocalDecisions, st.RemoteDecisions)
		if st.RedisErrors != 0 {
			t.Errorf("process %d: %d Redis errors, the last: %v", i, st.RedisErrors, st.LastError)
		}
		if err := l.Close(context.Background()); err != nil {
			t.Fatal(err)
		}
	}
	return res
}

func jain(x []int64) float64 {
	var s, s2 float64
	for _, v := range x {
		s += float64(v)
		s2 += float64(v) * float64(v)
	}
	return s * s / (float64(len(x)) * s2)
}

// TestFleetBoundUtilizationFairness runs four processes with clocks skewed
// by up to ±10 s against one limiter at twice its rate, in simulated time,
// and checks the long-run bound exactly, the utilization, Jain's fairness
// index and the Redis calls per process per second.
func TestFleetBoundUtilizationFairness(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	const rate = 1000.0
	sc := simConfig{
		name:     "fleet",
		rate:     rate,
		demands:  []float64{500, 500, 500, 500},
		skews:    []time.Duration{-10 * time.Second, -3 * time.Second, 4 * time.Second, 10 * time.Second},
		duration: 10 * time.Second,
		step:     time.Millisecond,
		burst:    rate, // 1 s of burst
		// Start with a full bucket, so that the bound is tight.
		idleFirst: 2 * time.Second,
	}
	r := runSim(t, srv, sc)
	secs := sc.duration.Seconds()
	bound := sc.burst + float64(r.largestLease)
	t.Logf("admitted %v total %d, worst excess %.0f (bound %.0f), largest lease %d, calls %v (late half %v)",
		r.admitted, r.total, r.worst, bound, r.largestLease, r.calls, r.callsLate)
	if r.worst < sc.burst/2 {
		t.Errorf("the full bucket was not used: worst excess %.0f", r.worst)
	}
	if r.worst > bound {
		t.Errorf("admitted(0,T) exceeded R·T + B + largest lease by %.0f", r.worst-bound)
	}
	// Utilization over the second half, once the burst is spent.
	half := len(r.cum) / 2
	late := float64(r.cum[len(r.cum)-1] - r.cum[half])
	u, j := late/(rate*secs/2), jain(r.admitted)
	t.Logf("utilization in the second half %.4f, Jain index %.5f", u, j)
	if u < 0.97 {
		t.Errorf("utilization in the second half %.4f < 0.97", u)
	}
	if j < 0.95 {
		t.Errorf("Jain fairness %.4f < 0.95 (admitted %v)", j, r.admitted)
	}
	for i, c := range r.callsLate {
		if perSec := float64(c) / (secs / 2); perSec > 20 {
			t.Errorf("process %d made %.1f Redis calls/s at steady state", i, perSec)
		}
	}
}

// TestFleetMaxMinFairness gives one process a small demand and three a
// large one: the small one must get all it asks for, the others an equal
// split of the rest.
func TestFleetMaxMinFairness(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	const rate = 1000.0
	sc := simConfig{
		name:     "maxmin",
		rate:     rate,
		demands:  []float64{100, 900, 900, 900},
		skews:    []time.Duration{0, 7 * time.Second, -7 * time.Second},
		duration: 8 * time.Second,
		step:     time.Millisecond,
		burst:    rate,
	}
	r := runSim(t, srv, sc)
	// Measure the last 4 s (demand estimates settle within a second).
	from := len(r.cum) / 2
	secs := sc.duration.Seconds() / 2
	got := make([]float64, len(sc.demands))
	for i := range got {
		got[i] = float64(r.per[i][len(r.per[i])-1]-r.per[i][from]) / secs
	}
	t.Logf("per-process rates %v", got)
	if got[0] < 0.97*100 {
		t.Errorf("the small process got %.1f/s of the 100/s it asked for", got[0])
	}
	for i := 1; i < 4; i++ {
		if got[i] < 0.95*300 || got[i] > 1.05*300 {
			t.Errorf("process %d got %.1f/s, want about 300/s (an equal split of the remaining 900)", i, got[i])
		}
	}
	if total := got[0] + got[1] + got[2] + got[3]; total < 0.97*rate {
		t.Errorf("fleet rate %.1f/s < 97%% of %v", total, rate)
	}
}

// TestFleetSharesOneWarmUp checks that a cold fleet warms up together, as
// one SmoothWarmingUp would: the fleet's cumulative admissions follow those
// of a single Go engine (microsecond mode) serving the same total demand,
// within one lease per process.
func TestFleetSharesOneWarmUp(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	const rate = 400.0
	warm := 2 * time.Second
	sc := simConfig{
		name:     "warm",
		rate:     rate,
		demands:  []float64{400, 400, 400},
		skews:    []time.Duration{0, 10 * time.Second, -10 * time.Second},
		duration: 5 * time.Second,
		step:     time.Millisecond,
		opts:     []Option{WithWarmup(warm), WithColdFactor(3)},
	}
	r := runSim(t, srv, sc)
	// The reference: one engine serving an unlimited demand one permit
	// at a time, each at the exact moment the engine allows it. refAt(T)
	// is the number of permits it admits by T.
	e := smooth.NewWarmingUp(smooth.Microsecond, warm.Microseconds(), 3, rate, 0)
	var moments []int64
	for t0 := int64(0); t0 <= sc.duration.Microseconds(); t0 = e.NextFreeTicket() {
		m, _ := e.Reserve(1, t0)
		moments = append(moments, m)
	}
	// Each process may hold two leases (one in use, one prefetched),
	// priced as single reservations.
	slack := 2 * float64(len(sc.demands)) * float64(r.largestLease)
	var ref int64
	for k := range r.cum {
		now := int64(k) * sc.step.Microseconds()
		for int(ref) < len(moments) && moments[ref] <= now {
			ref++
		}
		got := float64(r.cum[k])
		if k%250 == 0 {
			t.Logf("at %v fleet %v engine %d", time.Duration(k)*sc.step, got, ref)
		}
		if got > float64(ref)+slack+1 {
			t.Fatalf("at %v the fleet admitted %v, the engine %d (+%v slack)", time.Duration(k)*sc.step, got, ref, slack)
		}
		if k*int(sc.step) >= int(time.Second) && got < 0.9*float64(ref)-slack {
			t.Fatalf("at %v the fleet admitted only %v, the engine %d", time.Duration(k)*sc.step, got, ref)
		}
	}
	// Cold start: the first second admits clearly less than the rate.
	first := r.cum[int(time.Second/sc.step)]
	if float64(first) > 0.75*rate {
		t.Errorf("a cold fleet admitted %d permits in its first second (rate %v)", first, rate)
	}
	t.Logf("fleet %d, engine %d, first second %d, largest lease %d", r.total, ref, first, r.largestLease)
}
