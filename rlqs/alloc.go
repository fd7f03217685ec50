package rlqs

import (
	"math"
	"time"

	"github.com/smoothrate/ratelimit/internal/fairshare"
)

// The allocator: how one bucket's budget is split among the clients that
// report it, as a pure function of the clients' state and of the time.
//
// Each client is a claimant: what it asked for (its demand, from its
// reports), the rate of the assignment it runs now, and what it may still
// be running at although the server has sent it less (held, until
// heldUntil). An assignment reaches its client some time after it is sent:
// the server assumes less than the settle time. So lowering a client's
// rate does not free the difference at once: the old rate stays committed
// for the settle time, and only then may another client be given it
// ("lower before raise"). A client that is gone (its stream closed) keeps
// its last rate committed until that assignment would have expired at
// the client. With these commitments, allocate keeps, at every instant,
//
//	Σ committed ≤ budget
//
// which is what the bound in docs/rlqs.md rests on: every Envoy admits at
// most its token bucket's rate over time plus the bucket's capacity.
//
// Targets are the max-min fair shares of the budget (fairshare.Shares) over
// the active claimants' demands, computed on 1 − allocMargin of the budget.
// A claimant whose rate is within allocBand of its target keeps it: in
// Envoy a new token bucket replaces the old one (and starts full), so
// small corrections would cost more than they bring; the margin leaves
// room for the rates kept above their targets.

const (
	// allocBand is the relative distance from its target within which a
	// claimant keeps its rate.
	allocBand = 0.02
	// allocSlack is the band above a target that is the claimant's own
	// demand (it wants less than the level): a demand measured over one
	// reporting interval is a count, as noisy as a count (10 requests a
	// second read as 9 or 11), and a claimant that wants little is not
	// lowered for that noise alone. It still gives the difference back
	// when another claimant is short.
	allocSlack = 0.25
	// allocShort is how far below its target a claimant must be for the
	// claimants kept above theirs to give the difference back: further
	// than the band, so that a level that moves within the band does not
	// make everyone's token bucket change.
	allocShort = 0.05
	// allocMargin is the part of the budget left out of the targets.
	allocMargin = 0.01
)

// claimant is one client's share of one bucket, as the allocator sees it.
type claimant struct {
	// demand is the rate the client asked for (allowed + denied over
	// its last reports' time), requests per second; +Inf until it is
	// measured.
	demand float64
	// gone: the client's stream has ended; it gets no rate, and only
	// its holds count, until they end.
	gone bool
	// rate is the rate of the assignment sent last (0: none, or a
	// blanket rule).
	rate float64
	// holds are higher rates the client may still be running: an
	// assignment whose replacement it may not have received yet (until
	// the settle time has passed), or, gone, its last one until it
	// expires. Each decrease adds one; a hold that a later, higher or
	// equal, one outlasts is dropped, so the list is short: rates
	// falling, ends rising.
	holds []hold

	next   float64 // allocate's result: the rate to assign
	target float64 // and the max-min fair share it was aimed at
}

// hold is a rate that counts until a time.
type hold struct {
	rate  float64
	until time.Time
}

// committed is the highest rate the client may be admitting at now.
func (c *claimant) committed(now time.Time) float64 {
	r := c.rate
	for _, h := range c.holds {
		if now.Before(h.until) {
			r = max(r, h.rate)
		}
	}
	return r
}

// heldUntil is when the client's last hold ends (zero: none).
func (c *claimant) heldUntil() time.Time {
	var t time.Time
	for _, h := range c.holds {
		if h.until.After(t) {
			t = h.until
		}
	}
	return t
}

// addHold records that rate may be in force until until, and forgets the
// holds that have ended at now or that the new one covers.
func (c *claimant) addHold(now time.Time, rate float64, until time.Time) {
	out := c.holds[:0]
	for _, h := range c.holds {
		if now.Before(h.until) && !(h.rate <= rate && !h.until.After(until)) {
			out = append(out, h)
		}
	}
	c.holds = out
	if rate > 0 && now.Before(until) {
		c.holds = append(c.holds, hold{rate, until})
	}
}

