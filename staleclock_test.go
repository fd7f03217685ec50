package ratelimit_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/smoothrate/ratelimit"
	"github.com/smoothrate/ratelimit/clocktest"
)

// overtakingClock reproduces, deterministically and on one goroutine, a race
// between two callers: caller A reads the clock, and before A takes the
// limiter's lock, caller B reads a later time and is served. The first
// Now() after arm runs the hook (caller B, nested) and then returns the
// time as it was before the hook, the reading A would have taken just before
// being overtaken. Every other Now() returns the current time.
type overtakingClock struct {
	mu      sync.Mutex
	elapsed time.Duration
	hook    func()
}

func (c *overtakingClock) Now() time.Time {
	c.mu.Lock()
	t, hook := c.elapsed, c.hook
	c.hook = nil
	c.mu.Unlock()
	if hook != nil {
		hook()
	}
	return clocktest.Epoch.Add(t)
}

func (c *overtakingClock) Sleep(ctx context.Context, d time.Duration) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	c.advance(max(d, 0))
	return nil
}

func (c *overtakingClock) advance(d time.Duration) {
	c.mu.Lock()
	c.elapsed += d
	c.mu.Unlock()
}

// arm makes the next Now() return the current time after first letting time
// move on by d and running b, the overtaking caller.
func (c *overtakingClock) arm(d time.Duration, b func()) {
	c.mu.Lock()
	c.hook = func() { c.advance(d); b() }
	c.mu.Unlock()
}

// A caller whose clock reading is older than that of a caller served in
// between must be answered about the present, as in Guava, which reads its
// stopwatch under the limiter's lock. Before the fix, the stale reading made
// TryAcquire(1, 0) refuse on an idle limiter with nine permits stored, and
// made Acquire and Reserve wait for time that had already passed.
func TestStaleClockReadingOvertaken(t *testing.T) {
	type result struct {
		granted bool
		wait    time.Duration
	}
	type call func(l *ratelimit.Limiter) result
	tryAcquire := func(timeout time.Duration) call {
		return func(l *ratelimit.Limiter) result { return result{l.TryAcquire(1, timeout), 0} }
	}
	acquire := func(l *ratelimit.Limiter) result {
		w, err := l.Acquire(context.Background(), 1)
		return result{err == nil, w}
	}
	reserve := func(l *ratelimit.Limiter) result {
		r := l.Reserve(1)
		return result{r.OK(), r.Delay()}
	}
	full := []ratelimit.Option{ratelimit.WithInitiallyFull()}         // at 10/s: 10 permits stored
	metronome := []ratelimit.Option{ratelimit.WithMaxBurstSeconds(0)} // at 1/s: nothing stored
	for _, tc := range []struct {
		name string
		rate float64
		opts []ratelimit.Option
		a    call
		want result // for A, after B was served at 6 s
	}{
		// At 6 s the full bucket still holds 9 permits: A goes at once.
		{"full/TryAcquire(1,0)", 10, full, tryAcquire(0), result{true, 0}},
		{"full/Acquire", 10, full, acquire, result{true, 0}},
		{"full/Reserve", 10, full, reserve, result{true, 0}},
		// B, at 6 s, booked the next permit for 7 s: A waits 1 s, not
		// the 2 s its reading of 5 s would suggest.
		{"metronome/TryAcquire(1,0)", 1, metronome, tryAcquire(0), result{false, 0}},
		{"metronome/TryAcquire(1,1s)", 1, metronome, tryAcquire(time.Second), result{true, 0}},
		{"metronome/Acquire", 1, metronome, acquire, result{true, time.Second}},
		{"metronome/Reserve", 1, metronome, reserve, result{true, time.Second}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := &overtakingClock{}
			l, err := ratelimit.NewBursty(tc.rate, append(tc.opts, ratelimit.WithClock(c))...)
			if err != nil {
				t.Fatal(err)
			}
			c.advance(5 * time.Second)
			var b result
			c.arm(time.Second, func() { b = reserve(l) })
			got := tc.a(l)
			if b != (result{true, 0}) {
				t.Fatalf("overtaking Reserve at 6 s = %+v; want granted at once", b)
			}
			if got != tc.want {
				t.Errorf("A, reading 5 s, overtaken by a grant at 6 s: got %+v, want %+v", got, tc.want)
			}
		})
	}
}
