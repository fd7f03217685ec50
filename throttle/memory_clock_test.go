package throttle

import (
	"context"
	"testing"
	"testing/synctest"
	"time"

	"github.com/smoothrate/ratelimit/internal/tsc"
)

// TestMemoryClockFollowsWall reads the default clock against the wall
// clock for 300 ms of real time (what is measured is time itself): every
// reading lies between the wall readings around it, within 1 ms, through
// the first anchor (monotonic) and, where the counter is usable, the
// scaled counter from tsc.MinSpan on.
func TestMemoryClockFollowsWall(t *testing.T) {
	s := memStore()
	if s.tsc.Load() != tsc.Usable() {
		t.Fatalf("store uses the counter: %v; usable: %v", s.tsc.Load(), tsc.Usable())
	}
	const tol = 1000 // µs
	scaled := false
	for end := time.Now().Add(300 * time.Millisecond); time.Now().Before(end); {
		before := time.Now().UnixMicro()
		got, err := s.now()
		after := time.Now().UnixMicro()
		if err != nil || got < before-tol || got > after+tol {
			t.Fatalf("now() = %d, %v; wall clock read %d before and %d after", got, err, before, after)
		}
		if a := s.wall.Load(); a != nil && a.usPerTick > 0 {
			scaled = true
		}
	}
	if scaled != tsc.Usable() {
		t.Errorf("counter scaled: %v; usable: %v", scaled, tsc.Usable())
	}
	if tsc.Usable() && !s.tsc.Load() {
		t.Error("the counter was given up")
	}
}

// TestMemoryStoreSynctest: inside a testing/synctest bubble, a store with
// the default clock follows the bubble's fake time. The counter runs on
// while the bubble's clock stands still, so a store that scaled it against
// the bubble's time (as this one did before tsc.FakeTime) saw the fake
// 150 ms between wall readings as a few thousand ticks, and from then on
// counted a microsecond of real time as seconds: RetryAfter came out
// anywhere below 100 ms, and admitted requests were refused.
func TestMemoryStoreSynctest(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := memStore()
		l, err := New(s, GCRA, Limit{Count: 1, Period: 100 * time.Millisecond})
		if err != nil {
			t.Fatal(err)
		}
		ctx := context.Background()
		for i := range 30 {
			d, err := l.Allow(ctx, "k")
			if err != nil || !d.Allowed {
				t.Fatalf("step %d: first request %+v, %v; want it allowed", i, d, err)
			}
			d, err = l.Allow(ctx, "k")
			if err != nil || d.Allowed || d.RetryAfter != 100*time.Millisecond {
				t.Fatalf("step %d: second request at the same fake instant %+v, %v; want a refusal with RetryAfter 100ms", i, d, err)
			}
			time.Sleep(150 * time.Millisecond)
		}
	})
}
