package ratelimit_test

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/smoothrate/ratelimit"
	"github.com/smoothrate/ratelimit/clocktest"
)

// The examples that wait run on a clocktest.Fake clock: sleeping moves the
// fake time forward at once, so they are instant and their output exact. In
// a program, leave out WithClock and the limiter uses real time, as the
// examples that never wait do.

func ExampleNewBursty() {
	clk := clocktest.NewFake()
	lim, err := ratelimit.NewBursty(2, ratelimit.WithClock(clk)) // 2 permits per second
	if err != nil {
		panic(err)
	}
	ctx := context.Background()
	for i := 1; i <= 3; i++ {
		wait, _ := lim.Acquire(ctx, 1)
		fmt.Printf("request %d waited %v\n", i, wait)
	}

	// Idle time is saved, up to one second's worth of permits by default:
	// after a long pause, two requests go through at once.
	clk.Advance(10 * time.Second)
	for i := 4; i <= 6; i++ {
		wait, _ := lim.Acquire(ctx, 1)
		fmt.Printf("request %d waited %v\n", i, wait)
	}
	// Output:
	// request 1 waited 0s
	// request 2 waited 500ms
	// request 3 waited 500ms
	// request 4 waited 0s
	// request 5 waited 0s
	// request 6 waited 0s
}

func ExampleNewWarmingUp() {
	clk := clocktest.NewFake()
	// 2 permits per second once warm; a 4 s warm-up period.
	lim, err := ratelimit.NewWarmingUp(2, 4*time.Second, ratelimit.WithClock(clk))
	if err != nil {
		panic(err)
	}
	// A cold limiter hands out its first permits slowly (at up to 3× the
	// stable interval) and speeds up to 0.5 s per permit.
	for i := 1; i <= 7; i++ {
		wait, _ := lim.Acquire(context.Background(), 1)
		fmt.Printf("request %d waited %v\n", i, wait)
	}
	// Output:
	// request 1 waited 0s
	// request 2 waited 1.375s
	// request 3 waited 1.125s
	// request 4 waited 875ms
	// request 5 waited 625ms
	// request 6 waited 500ms
	// request 7 waited 500ms
}

func ExampleLimiter_Acquire() {
	clk := clocktest.NewFake()
	lim, _ := ratelimit.NewBursty(1, ratelimit.WithClock(clk))
	ctx := context.Background()

	// A request never waits for its own permits: a big one goes through
	// at once, and the next request pays for it.
	wait, _ := lim.Acquire(ctx, 10)
	fmt.Println("10 permits waited", wait)
	wait, _ = lim.Acquire(ctx, 1)
	fmt.Println("then 1 permit waited", wait)

	_, err := lim.Acquire(ctx, 0)
	fmt.Println(errors.Is(err, ratelimit.ErrInvalidPermits))

	// A deadline that the wait cannot meet fails at once, reserving
	// nothing. Contexts expire on the real clock (a deadline taken from
	// the fake's Now, in 2000, has long passed), so this part uses a
	// limiter on the real clock; nothing here sleeps.
	lim, _ = ratelimit.NewBursty(1)
	lim.Acquire(ctx, 10) // the next request may start in 10 s
	ctx, cancel := context.WithTimeout(ctx, 100*time.Millisecond)
	defer cancel()
	_, err = lim.Acquire(ctx, 1)
	fmt.Println(errors.Is(err, context.DeadlineExceeded), ctx.Err() == nil)
	fmt.Println("still booked:", lim.Snapshot().NextFree.Round(time.Second))
	// Output:
	// 10 permits waited 0s
	// then 1 permit waited 10s
	// true
	// true true
	// still booked: 10s
}

