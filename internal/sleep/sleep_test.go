package sleep

import (
	"context"
	"errors"
	"testing"
	"testing/synctest"
	"time"
)

// TestAwaitServedWins: the context has ended and the timer has not sent;
// whether the wait was served is the time's to say, not the order in
// which the two were noticed.
func TestAwaitServedWins(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	never := make(chan time.Time)
	if err := Await(ctx, never, func() bool { return true }); err != nil {
		t.Fatalf("ended context, wait served: %v, want nil", err)
	}
	if err := Await(ctx, never, func() bool { return false }); !errors.Is(err, context.Canceled) {
		t.Fatalf("ended context, wait not served: %v, want context.Canceled", err)
	}
	fired := make(chan time.Time, 1)
	fired <- time.Time{}
	if err := Await(context.Background(), fired, func() bool { t.Fatal("served asked"); return false }); err != nil {
		t.Fatalf("timer fired: %v", err)
	}
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
