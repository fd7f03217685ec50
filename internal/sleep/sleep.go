// Package sleep waits on a timer or a context, whichever ends first, for the
// limiters' Acquire paths (the root package's default clock, distributed's,
// and clocktest's adapter of benbjohnson/clock).
//
// The one thing it adds to a select: a context that ends at the very
// instant the wait does has not cut the wait short. Acquire accepts a
// deadline exactly as far away as its wait (the wait can be met), and then
// the timer and the context's deadline fire together. In a testing/synctest
// bubble the context's timer can run, and close Done, before the sleeper's
// timer has sent: a bare select then failed an Acquire whose wait was
// served and gave its permits back (seen on arm64 and s390x under qemu).
// So when the context ends, the time decides: if the wait's time has come,
// the wait was served.
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
	start := time.Now()
	t := time.NewTimer(d)
	defer t.Stop()
	return Await(ctx, t.C, func() bool { return time.Since(start) >= d })
}

// Await waits for c (a timer's channel) or for ctx to end. When ctx ends
// first, served reports whether the wait's time has come all the same (the
// timer is due but has not sent yet): then the wait was served and Await
// returns nil, else ctx's error.
func Await(ctx context.Context, c <-chan time.Time, served func() bool) error {
	select {
	case <-c:
		return nil
	case <-ctx.Done():
		if served() {
			return nil
		}
		return ctx.Err()
	}
}
