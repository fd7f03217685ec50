package distributed

import (
	"context"
	"fmt"
	"math"
	"testing"
	"time"

	"github.com/smoothrate/ratelimit/clocktest"
	"github.com/smoothrate/ratelimit/internal/redistest"
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
}

func runSim(t *testing.T, srv *redistest.Server, sc simConfig) simResult {
	t.Helper()
	base := clocktest.NewFake()
	n := len(sc.demands)
	lims := make([]*Limiter, n)
	for i := range lims {
		opts := append([]Option{
			withSim(base),
			WithClock(skewed{base, sc.skews[i%len(sc.skews)]}),
			WithProcessID(fmt.Sprintf("p%d", i)),
		}, sc.opts...)
		l, err := New(newClient(t, srv), sc.name, sc.rate, opts...)
		if err != nil {
			t.Fatal(err)
		}
		lims[i] = l
	}
	res := simResult{admitted: make([]int64, n), calls: make([]int64, n), callsLate: make([]int64, n)}
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
	if u := float64(r.total) / (rate * (secs - sc.step.Seconds())); u < 0.97 {
		t.Errorf("utilization %.4f < 0.97", u)
	}
	if j := jain(r.admitted); j < 0.95 {
		t.Errorf("Jain fairness %.4f < 0.95 (admitted %v)", j, r.admitted)
	}
	for i, c := range r.callsLate {
		if perSec := float64(c) / (secs / 2); perSec > 20 {
			t.Errorf("process %d made %.1f Redis calls/s at steady state", i, perSec)
		}
	}
}
