package ratelimit_test

// A concurrency test meant for -race: 64 goroutines share one limiter and
// call TryAcquire, Acquire and Reserve (sometimes cancelling) at once, on a
// clocktest.Manual clock that the test moves forward whenever a goroutine is
// asleep. Besides the race detector's verdict, the test checks the
// limiter's promise: however the calls interleave, the permits admitted by
// time T are at most R·T + maxPermits + the largest single request (see
// admissionBound in fuzz_test.go for the argument).

import (
	"context"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/smoothrate/ratelimit"
	"github.com/smoothrate/ratelimit/clocktest"
)

func TestRaceManyGoroutinesRespectTheRate(t *testing.T) {
	const (
		rate       = 100.0 // permits per second
		burst      = 1.0   // seconds of stored permits
		goroutines = 64
		opsEach    = 40
		maxPermits = 4 // largest single request
	)
	seed := uint64(time.Now().UnixNano())
	t.Logf("seed %d", seed)

	cases := []struct {
		name    string
		make    func(ratelimit.Clock) (*ratelimit.Limiter, error)
		setRate bool    // a 65th goroutine toggles the rate between rate and rate/2
		stored  float64 // maxPermits of the kind, for the bound
	}{
		{"bursty full", func(c ratelimit.Clock) (*ratelimit.Limiter, error) {
			return ratelimit.NewBursty(rate, ratelimit.WithClock(c), ratelimit.WithMaxBurstSeconds(burst), ratelimit.WithInitiallyFull())
		}, false, rate * burst},
		{"bursty full with SetRate", func(c ratelimit.Clock) (*ratelimit.Limiter, error) {
			return ratelimit.NewBursty(rate, ratelimit.WithClock(c), ratelimit.WithMaxBurstSeconds(burst), ratelimit.WithInitiallyFull())
		}, true, rate * burst},
		{"bursty Guava mode", func(c ratelimit.Clock) (*ratelimit.Limiter, error) {
			return ratelimit.NewBursty(rate, ratelimit.WithClock(c), ratelimit.WithResolution(time.Microsecond))
		}, false, rate * 1.0},
		{"warming-up", func(c ratelimit.Clock) (*ratelimit.Limiter, error) {
			return ratelimit.NewWarmingUp(rate, 500*time.Millisecond, ratelimit.WithClock(c))
		}, true, 0}, // a warming-up limiter's stored permits are never free
	}
	for ci, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
			defer cancel()
			clock := clocktest.NewManual()
			lim, err := tc.make(clock)
			if err != nil {
				t.Fatal(err)
			}

			var (
				admitted atomic.Int64 // permits taken and kept
				requests atomic.Int64 // bookings made, for the rounding slack
				wg       sync.WaitGroup
			)
			worker := func(id int) {
				rng := rand.New(rand.NewPCG(seed, uint64(ci*1000+id)))
				for range opsEach {
					k := 1 + rng.IntN(maxPermits)
					switch rng.IntN(4) {
					case 0: // TryAcquire, sleeping on the clock if granted with a wait
						timeout := time.Duration(rng.IntN(300)) * time.Millisecond
						if lim.TryAcquire(k, timeout) {
							admitted.Add(int64(k))
							requests.Add(1)
						}
					case 1: // Acquire
						w, err := lim.Acquire(ctx, k)
						if err != nil {
							t.Errorf("Acquire(%d) = %v", k, err)
							return
						}
						if w < 0 {
							t.Errorf("Acquire(%d) waited %v < 0", k, w)
						}
						admitted.Add(int64(k))
						requests.Add(1)
					default: // Reserve; half the time try to give it back
						r := lim.Reserve(k)
						if !r.OK() || r.Delay() < 0 {
							t.Errorf("Reserve(%d) = ok %v, delay %v", k, r.OK(), r.Delay())
							return
						}
						requests.Add(1)
						if rng.IntN(2) == 0 && r.Cancel() {
							continue // given back: not admitted
						}
						// Kept: the permits are used after the delay, so
						// their start is no later than the final clock.
						if err := clock.Sleep(ctx, r.Delay()); err != nil {
							t.Errorf("sleeping a reservation's delay: %v", err)
							return
						}
						admitted.Add(int64(k))
					}
				}
			}
			for id := range goroutines {
				wg.Go(func() { worker(id) })
			}
			ratesCtx, stopRates := context.WithCancel(ctx)
			defer stopRates()
			var rates sync.WaitGroup
			if tc.setRate {
				rates.Go(func() {
					for i := 0; ratesCtx.Err() == nil; i++ {
						r := rate
						if i%2 == 0 {
							r = rate / 2
						}
						if err := lim.SetRate(r); err != nil {
							t.Errorf("SetRate(%v) = %v", r, err)
							return
						}
						// Change the rate at most once per 10ms of clock
						// time, so that the workers get some work done.
						if clock.Sleep(ratesCtx, 10*time.Millisecond) != nil {
							return // the workers are done
						}
					}
				})
			}

			// The test's side: whenever someone is asleep, move the clock to
			// the earliest wake-up. Workers keep running meanwhile, so calls
			// interleave with clock moves in every possible way. The loop
			// ends when all workers are done (driving stops) or at the
			// safety deadline (a failure).
			workersDone := make(chan struct{})
			go func() { wg.Wait(); close(workersDone) }()
			driving, stopDriving := context.WithCancel(ctx)
			go func() {
				select {
				case <-workersDone:
				case <-ctx.Done():
				}
				stopDriving()
			}()
			for driving.Err() == nil {
				if err := clock.BlockUntilSleepers(driving, 1); err != nil {
					break
				}
				clock.AdvanceToNext()
			}
			if ctx.Err() != nil {
				t.Fatalf("the workers did not finish: %v (admitted %d so far)", ctx.Err(), admitted.Load())
			}
			stopRates() // the rate changer's sleep ends with its context
			rates.Wait()

			T := clock.Elapsed()
			n := requests.Load()
			// R·T + stored + largest request, plus the engine's rounding of
			// each booking down to a whole tick (at most 3 ticks a booking,
			// each worth R·tick permits).
			tick := time.Nanosecond
			if tc.name == "bursty Guava mode" {
				tick = time.Microsecond
			}
			bound := rate*T.Seconds() + tc.stored + maxPermits + float64(3*n)*rate*tick.Seconds()
			got := admitted.Load()
			t.Logf("admitted %d permits in %v of clock time over %d bookings; bound %.3f", got, T, n, bound)
			if float64(got) > bound {
				t.Fatalf("admitted %d permits in %v at %v/s, more than the bound %.3f", got, T, rate, bound)
			}
			if T <= 0 || got == 0 {
				t.Fatalf("nothing happened: T %v, admitted %d", T, got)
			}
		})
	}
}
