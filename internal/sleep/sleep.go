// Package sleep waits on a timer or a context, whichever ends first, for the
// limiters' Acquire paths (the root package's default clock and
// distributed's).
//
// The one thing it adds to a select: a context that ends at the very
// instant the wait does has not cut the wait short. Acquire accepts a
// deadline exactly as far away as its wait (the wait can be met), and then
// the timer and the context's deadline fire together; in a
// testing/synctest bubble, or when the context's timer runs first, both
// are ready when the sleeper wakes and a bare select picks either at
// random, failing an Acquire whose wait was served and giving its permits
// back.
package sleep

import (
	"context"
	"time"
)

// Ctx waits for d, or until ctx is done, and returns ctx's error only if
// ctx ended before d elapsed.
func Ctx(ctx context.Context, d time.Duration) error {
	if d <= 0 {
		return nil
	}
	if ctx.Done() == nil {
		time.Sleep(d)
		return nil
	}
	t := time.NewTimer(d)
	defer t.Stop()
	return Await(ctx, t.C)
}

// Await waits for c (a timer's channel) or for ctx to end. When ctx has
// ended and c is ready too (the timer is due), the wait was served: it
// returns nil. A time.Timer's channel is ready from the timer's due time on
// (Go 1.23's timers), so this is exact, not a race with a goroutine.
func Await(ctx context.Context, c <-chan time.Time) error {
	select {
	case <-c:
		return nil
	case <-ctx.Done():
		select {
		case <-c:
			return nil
		default:
			return ctx.Err()
		}
	}
}
