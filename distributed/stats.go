package distributed

import (
	"time"
)

// Stats reports what a Limiter has done since it was made.
type Stats struct {
	Leases           int64         // lease calls that granted permits
	PermitsLeased    int64         // permits granted by those calls
	LargestLease     int64         // the most permits granted by one call
	EmptyReplies     int64         // lease calls refused: the global bucket was empty
	Refunds          int64         // refund calls that gave permits back
	PermitsRefunded  int64         // permits given back
	PermitsLapsed    int64         // leased permits that expired unspent
	RedisCalls       int64         // every script call, successful or not
	RedisErrors      int64         // calls that failed or timed out
	LocalDecisions   int64         // Acquire/TryAcquire answered from the pool without waiting for Redis (the fallback's answers: FallbackAdmitted)
	RemoteDecisions  int64         // those that waited for a Redis reply
	FallbackAdmitted int64         // permits admitted by the fallback limiter
	FallbackTime     time.Duration // time spent with Redis unreachable
	InFallback       bool          // Redis is unreachable now
	// FallbackRate is the rate, in permits per second, at which this
	// process admits on its own while InFallback: the safe rate, or the
	// fleet's rate over the processes Redis last reported; 0 while it
	// refuses instead (failing closed, no share known yet, or Redis set
	// up wrong: see ErrMisconfigured).
	FallbackRate float64
	Held         int64   // permits in the local pool now
	Processes    int     // live processes Redis last reported
	Demand       float64 // measured requested demand, permits/s
	LastError    error   // the last Redis error, if any
	// What the name holds, from this limiter's first lease: the fleet's
	// rate (as last reported: SetRate changes it), its kind ("bursty" or
	// "warming-up") and unit (WithUnit), and whether any of them differed
	// from what this limiter was made with when it joined (it then adopted
	// the stored ones; WithRefuseMismatch refuses instead, and these say
	// what it refused). Empty until the first lease reply (see Join).
	StoredRate float64
	StoredKind string
	StoredUnit string
	Mismatch   bool
}

// Stats returns a snapshot of the limiter's counters.
func (l *Limiter) Stats() Stats {
	if !l.made() {
		return Stats{}
	}
	now := l.elapsed()
	l.mu.Lock()
	defer l.mu.Unlock()
	held := l.heldLocked(now) // counts what lapsed
	s := l.st
	s.Held = held
	s.Processes = l.processes
	s.Demand = l.demand
	s.LastError = l.lastErr
	if l.joined || l.mismatch {
		// Joined, the fleet's rate is l.rate (SetRate moves it); refused,
		// l.rate stays this limiter's own.
		s.StoredRate, s.StoredKind, s.StoredUnit, s.Mismatch = l.storedRate, kindName(l.storedKind), l.storedUnit, l.mismatch
		if l.joined {
			s.StoredRate = l.rate
		}
	}
	s.InFallback = !l.healthy
	if !l.healthy {
		s.FallbackTime += now - l.fallbackAt
		if l.cfg.policy == FailOpen {
			s.FallbackRate = l.fallbackRate
		}
	}
	return s
}

// kindName is Stats' name of engine.lua's kind.
func kindName(kind string) string {
	if kind == "w" {
		return "warming-up"
	}
	return "bursty"
}
