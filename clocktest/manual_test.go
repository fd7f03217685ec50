package clocktest_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/smoothrate/ratelimit"
	"github.com/smoothrate/ratelimit/clocktest"
)

var (
	_ ratelimit.Clock = (*clocktest.Manual)(nil)
	_ ratelimit.Clock = (*clocktest.Fake)(nil)
	_ ratelimit.Clock = (*clocktest.Benbjohnson)(nil)
)

// failAfter bounds how long a test may wait for goroutines before it fails.
// It is only a safety net against hangs (a broken clock would otherwise
// block the test forever); no test relies on it passing for correctness.
const failAfter = 30 * time.Second

func testCtx(t *testing.T) context.Context {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), failAfter)
	t.Cleanup(cancel)
	return ctx
}

// recv waits for one value from ch, failing the test if ctx ends first.
func recv[T any](t *testing.T, ctx context.Context, ch <-chan T) T {
	t.Helper()
	select {
	case v := <-ch:
		return v
	case <-ctx.Done():
		t.Fatalf("gave up waiting: %v", ctx.Err())
		panic("unreachable")
	}
}

// sleepAsync starts m.Sleep(ctx, d) on a goroutine and returns where its
// result will arrive.
func sleepAsync(clock ratelimit.Clock, ctx context.Context, d time.Duration) <-chan error {
	done := make(chan error, 1)
	go func() { done <- clock.Sleep(ctx, d) }()
	return done
}

func TestManualStartsAtEpochAndMovesOnlyWhenTold(t *testing.T) {
	m := clocktest.NewManual()
	if got := m.Now(); !got.Equal(clocktest.Epoch) {
		t.Fatalf("Now() = %v, want Epoch %v", got, clocktest.Epoch)
	}
	m.Advance(1500 * time.Millisecond)
	if got := m.Elapsed(); got != 1500*time.Millisecond {
		t.Fatalf("Elapsed() after Advance(1.5s) = %v", got)
	}
	m.Advance(-2 * time.Second)
	if got := m.Elapsed(); got != -500*time.Millisecond {
		t.Fatalf("Elapsed() after Advance(-2s) = %v, want -500ms", got)
	}
	at := clocktest.Epoch.Add(time.Hour)
	m.Set(at)
	if got := m.Now(); !got.Equal(at) {
		t.Fatalf("Now() after Set = %v, want %v", got, at)
	}
}

func TestManualSleepNonPositiveReturnsAtOnce(t *testing.T) {
	m := clocktest.NewManual()
	cancelled, cancel := context.WithCancel(context.Background())
	cancel()
	for _, d := range []time.Duration{0, -1, -time.Hour} {
		// On the calling goroutine: a Sleep that blocked would hang the
		// test here, and a d <= 0 sleep must not even look at ctx.
		if err := m.Sleep(context.Background(), d); err != nil {
			t.Errorf("Sleep(%v) = %v, want nil", d, err)
		}
		if err := m.Sleep(cancelled, d); err != nil {
			t.Errorf("Sleep(cancelled, %v) = %v, want nil", d, err)
		}
	}
	if n := m.Sleepers(); n != 0 {
		t.Fatalf("Sleepers() = %d after non-positive sleeps, want 0", n)
	}
}

func TestManualSleepBlocksUntilAdvanced(t *testing.T) {
	ctx := testCtx(t)
	m := clocktest.NewManual()
	done := sleepAsync(m, context.Background(), time.Second)
	if err := m.BlockUntilSleepers(ctx, 1); err != nil {
		t.Fatal(err)
	}
	if next, ok := m.Next(); !ok || !next.Equal(clocktest.Epoch.Add(time.Second)) {
		t.Fatalf("Next() = %v, %v; want Epoch+1s, true", next, ok)
	}

	m.Advance(999 * time.Millisecond)
	// The sleeper is still registered, so it cannot have returned.
	if n := m.Sleepers(); n != 1 {
		t.Fatalf("Sleepers() = %d after 999ms of a 1s sleep, want 1", n)
	}
	select {
	case err := <-done:
		t.Fatalf("Sleep(1s) returned %v after 999ms", err)
	default:
	}

	m.Advance(time.Millisecond)
	if err := recv(t, ctx, done); err != nil {
		t.Fatalf("Sleep = %v, want nil", err)
	}
	if n := m.Sleepers(); n != 0 {
		t.Fatalf("Sleepers() = %d after wake-up, want 0", n)
	}
}

