package distributed

import (
	"context"
	"fmt"
	"time"

	"github.com/smoothrate/ratelimit"
	"github.com/smoothrate/ratelimit/internal/sat"
	"github.com/smoothrate/ratelimit/internal/tsc"
)

// Acquire takes permits, waiting until the fleet's shared limiter allows
// them, and returns how long it waited. It honours ctx: if ctx ends or its
// deadline cannot be met, Acquire returns an error (wrapping ctx's error or
// context.DeadlineExceeded) and spends nothing; permits it had set aside go
// back to the local pool.
//
// While Redis is unreachable a FailOpen limiter admits through its local
// fallback limiter, and a FailClosed one returns an error wrapping
// ErrUnavailable. permits <= 0, or above MaxPermits, is an error wrapping
// ratelimit.ErrInvalidPermits; a nil ctx is ratelimit.ErrNilContext.
func (l *Limiter) Acquire(ctx context.Context, permits int) (time.Duration, error) {
	if permits <= 0 || uint64(permits) > MaxPermits {
		return 0, fmt.Errorf("%w: %d (want 1 to %d)", ratelimit.ErrInvalidPermits, permits, uint64(MaxPermits))
	}
	if !l.made() {
		return 0, errZero
	}
	if ctx == nil {
		return 0, ratelimit.ErrNilContext
	}
	if err := ctx.Err(); err != nil {
		return 0, err
	}
	wait, _, err := l.acquire(ctx, permits, 0)
	return wait, err
}

// TryAcquire takes permits if they can be had within timeout and reports
// whether it did, sleeping at most timeout when the permits it holds become
// usable a little later. With timeout 0 it never waits for Redis while
// another call is in flight or while the shared bucket is known to be
// empty: those answers are made locally. A negative timeout counts as 0;
// permits <= 0, or above MaxPermits, is refused.
func (l *Limiter) TryAcquire(permits int, timeout time.Duration) bool {
	if permits <= 0 || uint64(permits) > MaxPermits || !l.made() {
		return false
	}
	_, ok, _ := l.acquire(nil, permits, max(timeout, 0))
	return ok
}

// MaxPermits is the most permits one call may ask for: the shared state
// counts in float64 microseconds and permits, exact below 2^53, and a
// request of more would be debited from the fleet and never granted (the
// script's integer reply overflows).
const MaxPermits = 1<<53 - 1