func ExampleLimiter_TryAcquire() {
	clk := clocktest.NewFake()
	lim, _ := ratelimit.NewBursty(1, ratelimit.WithClock(clk))

	fmt.Println(lim.TryAcquire(1, 0)) // free: the limiter is idle
	fmt.Println(lim.TryAcquire(1, 0)) // the next permit is 1 s away

	// With a timeout long enough it waits, then succeeds.
	before := clk.Elapsed()
	fmt.Println(lim.TryAcquire(1, 2*time.Second), clk.Elapsed()-before)

	// It looks only at when the next request may start, not at the
	// count: "pay later" lets 100 permits through.
	clk.Advance(time.Second)
	fmt.Println(lim.TryAcquire(100, 0))
	fmt.Println(lim.TryAcquire(1, 99*time.Second), lim.TryAcquire(1, 100*time.Second))
	// Output:
	// true
	// false
	// true 1s
	// true
	// false true
}

func ExampleLimiter_Reserve() {
	clk := clocktest.NewFake()
	lim, _ := ratelimit.NewBursty(4, ratelimit.WithClock(clk))

	// Reserve books permits without sleeping: an event loop can schedule
	// each job at its Delay instead of blocking.
	for i := 1; i <= 4; i++ {
		r := lim.Reserve(1)
		fmt.Printf("job %d may start in %v\n", i, r.Delay())
	}
	// Output:
	// job 1 may start in 0s
	// job 2 may start in 250ms
	// job 3 may start in 500ms
	// job 4 may start in 750ms
}

func ExampleReservation_Cancel() {
	clk := clocktest.NewFake()
	lim, _ := ratelimit.NewBursty(1, ratelimit.WithClock(clk))

	first := lim.Reserve(5)
	r := lim.Reserve(5)
	fmt.Println("second reservation waits", r.Delay())

	// Nothing happened since: the permits go back exactly.
	fmt.Println("cancelled:", r.Cancel())
	fmt.Println("a new reservation waits", lim.Reserve(1).Delay())

	// The first one has been built upon since: too late.
	fmt.Println("cancelled:", first.Cancel())
	// Output:
	// second reservation waits 5s
	// cancelled: true
	// a new reservation waits 5s
	// cancelled: false
}

func ExampleLimiter_SetRate() {
	clk := clocktest.NewFake()
	lim, _ := ratelimit.NewBursty(1, ratelimit.WithClock(clk))
	ctx := context.Background()

	lim.Acquire(ctx, 1) // books 1 s at the old rate
	if err := lim.SetRate(10); err != nil {
		panic(err)
	}
	// The debt booked at 1 permit per second is not re-priced: the first
	// request after the change still waits 1 s; the next ones 0.1 s.
	for i := 0; i < 3; i++ {
		wait, _ := lim.Acquire(ctx, 1)
		fmt.Println(wait)
	}

	err := lim.SetRate(0)
	fmt.Println(errors.Is(err, ratelimit.ErrInvalidRate), lim.Rate())
	// Output:
	// 1s
	// 100ms
	// 100ms
	// true 10
}

func ExampleLimiter_Rate() {
	lim, _ := ratelimit.NewBursty(5)
	fmt.Println(lim.Rate())

	// The rate is computed back from the stable interval, as in Guava, so
	// it can differ from the value given in the last digit.
	lim, _ = ratelimit.NewBursty(7, ratelimit.WithResolution(time.Microsecond))
	fmt.Println(lim.Rate())
	// Output:
	// 5
	// 6.999999999999999
}

func ExampleLimiter_String() {
	lim, _ := ratelimit.NewBursty(5)
	fmt.Println(lim)
	lim.SetRate(0.25)
	fmt.Println(lim) // rounded half up, like Java's %.1f
	// Output:
	// RateLimiter[stableRate=5.0qps]
	// RateLimiter[stableRate=0.3qps]
}

func ExampleLimiter_Snapshot() {
	clk := clocktest.NewFake()
	lim, _ := ratelimit.NewWarmingUp(4, 2*time.Second, ratelimit.WithClock(clk))

	show := func() {
		s := lim.Snapshot()
		fmt.Printf("%v at %v qps: %v of %v permits stored, next request in %v\n",
			s.Kind, s.Rate, s.StoredPermits, s.MaxPermits, s.NextFree)
	}
	show() // a new warming-up limiter is cold: its store is full
	lim.Acquire(context.Background(), 3)
	show()
	// Output:
	// SmoothWarmingUp at 4 qps: 8 of 8 permits stored, next request in 0s
	// SmoothWarmingUp at 4 qps: 5 of 8 permits stored, next request in 1.6875s
}

