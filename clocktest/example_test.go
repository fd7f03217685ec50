package clocktest_test

import (
	"context"
	"fmt"
	"time"

	"github.com/benbjohnson/clock"

	"github.com/smoothrate/ratelimit"
	"github.com/smoothrate/ratelimit/clocktest"
)

// A Fake clock records the sleeps a limiter asks for, in the form Guava's
// own tests use: at 5 permits per second each request after the first
// waits 0.2 s.
func ExampleFake() {
	fake := clocktest.NewFake()
	lim, _ := ratelimit.NewBursty(5, ratelimit.WithClock(fake))
	for range 3 {
		lim.Acquire(context.Background(), 1)
	}
	fmt.Println(fake.TakeEvents())
	// Output: [R0.00, R0.20, R0.20]
}

// A Manual clock lets a test hold a goroutine inside Acquire, look at what
// it is waiting for, and release it, without any real sleeping.
func ExampleManual() {
	ctx := context.Background()
	m := clocktest.NewManual()
	lim, _ := ratelimit.NewBursty(2, ratelimit.WithClock(m))
	lim.Acquire(ctx, 1) // free; the next request pays for it

	waited := make(chan time.Duration)
	go func() {
		w, _ := lim.Acquire(ctx, 1)
		waited <- w
	}()
	m.BlockUntilSleepers(ctx, 1) // the goroutine is now asleep on m
	next, _ := m.Next()
	fmt.Println("asleep until", next.Sub(clocktest.Epoch))
	fmt.Println("advanced by", m.AdvanceToNext())
	fmt.Println("Acquire waited", <-waited)
	// Output:
	// asleep until 500ms
	// advanced by 500ms
	// Acquire waited 500ms
}

// The Benbjohnson adapter drives a limiter with a benbjohnson/clock Mock.
// BlockUntilSleepers is what makes the Add safe: without it the Add may run
// before the goroutine's timer exists, and the goroutine never wakes.
func ExampleBenbjohnson() {
	ctx := context.Background()
	mock := clock.NewMock()
	c := clocktest.NewBenbjohnson(mock)
	lim, _ := ratelimit.NewBursty(10, ratelimit.WithClock(c))
	lim.Acquire(ctx, 1)

	waited := make(chan time.Duration)
	go func() {
		w, _ := lim.Acquire(ctx, 1)
		waited <- w
	}()
	c.BlockUntilSleepers(ctx, 1)
	mock.Add(100 * time.Millisecond)
	fmt.Println("Acquire waited", <-waited)
	// Output: Acquire waited 100ms
}
