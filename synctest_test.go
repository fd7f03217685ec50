package ratelimit_test

// These tests use the default clock (no WithClock): inside a testing/synctest
// bubble the time package runs on the bubble's fake time, which advances
// only when every goroutine in the bubble is durably blocked. A limiter's
// real timers are therefore tested without injection and without real
// waiting, and every duration below is exact to the nanosecond.

import (
	"context"
	"errors"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/smoothrate/ratelimit"
	"github.com/smoothrate/ratelimit/clocktest"
)

func stBursty(t *testing.T, rate float64, opts ...ratelimit.Option) *ratelimit.Limiter {
	t.Helper()
	lim, err := ratelimit.NewBursty(rate, opts...)
	if err != nil {
		t.Fatal(err)
	}
	return lim
}

// TestSynctestAcquireCancelledMidSleep: an Acquire asleep on its timer is
// cancelled through its context. It must return the context's error, and
// give its permits back: the limiter's state must be exactly that of a twin
// limiter that never saw the cancelled call, and the next Acquire must wait
// only for the first request's debt.
func TestSynctestAcquireCancelledMidSleep(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx := context.Background()
		lim := stBursty(t, 1)  // one permit per second
		twin := stBursty(t, 1) // the same history, minus the cancelled call
		for _, l := range []*ratelimit.Limiter{lim, twin} {
			if w, err := l.Acquire(ctx, 1); err != nil || w != 0 {
				t.Fatalf("first Acquire = %v, %v; want 0, nil (free)", w, err)
			}
		}
		// The first request booked 1s; a request for 5 permits must
		// sleep that 1s and would push the next request 5s further.
		cctx, cancel := context.WithCancel(ctx)
		type result struct {
			wait time.Duration
			err  error
		}
		done := make(chan result, 1)
		go func() {
			w, err := lim.Acquire(cctx, 5)
			done <- result{w, err}
		}()
		synctest.Wait() // the goroutine is asleep on its timer
		if s := lim.Snapshot(); s.NextFree != 6*time.Second {
			t.Fatalf("while the 5-permit request sleeps, NextFree = %v, want 6s", s.NextFree)
		}

		time.Sleep(300 * time.Millisecond) // bubble time: mid-sleep
		cancel()
		synctest.Wait()
		r := <-done
		if !errors.Is(r.err, context.Canceled) || r.wait != 0 {
			t.Fatalf("cancelled Acquire = %v, %v; want 0, context.Canceled", r.wait, r.err)
		}

		got, want := lim.Snapshot(), twin.Snapshot()
		if got != want {
			t.Fatalf("after the cancellation the limiter is\n%+v\nwant (as if the call never happened)\n%+v", got, want)
		}
		if got.NextFree != 700*time.Millisecond {
			t.Fatalf("NextFree = %v, want 700ms (1s booked by the first request, 300ms gone)", got.NextFree)
		}

		start := time.Now()
		w, err := lim.Acquire(ctx, 1)
		if err != nil || w != 700*time.Millisecond {
			t.Fatalf("next Acquire = %v, %v; want 700ms, nil", w, err)
		}
		if el := time.Since(start); el != 700*time.Millisecond {
			t.Fatalf("next Acquire took %v of bubble time, want 700ms", el)
		}
	})
}

// TestSynctestAcquireDeadlineTooShort: a deadline that the wait cannot meet
// fails at once, with an error wrapping context.DeadlineExceeded, and
// reserves nothing.
func TestSynctestAcquireDeadlineTooShort(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx := context.Background()
		lim := stBursty(t, 1)
		if _, err := lim.Acquire(ctx, 1); err != nil {
			t.Fatal(err)
		}
		before := lim.Snapshot()

		dctx, cancel := context.WithTimeout(ctx, 999*time.Millisecond)
		defer cancel()
		start := time.Now()
		w, err := lim.Acquire(dctx, 1)
		if !errors.Is(err, context.DeadlineExceeded) || w != 0 {
			t.Fatalf("Acquire with 999ms left for a 1s wait = %v, %v; want 0 and an error wrapping DeadlineExceeded", w, err)
		}
		if el := time.Since(start); el != 0 {
			t.Fatalf("the refusal took %v of bubble time, want 0 (immediate)", el)
		}
		if dctx.Err() != nil {
			t.Fatalf("the context itself ended (%v): the refusal must come before the deadline", dctx.Err())
		}
		if after := lim.Snapshot(); after != before {
			t.Fatalf("the refused Acquire changed the limiter:\nbefore %+v\nafter  %+v", before, after)
		}

		// A deadline that can be met is honoured, to the nanosecond.
		ok, cancelOK := context.WithTimeout(ctx, time.Second)
		defer cancelOK()
		if w, err := lim.Acquire(ok, 1); err != nil || w != time.Second {
			t.Fatalf("Acquire with exactly 1s left for a 1s wait = %v, %v; want 1s, nil", w, err)
		}
		if el := time.Since(start); el != time.Second {
			t.Fatalf("it took %v of bubble time, want 1s", el)
		}
	})
}

