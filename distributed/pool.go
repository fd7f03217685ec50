package distributed

import (
	"context"
	"fmt"
	"math"
	"sort"
	"time"

	"github.com/smoothrate/ratelimit"
	"github.com/smoothrate/ratelimit/internal/sat"
	"github.com/smoothrate/ratelimit/internal/tsc"
)

// tranche is the permits of one lease still held locally.
type tranche struct {
	n             int64
	usable        time.Duration // local time from which they may be spent
	expires       time.Duration // local time at which unspent ones lapse
	configVersion int64         // config version they were leased under
	incarnation   int64         // the state incarnation they came from (-1: mixed)
}

// Acquire takes permits, waiting until the fleet's shared limiter allows
// them, and returns how long it waited. It honours ctx: if ctx ends or its
// deadline cannot be met, Acquire returns an error (wrapping ctx's error or
// context.DeadlineExceeded) and spends nothing; permits it had set aside go
// back to the local pool.
//
// While Redis is unreachable a FailOpen limiter admits through its local
// fallback limiter, and a FailClosed one returns an error wrapping
// ErrUnavailable. permits <= 0 is an error wrapping
// ratelimit.ErrInvalidPermits; a nil ctx is ratelimit.ErrNilContext.
func (l *Limiter) Acquire(ctx context.Context, permits int) (time.Duration, error) {
	if permits <= 0 {
		return 0, fmt.Errorf("%w: %d", ratelimit.ErrInvalidPermits, permits)
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
	n := int64(permits)
	begin := l.elapsedFast()
	deadline := l.localDeadline(ctx, begin)
	remote := false

	l.mu.Lock()
	if l.closed {
		l.mu.Unlock()
		return 0, ErrClosed
	}
	l.noteDemand(n, begin)
	for iter := 0; ; iter++ {
		now := begin // the hot path reads the clock once
		if iter > 0 {
			now = l.elapsed()
		} else if l.unordered && now+tsc.ReorderSlack >= l.nextLapse {
			// A tranche lapses about now: decide on an ordered reading.
			now = l.elapsed()
			begin, deadline = now, l.localDeadline(ctx, now)
		}
		at, taken, ok, enough := l.takeLocked(n, now, deadline)
		if !ok && iter == 0 && l.unordered {
			// Fail or ask Redis only on an ordered reading
			// (elapsedFast): decide again on one. (A wait computed on
			// the unordered reading is at most a fraction of a
			// microsecond too long: never early.)
			begin = l.elapsed()
			deadline = l.localDeadline(ctx, begin)
			continue
		}
		if ok {
			l.countDecision(remote)
			l.maintainLocked(now)
			l.mu.Unlock()
			if at > now {
				if err := l.sleep(ctx, at-now); err != nil {
					l.giveBack(taken)
					return 0, err
				}
			}
			return max(at, now) - begin, nil
		}
		if enough {
			// The permits are held but usable only after the deadline.
			l.mu.Unlock()
			return 0, fmt.Errorf("distributed: permits usable in %v, after the context deadline: %w", at-now, context.DeadlineExceeded)
		}
		if l.inflight != nil {
			ch := l.inflight
			l.mu.Unlock()
			select {
			case <-ch:
			case <-ctx.Done():
				return 0, ctx.Err()
			}
			l.mu.Lock()
			remote = true
			if l.closed {
				l.mu.Unlock()
				return 0, ErrClosed
			}
			continue
		}
		wait := min(max(deadline-now, 0), maxWait)
		if aheadAt := l.aheadAt; now < aheadAt-wait {
			// Redis said no lease can be had before then: back off
			// instead of polling.
			l.mu.Unlock()
			if aheadAt > deadline {
				return 0, fmt.Errorf("distributed: no permits for %v, past the context deadline: %w", aheadAt-now, context.DeadlineExceeded)
			}
			askAt := aheadAt - wait
			if err := l.sleep(ctx, askAt-now); err != nil {
				return 0, err
			}
			l.mu.Lock()
			if l.closed {
				l.mu.Unlock()
				return 0, ErrClosed
			}
			continue
		}
		if !l.healthy && now < l.probeAt {
			return l.fallbackAcquire(ctx, permits)
		}
		// Ask Redis in this goroutine, for at least what is missing.
		need := max(n-l.heldLocked(now), 1)
		l.leaseLocked(need, wait)
		remote = true
		if l.closed {
			l.mu.Unlock()
			return 0, ErrClosed
		}
	}
}

// TryAcquire takes permits if they can be had within timeout and reports
// whether it did, sleeping at most timeout when the permits it holds become
// usable a little later. With timeout 0 it never waits for Redis while
// another call is in flight or while the shared bucket is known to be
// empty: those answers are made locally. A negative timeout counts as 0;
// permits <= 0 is refused.
func (l *Limiter) TryAcquire(permits int, timeout time.Duration) bool {
	if permits <= 0 || !l.made() {
		return false
	}
	n := int64(permits)
	timeout = max(timeout, 0)
	begin := l.elapsedFast()
	latest := time.Duration(sat.Add(int64(begin), int64(timeout)))
	asked := false

	l.mu.Lock()
	if l.closed {
		l.mu.Unlock()
		return false
	}
	l.noteDemand(n, begin)
	for iter := 0; ; iter++ {
		now := begin // the hot path reads the clock once
		if iter > 0 {
			now = l.elapsed()
		} else if l.unordered && now+tsc.ReorderSlack >= l.nextLapse {
			// A tranche lapses about now: decide on an ordered reading.
			now = l.elapsed()
			latest = max(latest, time.Duration(sat.Add(int64(now), int64(timeout))))
		}
		at, _, ok, enough := l.takeLocked(n, now, max(latest, now))
		if !ok && iter == 0 && l.unordered {
			// Refuse or ask Redis only on an ordered reading
			// (elapsedFast): decide again on one.
			latest = max(latest, time.Duration(sat.Add(int64(l.elapsed()), int64(timeout))))
			continue
		}
		if ok {
			l.countDecision(asked)
			l.maintainLocked(now)
			l.mu.Unlock()
			if at > now {
				_ = l.sleep(context.Background(), at-now)
			}
			return true
		}
		if asked || enough {
			// Either Redis has just answered, or the permits are held
			// and only become usable later: asking again would be
			// polling.
			l.countDecision(asked)
			l.mu.Unlock()
			return false
		}
		if l.inflight != nil {
			if timeout == 0 {
				l.countDecision(false)
				l.mu.Unlock()
				return false
			}
			ch := l.inflight
			l.mu.Unlock()
			<-ch // bounded by the call timeout
			l.mu.Lock()
			if l.closed {
				l.mu.Unlock()
				return false
			}
			latest = max(latest, l.elapsed())
			asked = true
			continue
		}
		// Book a lease even if it becomes usable only after the timeout
		// (up to the booking horizon): this call may fail, but the next
		// ones will find permits. Asking only for permits usable at once
		// would starve this process whenever others book ahead.
		wait := min(max(latest-now, l.horizon()), maxWait)
		if now < l.aheadAt-wait {
			// Redis said no lease can be had yet: decide locally.
			l.countDecision(false)
			l.mu.Unlock()
			return false
		}
		if !l.healthy {
			if now >= l.probeAt && l.inflight == nil {
				// Probe in the background; answer from the fallback
				// meanwhile.
				l.startLeaseLocked(now, 0, 0)
				if l.healthy { // the synchronous test mode
					continue
				}
			}
			return l.fallbackTry(permits, timeout)
		}
		need := max(n-l.heldLocked(now), 1)
		l.leaseLocked(need, wait)
		asked = true
		if l.closed {
			l.mu.Unlock()
			return false
		}
		// The round trip itself does not count against the timeout.
		latest = max(latest, l.elapsed())
	}
}

func (l *Limiter) countDecision(remote bool) {
	if remote {
		l.st.RemoteDecisions++
	} else {
		l.st.LocalDecisions++
	}
}

// heldLocked returns the permits still held. It is O(1) unless a tranche
// may have lapsed, in which case pruneLocked drops what has.
func (l *Limiter) heldLocked(now time.Duration) int64 {
	if now >= l.nextLapse {
		l.pruneLocked(now)
	}
	return l.held
}

// pruneLocked drops lapsed (and empty) tranches and recomputes held and
// nextLapse from what is left.
func (l *Limiter) pruneLocked(now time.Duration) {
	var held int64
	next := time.Duration(math.MaxInt64)
	kept := l.pool[:0]
	for _, t := range l.pool {
		if now >= t.expires {
			l.st.PermitsLapsed += t.n
			continue
		}
		if t.n == 0 {
			continue
		}
		held += t.n
		next = min(next, t.expires)
		kept = append(kept, t)
	}
	clear(l.pool[len(kept):])
	l.pool = kept
	l.held, l.nextLapse = held, next
}

// emptyPoolLocked forgets every tranche.
func (l *Limiter) emptyPoolLocked() {
	l.pool = nil
	l.held, l.nextLapse = 0, math.MaxInt64
}

// takeLocked removes n permits from the pool if they are all usable by
// latest. It returns the moment they are all usable and, as one tranche,
// what it took (to give back if the caller's context ends before that
// moment). enough reports that the pool holds n permits even when they are
// usable too late. It allocates nothing.
func (l *Limiter) takeLocked(n int64, now, latest time.Duration) (at time.Duration, taken tranche, ok, enough bool) {
	if l.heldLocked(now) < n {
		return 0, tranche{}, false, false
	}
	// The pool is sorted by usable time; the first n permits are usable
	// at the usable time of the tranche holding the n-th (nearly always
	// the first).
	left := n
	for _, t := range l.pool {
		at = t.usable
		left -= t.n
		if left <= 0 {
			break
		}
	}
	at = max(at, now)
	if at > latest {
		return at, tranche{}, false, true
	}
	// What is given back is usable at at, ends with the earliest of the
	// leases it came from, and carries the oldest version (refundable
	// only if all of it is current).
	taken = tranche{n: n, usable: at, expires: math.MaxInt64, configVersion: math.MaxInt64, incarnation: l.pool[0].incarnation}
	for left = n; left > 0; {
		t := &l.pool[0]
		k := min(t.n, left)
		taken.expires = min(taken.expires, t.expires)
		taken.configVersion = min(taken.configVersion, t.configVersion)
		if t.incarnation != taken.incarnation {
			taken.incarnation = -1
		}
		t.n -= k
		left -= k
		if t.n == 0 {
			l.pool[0] = tranche{}
			l.pool = l.pool[1:]
		}
	}
	// nextLapse may now be earlier than any tranche left: that only
	// makes the next heldLocked prune once.
	l.held -= n
	return at, taken, true, true
}

// giveBack returns permits taken by an Acquire whose context ended before
// it could use them.
func (l *Limiter) giveBack(t tranche) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.insertLocked(t)
}

func (l *Limiter) insertLocked(t tranche) {
	i := sort.Search(len(l.pool), func(i int) bool { return l.pool[i].usable > t.usable })
	l.pool = append(l.pool, tranche{})
	copy(l.pool[i+1:], l.pool[i:])
	l.pool[i] = t
	l.held += t.n
	l.nextLapse = min(l.nextLapse, t.expires)
}
