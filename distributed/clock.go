package distributed

import (
	"context"
	"math"
	"time"

	"github.com/smoothrate/ratelimit"
	"github.com/smoothrate/ratelimit/internal/sat"
	"github.com/smoothrate/ratelimit/internal/sleep"
	"github.com/smoothrate/ratelimit/internal/tsc"
)

// localClock is a Limiter's own time line: durations since New, on the
// clock of WithLocalClock or, by default, on the processor's counter or the
// monotonic clock (tsc.Stopwatch). It measures lease lifetimes, waits and
// demand; the fleet's rate runs on Redis's clock, never on this one. Set by
// New, then only read.
type localClock struct {
	clock ratelimit.Clock // nil: the time package
	sw    tsc.Stopwatch
}

// orderedClock is a Clock whose Now, like the counter's unordered reading,
// may come from a little before the state the limiter compares it with,
// and whose nowOrdered may not: tests implement it to show what a stale
// reading does (elapsedFast reads Now, elapsed nowOrdered).
type orderedClock interface {
	ratelimit.Clock
	nowOrdered() time.Time
}

// startClock starts the time line on clock (nil, or SystemClock: the
// process's).
func startClock(clock ratelimit.Clock) localClock {
	if _, ok := clock.(ratelimit.SystemClock); ok {
		clock = nil
	}
	var ordered func() time.Time
	if c, ok := clock.(orderedClock); ok {
		ordered = c.nowOrdered
	}
	return localClock{clock: clock, sw: tsc.NewStopwatch(clock, ordered)}
}

// elapsed reads the local clock in order, after every memory reference
// before it: the time since the limiter was made.
func (l *localClock) elapsed() time.Duration { return l.sw.ElapsedOrdered() }

// elapsedFast is elapsed for the hot path's first reading, unordered: with
// the default clock, where the processor's counter can be read, the counter
// read without a fence (about a third of what time.Since costs:
// internal/tsc's BenchmarkClock), which the processor may take a little
// before the memory references that precede it (as the root Limiter does:
// ratelimit.Limiter's elapsed).
// Acquire and TryAcquire grant on it only from a tranche that is not within
// tsc.ReorderSlack of lapsing, and a refusal or a call to Redis reads the
// clock again with elapsed. A grant that must wait for its permits waits
// from the unordered reading: at most a fraction of a microsecond longer,
// never less.
func (l *localClock) elapsedFast() time.Duration { return l.sw.ElapsedUnordered() }

// localDeadline converts ctx's deadline to the local time line.
func (l *localClock) localDeadline(ctx context.Context, now time.Duration) time.Duration {
	d, ok := ctx.Deadline()
	if !ok {
		return math.MaxInt64
	}
	var left time.Duration
	if l.clock == nil {
		left = time.Until(d)
	} else {
		left = d.Sub(l.clock.Now())
	}
	return time.Duration(sat.Add(int64(now), int64(left)))
}

func (l *localClock) sleep(ctx context.Context, d time.Duration) error {
	if d <= 0 {
		return ctx.Err()
	}
	if l.clock != nil {
		return l.clock.Sleep(ctx, d)
	}
	return sleep.Ctx(ctx, d)
}