// TestSynctestAcquireScheduleTakesExactTime: N sequential Acquires at 5/s
// take (N-1) × 200ms of bubble time; the same N spread over N goroutines
// take the same total, each goroutine getting its own 200ms slot.
func TestSynctestAcquireScheduleTakesExactTime(t *testing.T) {
	const n = 11
	t.Run("sequential", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			lim := stBursty(t, 5)
			start := time.Now()
			var total time.Duration
			for i := range n {
				w, err := lim.Acquire(context.Background(), 1)
				if err != nil {
					t.Fatal(err)
				}
				if want := min(time.Duration(i), 1) * 200 * time.Millisecond; w != want {
					t.Fatalf("Acquire %d waited %v, want %v", i, w, want)
				}
				total += w
			}
			if el := time.Since(start); el != (n-1)*200*time.Millisecond || el != total {
				t.Fatalf("%d Acquires took %v of bubble time (sum of waits %v), want %v", n, el, total, (n-1)*200*time.Millisecond)
			}
		})
	})
	t.Run("concurrent", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			lim := stBursty(t, 5)
			start := time.Now()
			var (
				mu    sync.Mutex
				waits = make(map[time.Duration]int)
				wg    sync.WaitGroup
			)
			for range n {
				wg.Go(func() {
					w, err := lim.Acquire(context.Background(), 1)
					if err != nil {
						t.Error(err)
					}
					if end := time.Since(start); end != w {
						t.Errorf("an Acquire that waited %v returned at %v", w, end)
					}
					mu.Lock()
					waits[w]++
					mu.Unlock()
				})
			}
			wg.Wait()
			if el := time.Since(start); el != (n-1)*200*time.Millisecond {
				t.Fatalf("%d concurrent Acquires took %v of bubble time, want %v", n, el, (n-1)*200*time.Millisecond)
			}
			// Every slot 0, 200ms, …, 2s is taken exactly once.
			for i := range n {
				if c := waits[time.Duration(i)*200*time.Millisecond]; c != 1 {
					t.Fatalf("slot %v was handed out %d times, want once (all waits: %v)", time.Duration(i)*200*time.Millisecond, c, waits)
				}
			}
		})
	})
	// A warming-up limiter's schedule (uneven waits) must take exactly as
	// long on the bubble's real timers as the waits a Fake clock records
	// for the same calls.
	t.Run("warming-up matches Fake", func(t *testing.T) {
		const rate, warmup = 2.0, 4 * time.Second
		fake := clocktest.NewFake()
		ref, err := ratelimit.NewWarmingUp(rate, warmup, ratelimit.WithClock(fake))
		if err != nil {
			t.Fatal(err)
		}
		var want []time.Duration
		for range n {
			w, err := ref.Acquire(context.Background(), 1)
			if err != nil {
				t.Fatal(err)
			}
			want = append(want, w)
		}
		synctest.Test(t, func(t *testing.T) {
			lim, err := ratelimit.NewWarmingUp(rate, warmup)
			if err != nil {
				t.Fatal(err)
			}
			start := time.Now()
			var sum time.Duration
			for i := range n {
				w, err := lim.Acquire(context.Background(), 1)
				if err != nil {
					t.Fatal(err)
				}
				if w != want[i] {
					t.Fatalf("Acquire %d waited %v on the default clock, %v on the Fake", i, w, want[i])
				}
				sum += w
			}
			if el := time.Since(start); el != sum || el != fake.Elapsed() {
				t.Fatalf("the schedule took %v of bubble time; the Fake advanced %v (sum of waits %v)", el, fake.Elapsed(), sum)
			}
		})
	})
}