// acquire is the one decision loop of Acquire (ctx not nil: wait, until
// ctx's deadline) and TryAcquire (ctx nil: refuse rather than wait, and
// take only permits usable within timeout). It takes the permits from the
// pool when it can; otherwise it waits for the call in flight, backs off
// while Redis has said no lease can be had, serves from the fallback while
// Redis is away, or leases in this goroutine, and decides again.
//
// The hot path reads the clock once, without ordering (elapsedFast), and
// grants on that reading only from a tranche that is not about to lapse;
// anything else is decided again on an ordered reading. A refusal or a
// wait that TryAcquire answers is counted as a decision here; Acquire
// counts only grants.
func (l *Limiter) acquire(ctx context.Context, permits int, timeout time.Duration) (wait time.Duration, ok bool, err error) {
	try := ctx == nil
	n := int64(permits)
	begin := l.elapsedFast()
	// latest is the last moment the permits may become usable: ctx's
	// deadline, or the timeout after the call began (a round trip to
	// Redis does not count against the timeout).
	var latest time.Duration
	if try {
		latest = time.Duration(sat.Add(int64(begin), int64(timeout)))
	} else {
		latest = l.localDeadline(ctx, begin)
	}
	// reread reads the clock in order and moves begin and latest with it.
	reread := func() time.Duration {
		now := l.elapsed()
		if try {
			latest = max(latest, time.Duration(sat.Add(int64(now), int64(timeout))))
		} else {
			begin, latest = now, l.localDeadline(ctx, now)
		}
		return now
	}
	remote := false // this decision waited for, or made, a Redis call

	l.mu.Lock()
	if l.closed {
		l.mu.Unlock()
		return 0, false, ErrClosed
	}
	l.noteDemand(n, begin)
	for iter := 0; ; iter++ {
		now := begin // the hot path reads the clock once
		if iter > 0 {
			now = l.elapsed()
		} else if l.sw.ReadsEarly() && now+tsc.ReorderSlack >= l.nextLapse {
			// A tranche lapses about now: decide on an ordered reading.
			now = reread()
		}
		limit := latest
		if try {
			limit = max(latest, now)
		}
		at, taken, ok, enough := l.takeLocked(n, now, limit)
		if !ok && iter == 0 && l.sw.ReadsEarly() {
			// Refuse, fail or ask Redis only on an ordered reading
			// (elapsedFast): decide again on one. (A wait computed on
			// the unordered reading is at most a fraction of a
			// microsecond too long: never early.)
			reread()
			continue
		}
		if ok {
			l.countDecision(remote)
			l.maintain(now)
			l.mu.Unlock()
			if at > now {
				if try {
					_ = l.sleep(context.Background(), at-now)
				} else if err := l.sleep(ctx, at-now); err != nil {
					l.giveBack(taken)
					return 0, false, err
				}
			}
			return max(at, now) - begin, true, nil
		}
		switch {
		case try && (remote || enough):
			// Either Redis has just answered, or the permits are held
			// and only become usable later: asking again would be
			// polling.
			l.countDecision(remote)
			l.mu.Unlock()
			return 0, false, nil
		case enough:
			// The permits are held but usable only after the deadline.
			l.mu.Unlock()
			return 0, false, fmt.Errorf("distributed: permits usable in %v, after the context deadline: %w", at-now, context.DeadlineExceeded)
		}
		if l.inflight != nil {
			if try && timeout == 0 {
				l.countDecision(false)
				l.mu.Unlock()
				return 0, false, nil
			}
			ch := l.inflight
			l.mu.Unlock()
			if try {
				<-ch // bounded by the call timeout
			} else {
				select {
				case <-ch:
				case <-ctx.Done():
					return 0, false, ctx.Err()
				}
			}
			l.mu.Lock()
			if l.closed {
				l.mu.Unlock()
				return 0, false, ErrClosed
			}
			remote = true
			if try {
				latest = max(latest, l.elapsed())
			}
			continue
		}
		// How far ahead a lease may be booked. Acquire: up to its
		// deadline. TryAcquire: even past its timeout (up to the booking
		// horizon): this call may fail, but the next ones will find
		// permits; asking only for permits usable at once would starve
		// this process whenever others book ahead.
		var ahead time.Duration
		if try {
			ahead = min(max(latest-now, l.horizon()), maxWait)
		} else {
			ahead = min(max(latest-now, 0), maxWait)
		}
		if aheadAt := l.aheadAt; now < aheadAt-ahead {
			// Redis said no lease can be had before then: TryAcquire
			// decides locally, Acquire backs off instead of polling.
			if try {
				l.countDecision(false)
				l.mu.Unlock()
				return 0, false, nil
			}
			l.mu.Unlock()
			if aheadAt > latest {
				return 0, false, fmt.Errorf("distributed: no permits for %v, past the context deadline: %w", aheadAt-now, context.DeadlineExceeded)
			}
			if err := l.sleep(ctx, aheadAt-ahead-now); err != nil {
				return 0, false, err
			}
			l.mu.Lock()
			if l.closed {
				l.mu.Unlock()
				return 0, false, ErrClosed
			}
			continue
		}
		if !l.healthy {
			if !try {
				if now < l.probeAt {
					wait, err := l.fallbackAcquire(ctx, permits)
					return wait, err == nil, err
				}
				// Probe: the lease below is the probe.
			} else {
				if now >= l.probeAt && l.inflight == nil {
					// Probe in the background; answer from the
					// fallback meanwhile.
					l.startLease(now, 0, 0)
					if l.healthy { // the synchronous test mode
						continue
					}
				}
				return 0, l.fallbackTry(permits, timeout), nil
			}
		}
		// Ask Redis in this goroutine, for at least what is missing.
		need := max(n-l.heldLocked(now), 1)
		l.leaseRoundTrip(need, ahead)
		remote = true
		if l.closed {
			l.mu.Unlock()
			return 0, false, ErrClosed
		}
		if try {
			// The round trip itself does not count against the timeout.
			latest = max(latest, l.elapsed())
		}
	}
}

// countDecision counts a decision as local or remote (Stats).
func (l *Limiter) countDecision(remote bool) {
	if remote {
		l.st.RemoteDecisions++
	} else {
		l.st.LocalDecisions++
	}
}
