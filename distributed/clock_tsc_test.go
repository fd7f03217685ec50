package distributed

import (
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
	if l.tsc != tsc.Usable() {
		t.Fatalf("limiter reads the counter: %v; the counter is usable: %v", l.tsc, tsc.Usable())
	}
	const tol = 20 * time.Microsecond
	for range 100_000 {
		before := time.Since(l.start)
		a, b := l.elapsedFast(), l.elapsed()
		after := time.Since(l.start)
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
		if l.tsc {
			t.Fatal("a limiter made in a synctest bubble reads the counter")
		}
		before := l.elapsed()
		time.Sleep(time.Hour)
		if d := l.elapsedFast() - before; d != time.Hour {
			t.Fatalf("an hour of the bubble's time read as %v", d)
		}
	})
}
