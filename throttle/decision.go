package throttle

import "time"

// Never is the RetryAfter of a request that can never be allowed: it asks
// for more than the limit (n > Decision.Limit). redis-cell answers -1 there
// too; unlike redis-cell, ours is documented and distinct from "allowed".
const Never time.Duration = -1

// Decision is the answer to "may key K do n now?", with what CL.THROTTLE
// replies.
type Decision struct {
	// Allowed reports whether the request was admitted (and counted).
	// A peek (n = 0) is always allowed and counts nothing.
	Allowed bool
	// Limit is the most a key can do at once: Burst for GCRA and the
	// buckets, Count for the windows and the sliding log.
	Limit int
	// Remaining is how many more requests of 1 the key could make now,
	// after this one if it was allowed.
	Remaining int
	// RetryAfter is 0 when allowed; for a refused request, the time until
	// the same request would be allowed if nothing else happened (exact to
	// the microsecond, rounded up); Never (negative) when it can never be.
	RetryAfter time.Duration
	// ResetAfter is the time until the key is back to its full allowance
	// (Remaining == Limit) if nothing else happens; 0 if it is already.
	ResetAfter time.Duration
}

// Decisions are the answers of AllowAll, one per Check, in order.
type Decisions []Decision

// Allowed reports whether every check allowed (and so all were counted).
func (ds Decisions) Allowed() bool {
	for _, d := range ds {
		if !d.Allowed {
			return false
		}
	}
	return true
}

// Strictest returns the decision a caller should act on: when refused, the
// refusal with the longest RetryAfter (Never first); when allowed, the one
// with the fewest Remaining. The zero Decision for none.
func (ds Decisions) Strictest() Decision {
	var best Decision
	for i, d := range ds {
		switch {
		case i == 0:
			best = d
		case d.Allowed != best.Allowed:
			if !d.Allowed {
				best = d
			}
		case !d.Allowed:
			if d.RetryAfter == Never || (best.RetryAfter != Never && d.RetryAfter > best.RetryAfter) {
				best = d
			}
		case d.Remaining < best.Remaining:
			best = d
		}
	}
	return best
}
