package clocktest_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/benbjohnson/clock"

	"github.com/smoothrate/ratelimit"
	"github.com/smoothrate/ratelimit/clocktest"
)

// TestBenbjohnsonSleepThenAdvanceNeverLosesASleeper is the pattern that
// loses sleepers with the bare Mock: start a goroutine that sleeps, then
// advance the Mock. With mock.Sleep the goroutine often registers its timer
// after the Add and never wakes. Through the adapter the advancing side
// first waits for the timer to be registered, so every round must wake its
// sleeper; a lost one fails the test at the overall deadline instead of
// hanging it.
func TestBenbjohnsonSleepThenAdvanceNeverLosesASleeper(t *testing.T) {
	const rounds = 1000
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	mock := clock.NewMock()
	c := clocktest.NewBenbjohnson(mock)
	start := mock.Now()
	for i := range rounds {
		done := sleepAsync(c, ctx, time.Second)
		if err := c.BlockUntilSleepers(ctx, 1); err != nil {
			t.Fatalf("round %d: the sleeper never registered: %v", i, err)
		}
		mock.Add(time.Second)
		select {
		case err := <-done:
			if err != nil {
				t.Fatalf("round %d: Sleep = %v, want nil", i, err)
			}
		case <-ctx.Done():
			t.Fatalf("round %d: the sleeper was lost: it never woke after Add", i)
		}
	}
	if got := mock.Now().Sub(start); got != rounds*time.Second {
		t.Fatalf("the Mock moved %v, want %v", got, rounds*time.Second)
	}
	if n := c.Sleepers(); n != 0 {
		t.Fatalf("Sleepers() = %d at the end, want 0", n)
	}
}

// TestBenbjohnsonCountsOnlyPendingTimers checks that a sleeper stops
// counting the moment the Mock fires its timer, before its goroutine has
// left Sleep, so that a test can wait for the next sleeper right away.
func TestBenbjohnsonCountsOnlyPendingTimers(t *testing.T) {
	ctx := testCtx(t)
	mock := clock.NewMock()
	c := clocktest.NewBenbjohnson(mock)
	short := sleepAsync(c, ctx, time.Second)
	long := sleepAsync(c, ctx, 3*time.Second)
	if err := c.BlockUntilSleepers(ctx, 2); err != nil {
		t.Fatal(err)
	}
	mock.Add(time.Second)
	// Counted from the clock, not from the goroutines: exact as soon as
	// Add has returned, whether or not the short sleeper has run yet.
	if n := c.Sleepers(); n != 1 {
		t.Fatalf("Sleepers() = %d after the short timer fired, want 1", n)
	}
	if err := recv(t, ctx, short); err != nil {
		t.Fatal(err)
	}
	third := sleepAsync(c, ctx, time.Second) // due at 2s
	if err := c.BlockUntilSleepers(ctx, 2); err != nil {
		t.Fatal(err)
	}
	mock.Add(time.Second)
	if err := recv(t, ctx, third); err != nil {
		t.Fatal(err)
	}
	mock.Add(time.Second)
	if err := recv(t, ctx, long); err != nil {
		t.Fatal(err)
	}
	if n := c.Sleepers(); n != 0 {
		t.Fatalf("Sleepers() = %d, want 0", n)
	}
}

func TestBenbjohnsonSleepCancelled(t *testing.T) {
	ctx := testCtx(t)
	mock := clock.NewMock()
	c := clocktest.NewBenbjohnson(mock)
	sleepCtx, cancel := context.WithCancel(ctx)
	done := sleepAsync(c, sleepCtx, time.Hour)
	if err := c.BlockUntilSleepers(ctx, 1); err != nil {
		t.Fatal(err)
	}
	cancel()
	if err := recv(t, ctx, done); !errors.Is(err, context.Canceled) {
		t.Fatalf("Sleep = %v, want context.Canceled", err)
	}
	if n := c.Sleepers(); n != 0 {
		t.Fatalf("Sleepers() = %d after cancellation, want 0", n)
	}
	// The timer was stopped: advancing past it fires nothing and moves
	// the Mock straight to the target.
	mock.Add(2 * time.Hour)
	if got := mock.Now(); !got.Equal(time.Unix(0, 0).Add(2 * time.Hour)) {
		t.Fatalf("Mock.Now() = %v", got)
	}

	// A context that is already done never registers a timer.
	if err := c.Sleep(sleepCtx, time.Second); !errors.Is(err, context.Canceled) {
		t.Fatalf("Sleep(done ctx) = %v, want context.Canceled", err)
	}
	if n := c.Sleepers(); n != 0 {
		t.Fatalf("Sleepers() = %d, want 0", n)
	}
}