func ExampleWithClock() {
	// Any Clock will do; clocktest.Fake records what the limiter asked for.
	clk := clocktest.NewFake()
	lim, _ := ratelimit.NewBursty(5, ratelimit.WithClock(clk))
	ctx := context.Background()
	lim.Acquire(ctx, 1)
	lim.Acquire(ctx, 1)
	fmt.Println(clk.Elapsed())
	// Output:
	// 200ms
}

func ExampleWithMaxBurstSeconds() {
	clk := clocktest.NewFake()
	// 2 permits per second; up to 2.5 s of idle time is saved.
	lim, _ := ratelimit.NewBursty(2, ratelimit.WithClock(clk), ratelimit.WithMaxBurstSeconds(2.5))
	clk.Advance(time.Minute)

	var waits []time.Duration
	for i := 0; i < 7; i++ {
		wait, _ := lim.Acquire(context.Background(), 1)
		waits = append(waits, wait)
	}
	// Five stored permits, one fresh one without waiting (the next request
	// pays for it), then the stable rate.
	fmt.Println(waits)
	// Output:
	// [0s 0s 0s 0s 0s 0s 500ms]
}

func ExampleWithColdFactor() {
	clk := clocktest.NewFake()
	// Cold, the limiter issues permits 10 times more slowly than at its
	// stable rate of 5 per second.
	lim, _ := ratelimit.NewWarmingUp(5, 4*time.Second, ratelimit.WithClock(clk), ratelimit.WithColdFactor(10))
	fmt.Printf("%.4f permits stored when cold\n", lim.Snapshot().MaxPermits)
	for i := 1; i <= 4; i++ {
		wait, _ := lim.Acquire(context.Background(), 1)
		fmt.Printf("request %d waited %v\n", i, wait)
	}
	// Output:
	// 13.6364 permits stored when cold
	// request 1 waited 0s
	// request 2 waited 1.7525s
	// request 3 waited 1.2575s
	// request 4 waited 762.5ms
}

func ExampleWithResolution() {
	// At 80 000 permits per second a permit costs 12.5 µs. Guava counts
	// whole microseconds and books 12 µs; the default nanosecond ticks
	// keep the exact price.
	for _, res := range []time.Duration{time.Nanosecond, time.Microsecond} {
		clk := clocktest.NewFake()
		lim, _ := ratelimit.NewBursty(80000, ratelimit.WithClock(clk), ratelimit.WithResolution(res))
		lim.Acquire(context.Background(), 1)
		fmt.Printf("%v ticks: next permit in %v\n", res, lim.Snapshot().NextFree)
	}
	// Output:
	// 1ns ticks: next permit in 12.5µs
	// 1µs ticks: next permit in 12µs
}

func ExampleWithInitiallyFull() {
	clk := clocktest.NewFake()
	// Without the option a new bursty limiter starts empty, as Guava's
	// does; with it the first second's worth of permits is ready at once.
	lim, _ := ratelimit.NewBursty(3, ratelimit.WithClock(clk), ratelimit.WithInitiallyFull())
	var waits []time.Duration
	for i := 0; i < 5; i++ {
		wait, _ := lim.Acquire(context.Background(), 1)
		waits = append(waits, wait)
	}
	fmt.Println(waits)
	// Output:
	// [0s 0s 0s 0s 333.333333ms]
}

// Tests state a schedule the way Guava's RateLimiterTest does: the fake
// clock records every sleep the limiter asked for ("R", in seconds) and
// every pause of the caller ("U").
func Example_testingWithAFakeClock() {
	clk := clocktest.NewFake()
	lim, _ := ratelimit.NewBursty(5, ratelimit.WithClock(clk))
	ctx := context.Background()

	lim.Acquire(ctx, 1)
	lim.Acquire(ctx, 1)
	clk.Advance(time.Second)
	lim.Acquire(ctx, 1)
	lim.Acquire(ctx, 1)
	fmt.Println(clk.TakeEvents())
	// Output:
	// [R0.00, R0.20, U1.00, R0.00, R0.00]
}
