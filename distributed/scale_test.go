package distributed

import (
	"container/heap"
	"context"
	"flag"
	"fmt"
	"math/rand/v2"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/smoothrate/ratelimit/clocktest"
	"github.com/smoothrate/ratelimit/internal/redistest"
)

// fleetSim lists the fleet sizes TestFleetAtScale simulates:
//
//	go test ./distributed -run TestFleetAtScale -fleetsim 10000,100000 -v
//
// Without it the test simulates 1 000 processes, which takes a few seconds.
var fleetSim = flag.String("fleetsim", "1000", "TestFleetAtScale: comma-separated fleet sizes")

// attempt is one process's next TryAcquire, in simulated time.
type attempt struct {
	at   time.Duration
	proc int
}

type attempts []attempt

func (a attempts) Len() int           { return len(a) }
func (a attempts) Less(i, j int) bool { return a[i].at < a[j].at }
func (a attempts) Swap(i, j int)      { a[i], a[j] = a[j], a[i] }
func (a *attempts) Push(x any)        { *a = append(*a, x.(attempt)) }
func (a *attempts) Pop() any {
	old := *a
	x := old[len(old)-1]
	*a = old[:len(old)-1]
	return x
}

// TestFleetAtScale simulates N processes on one name against a real
// redis-server, in simulated time (every Redis call is real; the script
// runs at the fake time), each calling TryAcquire(1, 0) at 2 permits/s with
// a random phase, at a fleet rate of N permits/s (the per-process load of
// the fleet benchmark at N = 1 024 and R = 1 000/s). It checks the bound
// admitted(0, T] ≤ R·T + B + largest lease, the utilization after the
// first second, and reports the lease scripts per simulated second and
// the server's µs per script, so that the Redis time per real second a
// fleet that size needs can be read off: scripts/s × µs.
func TestFleetAtScale(t *testing.T) {
	t.Parallel()
	var sizes []int
	for _, f := range strings.Split(*fleetSim, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || n < 1 {
			t.Fatalf("-fleetsim %q: %v", *fleetSim, err)
		}
		sizes = append(sizes, n)
	}
	srv := redistest.Start(t)
	c := newClient(t, srv)
	for _, n := range sizes {
		base := clocktest.NewFake()
		rate := float64(n)
		lims := make([]*Limiter, n)
		for i := range lims {
			l, err := New(c, fmt.Sprint("scale", n), rate, withSim(base), WithLocalClock(base), WithProcessID(fmt.Sprint("p", i)))
			if err != nil {
				t.Fatal(err)
			}
			lims[i] = l
		}
		const perProcess = 2.0
		interval := time.Duration(float64(time.Second) / perProcess)
		rng := rand.New(rand.NewPCG(uint64(n), 1))
		q := make(attempts, n)
		for i := range q {
			q[i] = attempt{at: time.Duration(rng.Int64N(int64(interval))), proc: i}
		}
		heap.Init(&q)
		duration := 4 * time.Second
		from := time.Second // utilization is measured from here
		srv.CLI("CONFIG", "RESETSTAT")
		start := time.Now()
		var total, late int64
		var worst float64
		for q[0].at < duration {
			a := heap.Pop(&q).(attempt)
			base.Jump(a.at - base.Elapsed())
			if lims[a.proc].TryAcquire(1, 0) {
				total++
				if a.at >= from {
					late++
				}
				worst = max(worst, float64(total)-rate*a.at.Seconds())
			}
			heap.Push(&q, attempt{at: a.at + interval, proc: a.proc})
		}
		real := time.Since(start)
		var scripts, largest, errs int64
		for _, l := range lims {
			st := l.Stats()
			scripts += st.RedisCalls
			largest = max(largest, st.LargestLease)
			errs += st.RedisErrors
		}
		stats := commandStats(srv)
		calls := stats["evalsha"].calls + stats["eval"].calls
		usec := stats["evalsha"].usec + stats["eval"].usec
		perSec := float64(scripts) / duration.Seconds()
		us := float64(usec) / float64(max(calls, 1))
		u := float64(late) / (rate * (duration - from).Seconds())
		bound := rate*1 + float64(largest) // B = 1 s of the rate
		t.Logf("N = %d, R = %v/s: utilization %.3f after the first second, worst admitted(0,T] − R·T %.1f (bound B + largest lease %.0f), %.0f lease scripts per simulated second (%.2f per process), %.1f µs per script on the server: %.2f s of Redis time per second of a real fleet; %v of real time",
			n, rate, u, worst, bound, perSec, perSec/float64(n), us, perSec*us/1e6, real.Round(time.Millisecond))
		if errs != 0 {
			t.Errorf("N = %d: %d Redis errors", n, errs)
		}
		if worst > bound {
			t.Errorf("N = %d: admitted(0,T] exceeded R·T + B + largest lease by %.1f", n, worst-bound)
		}
		if u < 0.97 || u > 1.03 {
			t.Errorf("N = %d: utilization %.3f, want within [0.97, 1.03]", n, u)
		}
		for _, l := range lims {
			if err := l.Close(context.Background()); err != nil {
				t.Fatal(err)
			}
		}
	}
}
