package distributed

import (
	"context"
	"testing"
	"testing/synctest"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/smoothrate/ratelimit/internal/tsc"
)

// TestCounterClock: with the default clock a Limiter reads the processor's
// counter where it can (internal/tsc), and its two readings follow
// time.Since within 20 µs; one made inside a testing/synctest bubble reads
// the bubble's time instead.
func TestCounterClock(t *testing.T) {
	c := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1"})
	defer c.Close()
	l, err := New(c, "counter-clock", 10)
	if err != nil {
		t.Fatal(err)
	}
	if l.sw.Counter() != tsc.Usable() {
		t.Fatalf("limiter reads the counter: %v; the counter is usable: %v", l.sw.Counter(), tsc.Usable())
	}
	const tol = 20 * time.Microsecond
	for range 100_000 {
		before := time.Since(l.sw.Start())
		a, b := l.elapsedFast(), l.elapsed()
		after := time.Since(l.sw.Start())
		if a < before-tol || a > after+tol || b < before-tol || b > after+tol {
			t.Fatalf("elapsedFast() = %v, elapsed() = %v; time.Since read %v before and %v after", a, b, before, after)
		}
	}
	synctest.Test(t, func(t *testing.T) {
		c := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1"})
		defer c.Close()
		l, err := New(c, "counter-clock-bubble", 10)
		if err != nil {
			t.Fatal(err)
		}
		if l.sw.Counter() {
			t.Fatal("a limiter made in a synctest bubble reads the counter")
		}
		before := l.elapsed()
		time.Sleep(time.Hour)
		if d := l.elapsedFast() - before; d != time.Hour {
			t.Fatalf("an hour of the bubble's time read as %v", d)
		}
	})
}

// staleClock reads a time lag behind its ordered reading, as an unordered
// reading of the counter may (orderedClock).
type staleClock struct {
	t   time.Time
	lag time.Duration
}

func (c *staleClock) Now() time.Time        { return c.t.Add(-c.lag) }
func (c *staleClock) nowOrdered() time.Time { return c.t }
func (c *staleClock) Sleep(ctx context.Context, d time.Duration) error {
	return ctx.Err()
}

// TestStaleReadingNeverDecides: the hot path's two ordered second
// readings, made deterministic with a clock whose unordered reading lags
// by 5 µs (within tsc.ReorderSlack), on permits put in the pool by hand
// (no Redis call is made).
//   - Permits usable 2 µs after the unordered reading (3 µs before the
//     ordered one) are granted by TryAcquire(1, 0): refusing on the first
//     reading would refuse on a time read before the state (without the
//     second reading the call is refused).
//   - A tranche that lapses 2 µs after the unordered reading has lapsed on
//     the ordered one: its permit is counted lapsed, and the grant comes
//     from the next tranche (on the unordered reading alone, it is spent).
func TestStaleReadingNeverDecides(t *testing.T) {
	c := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1"})
	defer c.Close()
	clk := &staleClock{t: time.Unix(1000, 0), lag: 5 * time.Microsecond}
	l, err := New(c, "stale-reading", 1000, WithLocalClock(clk))
	if err != nil {
		t.Fatal(err)
	}
	if !l.sw.ReadsEarly() {
		t.Fatal("a limiter on an orderedClock does not read its clock again")
	}
	clk.t = clk.t.Add(time.Second)
	fast := l.elapsedFast()
	l.mu.Lock()
	l.insertLocked(tranche{n: 10, usable: fast + 2*time.Microsecond, expires: fast + time.Hour})
	l.mu.Unlock()
	if !l.TryAcquire(1, 0) {
		t.Fatal("refused permits usable before the ordered reading")
	}

	l2, err := New(c, "stale-lapse", 1000, WithLocalClock(clk))
	if err != nil {
		t.Fatal(err)
	}
	fast = l2.elapsedFast()
	l2.mu.Lock()
	l2.insertLocked(tranche{n: 1, usable: 0, expires: fast + 2*time.Microsecond})
	l2.insertLocked(tranche{n: 10, usable: 0, expires: fast + time.Hour})
	l2.mu.Unlock()
	if !l2.TryAcquire(1, 0) {
		t.Fatal("refused with 10 permits usable")
	}
	if st := l2.Stats(); st.PermitsLapsed != 1 || st.Held != 9 {
		t.Fatalf("lapsed %d, held %d; want the lapsing tranche's permit lapsed, the grant taken from the other (1, 9)", st.PermitsLapsed, st.Held)
	}
}
