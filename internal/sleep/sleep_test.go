package sleep

import (
	"context"
	"errors"
	"testing"
	"testing/synctest"
	"time"
)

// TestAwaitDueTimerWins: a timer that is due and a context that has ended
// are both ready; the wait was served, every time. (A bare select returns
// the context's error half the time: 100 rounds catch it.)
func TestAwaitDueTimerWins(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		for range 100 {
			ctx, cancel := context.WithCancel(context.Background())
			tm := time.NewTimer(time.Second)
			time.Sleep(time.Second) // the timer is due
			cancel()
			if err := Await(ctx, tm.C); err != nil {
				t.Fatalf("due timer, ended context: %v, want nil", err)
			}
		}
	})
}

// TestCtx: a deadline exactly the wait away is met; one a nanosecond
// shorter cuts the wait short at the deadline.
func TestCtx(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		for range 100 {
			ctx, cancel := context.WithTimeout(context.Background(), time.Second)
			start := time.Now()
			if err := Ctx(ctx, time.Second); err != nil || time.Since(start) != time.Second {
				t.Fatalf("deadline = wait: %v after %v, want nil after 1s", err, time.Since(start))
			}
			cancel()
		}
		ctx, cancel := context.WithTimeout(context.Background(), time.Second-1)
		defer cancel()
		start := time.Now()
		if err := Ctx(ctx, time.Second); !errors.Is(err, context.DeadlineExceeded) || time.Since(start) != time.Second-1 {
			t.Fatalf("deadline 1ns short: %v after %v, want DeadlineExceeded after 1s-1ns", err, time.Since(start))
		}
		if err := Ctx(context.Background(), 0); err != nil {
			t.Fatal(err)
		}
		start = time.Now()
		if err := Ctx(context.Background(), time.Minute); err != nil || time.Since(start) != time.Minute {
			t.Fatalf("no context: %v after %v", err, time.Since(start))
		}
	})
}
