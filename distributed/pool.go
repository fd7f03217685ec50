package distributed

import (
	"math"
	"sort"
	"time"
)

// leasePool is the permits this process holds, in tranches sorted by the
// time they become usable, and the one Redis call that may be in flight.
// Guarded by Limiter.mu (with Limiter.nextLapse, which belongs here).
type leasePool struct {
	pool     []tranche
	held     int64         // Σ pool[i].n, kept up to date so that the hot path never scans the pool
	inflight chan struct{} // non-nil while a Redis call is in flight; closed after
	// aheadAt: no lease with maximum wait w can be granted before
	// aheadAt - w (Redis said so).
	aheadAt   time.Duration
	leaseWait time.Duration // how far ahead the last lease was booked
}

// tranche is the permits of one lease still held locally.
type tranche struct {
	n             int64
	usable        time.Duration // local time from which they may be spent
	expires       time.Duration // local time at which unspent ones lapse
	configVersion int64         // config version they were leased under
	incarnation   int64         // the state incarnation they came from (-1: mixed)
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