func TestBenbjohnsonNonPositiveSleepReturnsAtOnce(t *testing.T) {
	c := clocktest.NewBenbjohnson(clock.NewMock())
	for _, d := range []time.Duration{0, -time.Second} {
		if err := c.Sleep(context.Background(), d); err != nil {
			t.Fatalf("Sleep(%v) = %v, want nil", d, err)
		}
	}
}

func TestBenbjohnsonBlockUntilSleepersHonoursContext(t *testing.T) {
	c := clocktest.NewBenbjohnson(clock.NewMock())
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := c.BlockUntilSleepers(ctx, 1); !errors.Is(err, context.Canceled) {
		t.Fatalf("BlockUntilSleepers with no sleeper = %v, want context.Canceled", err)
	}
	if err := c.BlockUntilSleepers(ctx, 0); err != nil {
		t.Fatalf("BlockUntilSleepers(0) = %v, want nil", err)
	}
}

// TestBenbjohnsonRealClock checks the adapter over the library's real clock
// without waiting for real time: a cancelled long sleep, a 1 ns sleep, and
// Now against the time package.
func TestBenbjohnsonRealClock(t *testing.T) {
	for _, c := range []*clocktest.Benbjohnson{clocktest.NewBenbjohnson(clock.New()), clocktest.NewBenbjohnson(nil)} {
		before := time.Now()
		now := c.Now()
		after := time.Now()
		if now.Before(before) || now.After(after) {
			t.Fatalf("Now() = %v, not between %v and %v", now, before, after)
		}
		ctx, cancel := context.WithCancel(context.Background())
		cancel()
		if err := c.Sleep(ctx, time.Hour); !errors.Is(err, context.Canceled) {
			t.Fatalf("Sleep(cancelled, 1h) = %v, want context.Canceled", err)
		}
		if err := c.Sleep(context.Background(), time.Nanosecond); err != nil {
			t.Fatalf("Sleep(1ns) = %v", err)
		}
	}
}

// TestBenbjohnsonDrivesLimiter runs a 5/s limiter on the Mock: each request
// after the first sleeps exactly 200ms of Mock time, released by the test.
func TestBenbjohnsonDrivesLimiter(t *testing.T) {
	ctx := testCtx(t)
	mock := clock.NewMock()
	c := clocktest.NewBenbjohnson(mock)
	lim, err := ratelimit.NewBursty(5, ratelimit.WithClock(c))
	if err != nil {
		t.Fatal(err)
	}
	if w, err := lim.Acquire(ctx, 1); err != nil || w != 0 {
		t.Fatalf("first Acquire = %v, %v; want 0, nil", w, err)
	}
	type result struct {
		wait time.Duration
		err  error
	}
	start := mock.Now()
	for i := 1; i <= 10; i++ {
		done := make(chan result, 1)
		go func() {
			w, err := lim.Acquire(ctx, 1)
			done <- result{w, err}
		}()
		if err := c.BlockUntilSleepers(ctx, 1); err != nil {
			t.Fatal(err)
		}
		// Not yet: 199ms leaves the request asleep.
		mock.Add(199 * time.Millisecond)
		if n := c.Sleepers(); n != 1 {
			t.Fatalf("request %d: Sleepers() = %d after 199ms, want 1", i, n)
		}
		mock.Add(time.Millisecond)
		if r := recv(t, ctx, done); r.err != nil || r.wait != 200*time.Millisecond {
			t.Fatalf("request %d: Acquire = %v, %v; want 200ms, nil", i, r.wait, r.err)
		}
	}
	if got := mock.Now().Sub(start); got != 2*time.Second {
		t.Fatalf("10 throttled requests took %v of Mock time, want 2s", got)
	}
	// The limiter is now owed 200ms: a TryAcquire that cannot wait fails
	// at once, and one allowed 200ms sleeps on the Mock.
	if lim.TryAcquire(1, 199*time.Millisecond) {
		t.Fatal("TryAcquire(1, 199ms) succeeded with 200ms owed")
	}
	ok := make(chan bool, 1)
	go func() { ok <- lim.TryAcquire(1, 200*time.Millisecond) }()
	if err := c.BlockUntilSleepers(ctx, 1); err != nil {
		t.Fatal(err)
	}
	mock.Add(200 * time.Millisecond)
	if !recv(t, ctx, ok) {
		t.Fatal("TryAcquire(1, 200ms) failed with 200ms owed")
	}
}