func TestManualSleepCancelledDeregisters(t *testing.T) {
	ctx := testCtx(t)
	m := clocktest.NewManual()
	sleepCtx, cancel := context.WithCancel(context.Background())
	done := sleepAsync(m, sleepCtx, time.Second)
	if err := m.BlockUntilSleepers(ctx, 1); err != nil {
		t.Fatal(err)
	}
	cancel()
	if err := recv(t, ctx, done); !errors.Is(err, context.Canceled) {
		t.Fatalf("Sleep = %v, want context.Canceled", err)
	}
	if n := m.Sleepers(); n != 0 {
		t.Fatalf("Sleepers() = %d after cancellation, want 0", n)
	}
	if _, ok := m.Next(); ok {
		t.Fatal("Next() reports a wake-up time after the only sleeper left")
	}
	// Advancing past the cancelled wake-up must not touch it again (a
	// second close would panic).
	m.Advance(time.Hour)
}

func TestManualSleepWithDoneContext(t *testing.T) {
	m := clocktest.NewManual()
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := m.Sleep(ctx, time.Second); !errors.Is(err, context.Canceled) {
		t.Fatalf("Sleep(done ctx, 1s) = %v, want context.Canceled", err)
	}
	if n := m.Sleepers(); n != 0 {
		t.Fatalf("Sleepers() = %d, want 0", n)
	}
}

func TestManualWakeUpWinsOverLateCancel(t *testing.T) {
	ctx := testCtx(t)
	m := clocktest.NewManual()
	for i := range 200 {
		sleepCtx, cancel := context.WithCancel(context.Background())
		done := sleepAsync(m, sleepCtx, time.Second)
		if err := m.BlockUntilSleepers(ctx, 1); err != nil {
			t.Fatal(err)
		}
		m.Advance(time.Second) // the sleep is complete from here on
		cancel()               // whatever the sleeper's select sees first
		if err := recv(t, ctx, done); err != nil {
			t.Fatalf("round %d: Sleep = %v after its wake-up time passed, want nil", i, err)
		}
	}
}

func TestManualSetBackwardsKeepsAbsoluteWakeUp(t *testing.T) {
	ctx := testCtx(t)
	m := clocktest.NewManual()
	done := sleepAsync(m, context.Background(), time.Second)
	if err := m.BlockUntilSleepers(ctx, 1); err != nil {
		t.Fatal(err)
	}
	m.Set(clocktest.Epoch.Add(-time.Minute))
	m.Advance(time.Minute + 999*time.Millisecond) // Epoch+999ms: not yet
	if n := m.Sleepers(); n != 1 {
		t.Fatalf("Sleepers() = %d before the wake-up moment, want 1", n)
	}
	m.Set(clocktest.Epoch.Add(time.Second))
	if err := recv(t, ctx, done); err != nil {
		t.Fatal(err)
	}
}

