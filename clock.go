package ratelimit

import (
	"context"
	"time"

	"github.com/smoothrate/ratelimit/internal/sleep"
)

// Clock is the limiter's source of time: it reads the time and sleeps. It is
// all a limiter needs from the outside world, so a fake Clock makes every
// schedule deterministic (see package clocktest).
//
// Now must be monotonic for a limiter to be exact; a clock that steps back
// only makes the next waits longer, it never creates permits.
//
// Sleep blocks for d or until ctx is done, whichever comes first, and
// returns ctx's error in the second case. Limiters never sleep while holding
// their lock. A limiter calls Sleep for every granted Acquire and TryAcquire
// of a custom clock, even with d == 0, as Guava does with its stopwatch; a
// Sleep with d <= 0 must return at once.
type Clock interface {
	Now() time.Time
	Sleep(ctx context.Context, d time.Duration) error
}

// SystemClock is the default Clock: the time package's monotonic clock and
// timers. Inside a testing/synctest bubble it reads the bubble's fake time,
// so limiters need no injection to be tested there. A Limiter given
// SystemClock, or no clock, reads the same monotonic time more cheaply
// where it can: from the processor's time-stamp counter, where that
// counter is invariant (outside synctest bubbles; see docs/design.md,
// D10).
type SystemClock struct{}

// Now returns time.Now().
func (SystemClock) Now() time.Time { return time.Now() }

// Sleep waits for d on a timer, or until ctx is done.
func (SystemClock) Sleep(ctx context.Context, d time.Duration) error {
	return sleep.Ctx(ctx, d)
}