// assign records that rate was sent at now: a lower rate than before
// keeps the old one committed until the settle time has passed.
func (c *claimant) assign(now time.Time, settle time.Duration, rate float64) {
	if rate < c.rate {
		c.addHold(now, c.rate, now.Add(settle))
	}
	c.rate = rate
}

// leave records that the client's stream ended at now: its rate stays
// committed until its assignment would have expired (expires), and so do
// its holds until theirs.
func (c *claimant) leave(now, expires time.Time) {
	c.addHold(now, c.rate, expires)
	c.gone, c.rate, c.demand = true, 0, 0
}

// allocate sets next for every active claimant of cs, splitting budget at
// now. It never raises the sum of the commitments above budget (nor above
// where it already is, if a lower limit or claim put it there): a raise
// is paid from what the commitments leave free, decreases free nothing
// until they settle.
func allocate(now time.Time, budget float64, cs []*claimant) {
	budget = max(budget, 0)
	var demands []float64
	committed := 0.0
	for _, c := range cs {
		committed += c.committed(now)
		if !c.gone {
			demands = append(demands, c.demand)
		}
	}
	targets := fairshare.Shares(budget*(1-allocMargin), demands, nil)
	free := budget - committed
	var raise, above []*claimant
	short := false
	i := 0
	for _, c := range cs {
		if c.gone {
			continue
		}
		x := targets[i]
		i++
		c.next = c.rate
		switch {
		case c.rate > x*(1+band(c, x)) || (free < 0 && c.rate > x):
			c.next = x // lowered now, freed once settled
		case c.rate == 0 && x > 0 || c.rate < x*(1-allocBand):
			short = short || c.rate < x*(1-allocShort)
			if free > 0 {
				c.next = x // the target: raiseWithin pays for what it can
				raise = append(raise, c)
			}
		case c.rate > x:
			above = append(above, c)
		}
		// Targets are kept for the yield below.
		c.target = x
	}
	if len(raise) > 0 {
		raiseWithin(now, free, raise)
		short = false
		for _, c := range raise {
			short = short || c.next < c.target*(1-allocShort)
		}
	}
	if short {
		// Someone is clearly below its share and nothing is left to
		// raise it with: those kept above theirs (within the band) give
		// the difference back, freed once settled.
		for _, c := range above {
			c.next = c.target
		}
	}
}

// band is how far above its target x claimant c may stay.
func band(c *claimant, x float64) float64 {
	if x >= c.demand {
		return allocSlack
	}
	return allocBand
}

// raiseWithin gives each claimant of cs (whose next holds its target)
// min(target, λ) — at least its rate — for the highest water level λ
// whose cost fits in free: a claimant costs what its new rate commits
// beyond what it has committed already. Raises smaller than the band are
// not worth a new token bucket and are dropped.
func raiseWithin(now time.Time, free float64, cs []*claimant) {
	cost := func(lambda float64) float64 {
		sum := 0.0
		for _, c := range cs {
			r := max(c.rate, min(c.next, lambda))
			sum += max(0, r-c.committed(now))
		}
		return sum
	}
	top := 0.0
	for _, c := range cs {
		top = max(top, c.next)
	}
	lambda := top
	if cost(top) > free {
		lo, hi := 0.0, top
		for range 64 {
			mid := lo + float64((hi-lo)/2)
			if cost(mid) <= free {
				lo = mid
			} else {
				hi = mid
			}
		}
		lambda = lo
	}
	for _, c := range cs {
		r := max(c.rate, min(c.next, lambda))
		if c.rate > 0 && r < c.rate*(1+allocBand) {
			r = c.rate
		}
		if math.IsNaN(r) {
			r = c.rate
		}
		c.next = r
	}
}