func TestManualAdvanceToNextWakesInOrder(t *testing.T) {
	ctx := testCtx(t)
	m := clocktest.NewManual()
	if d := m.AdvanceToNext(); d != 0 {
		t.Fatalf("AdvanceToNext() with no sleepers = %v, want 0", d)
	}
	durations := []time.Duration{3 * time.Second, time.Second, 2 * time.Second, time.Second}
	dones := make([]<-chan error, len(durations))
	for i, d := range durations {
		dones[i] = sleepAsync(m, context.Background(), d)
	}
	if err := m.BlockUntilSleepers(ctx, len(durations)); err != nil {
		t.Fatal(err)
	}
	// First step: both 1s sleepers wake together.
	if d := m.AdvanceToNext(); d != time.Second {
		t.Fatalf("first AdvanceToNext() = %v, want 1s", d)
	}
	for _, i := range []int{1, 3} {
		if err := recv(t, ctx, dones[i]); err != nil {
			t.Fatal(err)
		}
	}
	if n := m.Sleepers(); n != 2 {
		t.Fatalf("Sleepers() = %d after the first step, want 2", n)
	}
	if d := m.AdvanceToNext(); d != time.Second {
		t.Fatalf("second AdvanceToNext() = %v, want 1s", d)
	}
	if err := recv(t, ctx, dones[2]); err != nil {
		t.Fatal(err)
	}
	if n := m.Sleepers(); n != 1 {
		t.Fatalf("Sleepers() = %d after the second step, want 1", n)
	}
	if d := m.AdvanceToNext(); d != time.Second {
		t.Fatalf("third AdvanceToNext() = %v, want 1s", d)
	}
	if err := recv(t, ctx, dones[0]); err != nil {
		t.Fatal(err)
	}
	if got := m.Elapsed(); got != 3*time.Second {
		t.Fatalf("Elapsed() = %v, want 3s", got)
	}
}

func TestManualBlockUntilSleepers(t *testing.T) {
	ctx := testCtx(t)
	m := clocktest.NewManual()
	if err := m.BlockUntilSleepers(ctx, 0); err != nil {
		t.Fatalf("BlockUntilSleepers(0) = %v, want nil at once", err)
	}

	// With no sleeper coming it must give up with ctx's error.
	short, cancel := context.WithCancel(ctx)
	cancel()
	if err := m.BlockUntilSleepers(short, 1); !errors.Is(err, context.Canceled) {
		t.Fatalf("BlockUntilSleepers(1) with no sleeper = %v, want context.Canceled", err)
	}

	// Waiters for different counts are released as the sleepers arrive.
	const n = 50
	released := make([]chan error, n+1)
	for k := 1; k <= n; k++ {
		released[k] = make(chan error, 1)
		go func() { released[k] <- m.BlockUntilSleepers(ctx, k) }()
	}
	var wg sync.WaitGroup
	for range n {
		wg.Go(func() {
			if err := m.Sleep(context.Background(), time.Second); err != nil {
				t.Error(err)
			}
		})
	}
	for k := 1; k <= n; k++ {
		if err := recv(t, ctx, released[k]); err != nil {
			t.Fatalf("BlockUntilSleepers(%d) = %v", k, err)
		}
	}
	if got := m.Sleepers(); got != n {
		t.Fatalf("Sleepers() = %d, want %d", got, n)
	}
	m.Advance(time.Second)
	wg.Wait()
	if got := m.Sleepers(); got != 0 {
		t.Fatalf("Sleepers() = %d after waking all, want 0", got)
	}
}

// TestManualDrivesLimiter shows the intended use: a goroutine blocks in
// Acquire, the test sees its exact wait on the clock and releases it.
func TestManualDrivesLimiter(t *testing.T) {
	ctx := testCtx(t)
	m := clocktest.NewManual()
	lim, err := ratelimit.NewBursty(5, ratelimit.WithClock(m))
	if err != nil {
		t.Fatal(err)
	}
	// The first request is free; it books 200ms for the next one.
	if w, err := lim.Acquire(ctx, 1); err != nil || w != 0 {
		t.Fatalf("first Acquire = %v, %v; want 0, nil", w, err)
	}
	type result struct {
		wait time.Duration
		err  error
	}
	done := make(chan result, 1)
	go func() {
		w, err := lim.Acquire(ctx, 1)
		done <- result{w, err}
	}()
	if err := m.BlockUntilSleepers(ctx, 1); err != nil {
		t.Fatal(err)
	}
	if next, _ := m.Next(); next.Sub(m.Now()) != 200*time.Millisecond {
		t.Fatalf("the second Acquire sleeps until %v, want 200ms from now", next.Sub(m.Now()))
	}
	m.Advance(200 * time.Millisecond)
	if r := recv(t, ctx, done); r.err != nil || r.wait != 200*time.Millisecond {
		t.Fatalf("second Acquire = %v, %v; want 200ms, nil", r.wait, r.err)
	}
}
