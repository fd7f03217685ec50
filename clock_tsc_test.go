package ratelimit

import (
	"context"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/smoothrate/ratelimit/internal/tsc"
)

// TestCounterClockFollowsMonotonic: with the default clock the limiter
// reads the processor's counter where it can (internal/tsc), and its time
// is the monotonic clock's: each reading, unordered or ordered, lies
// between two readings of time.Since around it, within 20 µs, over 300 ms
// of real time (what is measured is time itself).
func TestCounterClockFollowsMonotonic(t *testing.T) {
	l := mustNew(t, 10)
	if l.sw.Counter() != tsc.Usable() {
		t.Fatalf("limiter reads the counter: %v; the counter is usable: %v", l.sw.Counter(), tsc.Usable())
	}
	const tol = 20 * time.Microsecond
	for end := time.Now().Add(300 * time.Millisecond); time.Now().Before(end); {
		before := time.Since(l.sw.Start())
		a, b := l.elapsed(), l.elapsedOrdered()
		after := time.Since(l.sw.Start())
		if a < before-tol || a > after+tol || b < before-tol || b > after+tol {
			t.Fatalf("elapsed() = %v, elapsedOrdered() = %v; time.Since read %v before and %v after", a, b, before, after)
		}
	}
}

// TestNoEarlyRefusalParallel: two goroutines take permits from a limiter of
// 1e9 permits/s, where a permit costs 1 ns and every call takes longer, so
// every call must be granted. A refusal means a caller judged another's
// booking with a time read before that booking, which the unordered
// counter can do: with both ordered second readings (TryAcquire's and
// rereadIfStale's) made unordered, one call in 6 million was refused here
// (the processor seldom reads the counter that early, so this test catches
// such a regression only now and then: TestStaleReadingNeverRefuses
// catches both, every time, on a clock made stale on purpose).
func TestNoEarlyRefusalParallel(t *testing.T) {
	l := mustNew(t, 1e9)
	const calls = 1_000_000
	var wg sync.WaitGroup
	refused := make([]int, 2)
	for g := range refused {
		wg.Go(func() {
			for range calls {
				if !l.TryAcquire(1, 0) {
					refused[g]++
				}
			}
		})
	}
	wg.Wait()
	if refused[0]+refused[1] != 0 {
		t.Errorf("%v of 2 × %d calls refused at 1e9 permits/s", refused, calls)
	}
}

// TestCounterClockNotInBubble: a limiter made inside a testing/synctest
// bubble reads the bubble's time, not the counter, which would run on while
// the bubble's clock stands still.
func TestCounterClockNotInBubble(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		l := mustNew(t, 1)
		if l.sw.Counter() {
			t.Fatal("a limiter made in a synctest bubble reads the counter")
		}
		if !l.TryAcquire(1, 0) || l.TryAcquire(1, 0) {
			t.Fatal("want one grant, then a refusal at the same fake instant")
		}
		if l.TryAcquire(1, 999*time.Millisecond) {
			t.Fatal("granted 1 ms before the next permit")
		}
		time.Sleep(time.Second)
		if !l.TryAcquire(1, 0) {
			t.Fatal("refused a second later on the bubble's clock")
		}
	})
}

func mustNew(t *testing.T, rate float64) *Limiter {
	t.Helper()
	l, err := NewBursty(rate)
	if err != nil {
		t.Fatal(err)
	}
	return l
}

// staleClock reads a time lag behind its ordered reading, as an unordered
// reading of the counter may (orderedClock), and records its sleeps.
type staleClock struct {
	t      time.Time
	lag    time.Duration
	sleeps []time.Duration
}

func (c *staleClock) Now() time.Time        { return c.t.Add(-c.lag) }
func (c *staleClock) nowOrdered() time.Time { return c.t }
func (c *staleClock) Sleep(_ context.Context, d time.Duration) error {
	c.sleeps = append(c.sleeps, d)
	return nil
}

// TestStaleReadingNeverRefuses: the two ordered second readings, made
// deterministic with a clock whose unordered reading lags by 5 µs (within
// tsc.ReorderSlack). A limiter of 1e6 permits/s that stores nothing books
// 1 µs per permit.
//   - TryAcquire(1, 0) where the unordered reading is before the next free
//     moment and the ordered one after it is granted: refusing on the first
//     would refuse on a time read before the state (without TryAcquire's
//     second reading it is refused).
//   - TryAcquire(1, timeout) where the unordered reading is 6 µs before the
//     next free moment and the ordered one 1 µs: it waits 1 µs, not 6
//     (rereadIfStale reads in order; with the unordered reading it sleeps
//     6 µs).
func TestStaleReadingNeverRefuses(t *testing.T) {
	c := &staleClock{t: time.Unix(1000, 0), lag: 5 * time.Microsecond}
	l, err := NewBursty(1e6, WithClock(c), WithMaxBurstSeconds(0))
	if err != nil {
		t.Fatal(err)
	}
	if !l.sw.ReadsEarly() {
		t.Fatal("a limiter on an orderedClock does not confirm its refusals")
	}
	c.t = c.t.Add(10 * time.Microsecond)
	if !l.TryAcquire(1, 0) {
		t.Fatal("first TryAcquire refused")
	}
	// Next free at 11 µs after the start (on the unordered line: 10 + 1);
	// the unordered reading says 10, the ordered one 15.
	if !l.TryAcquire(1, 0) {
		t.Fatal("refused on the unordered reading, 1 µs before the next free moment; the ordered reading is 4 µs past it")
	}
	// Next free now 16 µs: the unordered reading is 6 µs before it, the
	// ordered one 1 µs.
	c.sleeps = nil
	if !l.TryAcquire(1, 20*time.Microsecond) {
		t.Fatal("refused within its timeout")
	}
	if len(c.sleeps) != 1 || c.sleeps[0] != time.Microsecond {
		t.Fatalf("slept %v, want [1µs]: the wait from the ordered reading", c.sleeps)
	}
}
