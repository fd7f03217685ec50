package smooth

import (
	"math"

	"github.com/smoothrate/ratelimit/internal/sat"
)

// Kind tells which of Guava's two SmoothRateLimiter flavours an engine is.
type Kind uint8

const (
	// Bursty stores up to maxBurstSeconds of unused permits and hands them
	// out for free (Guava's SmoothBursty).
	Bursty Kind = iota
	// WarmingUp starts cold, prices stored permits above the threshold
	// dearer than fresh ones and so ramps up to the stable rate over the
	// warm-up period (Guava's SmoothWarmingUp).
	WarmingUp
)

// String names the flavour as Guava's class does: "SmoothBursty" or
// "SmoothWarmingUp".
func (k Kind) String() string {
	if k == WarmingUp {
		return "SmoothWarmingUp"
	}
	return "SmoothBursty"
}

// Resolution constants: the number of ticks in one second.
const (
	// Nanosecond ticks: the default of this project.
	Nanosecond = 1e9
	// Microsecond ticks: Guava's own resolution; results are bit-identical
	// to Guava 31.1.
	Microsecond = 1e6
)

// Engine is the complete state of one smooth rate limiter. Every method
// takes the current time explicitly as now, an integer count of ticks on a
// time line of the caller's choosing (usually "since the limiter was made").
// Engine does no locking and reads no clock: callers serialize access.
//
// The zero value is not usable; make one with NewBursty or NewWarmingUp.
type Engine struct {
	// storedPermits are the unused permits saved while the limiter was
	// idle (fractional).
	storedPermits float64
	// maxPermits caps storedPermits.
	maxPermits float64
	// stableInterval is the cost in ticks of one permit at the stable
	// rate: ticksPerSecond / permitsPerSecond.
	stableInterval float64
	// nextFreeTicket is the moment at which the next request may proceed,
	// whatever its size. It is in the future when the limiter is in debt
	// (the last request's cost is charged to the next one).
	nextFreeTicket int64

	ticksPerSecond float64
	kind           Kind

	// Bursty only.
	maxBurstSeconds float64

	// WarmingUp only.
	warmupPeriod     int64 // ticks
	coldFactor       float64
	thresholdPermits float64
	slope            float64

	// version counts the changes that a reservation roll-back must not
	// step over (reservations, rate changes, roll-backs).
	version uint64
}

// NewBursty returns a SmoothBursty engine at permitsPerSecond, configured at
// time now. ticksPerSecond is Nanosecond or Microsecond (any positive value
// works). maxBurstSeconds is how many seconds of permits may be stored.
//
// The caller validates the arguments (positive, non-NaN rate; finite,
// non-negative burst); the engine never panics, but garbage in is garbage
// out.
func NewBursty(ticksPerSecond, maxBurstSeconds, permitsPerSecond float64, now int64) Engine {
	e := Engine{kind: Bursty, ticksPerSecond: ticksPerSecond, maxBurstSeconds: maxBurstSeconds}
	e.SetRate(permitsPerSecond, now)
	return e
}

// NewWarmingUp returns a SmoothWarmingUp engine at permitsPerSecond with a
// warm-up period of warmupTicks and the given cold factor, configured at time
// now. It starts cold: storedPermits == maxPermits.
//
// A warm-up of 0 ticks makes a warm limiter that stores nothing (Guava would
// divide 0 by 0 and stop limiting after the first idle moment).
func NewWarmingUp(ticksPerSecond float64, warmupTicks int64, coldFactor, permitsPerSecond float64, now int64) Engine {
	e := Engine{kind: WarmingUp, ticksPerSecond: ticksPerSecond, warmupPeriod: warmupTicks, coldFactor: coldFactor}
	e.SetRate(permitsPerSecond, now)
	return e
}

// Kind reports the flavour of the engine.
func (e *Engine) Kind() Kind { return e.kind }

// SetRate changes the stable rate at time now, as Guava's doSetRate does:
// first resync at the old rate, then rescale the stored permits so that the
// bucket keeps the same fraction of its (new) capacity. Debt already booked
// in nextFreeTicket is not repriced.
func (e *Engine) SetRate(permitsPerSecond float64, now int64) {
	e.resync(now)
	e.stableInterval = e.ticksPerSecond / permitsPerSecond
	oldMax := e.maxPermits
	if e.kind == Bursty {
		e.setRateBursty(permitsPerSecond, oldMax)
	} else {
		e.setRateWarmingUp(oldMax)
	}
	// Guava lets NaN and +Inf leak through the rescale in corner cases
	// (0·Inf, Inf·x/Inf, MaxFloat64 products). At a finite rate such a
	// value would make every later wait (long)NaN = 0, an unlimited
	// limiter; choose the conservative end instead. Infinite rates keep
	// Guava's values bit for bit (its own infinity tests pass through NaN).
	if !math.IsInf(permitsPerSecond, 1) && (e.storedPermits != e.storedPermits || math.IsInf(e.storedPermits, 1)) {
		if e.kind == Bursty {
			e.storedPermits = 0
		} else {
			e.storedPermits = e.maxPermits
		}
	} else if !math.IsInf(permitsPerSecond, 1) && e.storedPermits > e.maxPermits {
		// The rescale stored·newMax/oldMax can overshoot newMax: out of a
		// subnormal oldMax (rates below ~1e-299/s) by far, since
		// stored·newMax rounds to a few subnormal steps (FuzzLimiter: 1/24
		// stored for a maxPermits of 0.02425). A bursty bucket would then
		// hand out more than it holds.
		e.storedPermits = e.maxPermits
	}
	e.version++
}

func (e *Engine) setRateBursty(permitsPerSecond, oldMax float64) {
	if e.maxBurstSeconds == 0 {
		e.maxPermits = 0 // a metronome, even at an infinite rate (0·Inf is NaN)
	} else {
		e.maxPermits = e.maxBurstSeconds * permitsPerSecond
	}
	switch {
	case oldMax == math.Inf(1):
		// Coming from an infinite rate: a full burst.
		e.storedPermits = e.maxPermits
	case oldMax == 0:
		// First configuration: start empty.
		e.storedPermits = 0
	default:
		e.storedPermits = e.storedPermits * e.maxPermits / oldMax
	}
}

func (e *Engine) setRateWarmingUp(oldMax float64) {
	if e.warmupPeriod == 0 {
		// Decision D3: no warm-up means a warm limiter that stores
		// nothing, not Guava's 0/0.
		e.thresholdPermits, e.maxPermits, e.slope = 0, 0, 0
		e.storedPermits = 0
		return
	}
	w := float64(e.warmupPeriod)
	// The conversion rounds the product, as Java (and Lua) do: without it
	// Go may fuse it into the sums below (FMADD on arm64), and maxPermits
	// and slope would differ from Guava's in the last bit
	// (scripts/check-fma keeps every package free of fused operations).
	coldInterval := float64(e.stableInterval * e.coldFactor)
	e.thresholdPermits = 0.5 * w / e.stableInterval
	e.maxPermits = e.thresholdPermits + 2.0*w/(e.stableInterval+coldInterval)
	e.slope = (coldInterval - e.stableInterval) / (e.maxPermits - e.thresholdPermits)
	switch {
	case oldMax == math.Inf(1):
		// Coming from an infinite rate: fully warm (Guava's asymmetry
		// with SmoothBursty).
		e.storedPermits = 0
	case oldMax == 0:
		// First configuration: start cold.
		e.storedPermits = e.maxPermits
	default:
		e.storedPermits = e.storedPermits * e.maxPermits / oldMax
	}
}

// Rate returns the stable rate in permits per second, computed back from the
// stable interval as Guava's getRate does (so 7.0 reads 6.999999999999999).
func (e *Engine) Rate() float64 { return e.ticksPerSecond / e.stableInterval }

// coolDownInterval is the number of ticks it takes to store one permit
// while idle.
func (e *Engine) coolDownInterval() float64 {
	if e.kind == Bursty || e.warmupPeriod == 0 {
		return e.stableInterval
	}
	return float64(e.warmupPeriod) / e.maxPermits
}

// resync stores the permits earned since nextFreeTicket, if now is later.
// A now in the past changes nothing: a clock that steps back only makes the
// next wait longer.
func (e *Engine) resync(now int64) {
	if now > e.nextFreeTicket {
		newPermits := float64(now-e.nextFreeTicket) / e.coolDownInterval()
		// The builtin min (in minPredicted) has Java's Math.min semantics
		// (NaN wins, -0 < +0) and, unlike math.Min on amd64, is inlined.
		e.storedPermits = minPredicted(e.maxPermits, e.storedPermits+newPermits)
		e.nextFreeTicket = now
	}
}

// minPredicted is min(a, b), bit for bit (NaN wins, -0 < +0), through a
// branch when a < b: a limiter faster than its callers always takes it
// (its stored permits are at the cap, and cover each request), and the
// processor, predicting it, goes on with a without waiting for b. The
// permits stored by one call then do not hold up the next.
func minPredicted(a, b float64) float64 {
	if a < b {
		return a
	}
	return min(a, b)
}

// Undo is what a reservation needs to be given back: the state right after
// the resync and before the permits were booked. It is a small value, so
// reservations allocate nothing.
type Undo struct {
	storedPermits  float64
	nextFreeTicket int64
	version        uint64
}

// Reserve books permits at time now (Guava's reserveEarliestAvailable) and
// returns the moment at which the caller may proceed. The caller waits only
// until the current nextFreeTicket; the cost of its own permits is pushed
// onto the next request ("pay later"). Stored permits are spent first.
//
// The returned Undo lets Cancel give the reservation back exactly, as long
// as nothing else changed the engine in between.
func (e *Engine) Reserve(permits int, now int64) (moment int64, undo Undo) {
	e.resync(now)
	moment = e.nextFreeTicket
	undo = Undo{storedPermits: e.storedPermits, nextFreeTicket: e.nextFreeTicket}
	e.book(permits)
	undo.version = e.version
	return moment, undo
}

// book spends permits on the resynced engine: stored permits first, and
// what they do not cover pushes nextFreeTicket back.
func (e *Engine) book(permits int) {
	requested := float64(permits)
	storedToSpend := minPredicted(requested, e.storedPermits)
	// When the stored permits cover the request (the usual case of a
	// limiter faster than its callers), the fresh price is Guava's
	// (long)(0 × stableInterval): 0 for every interval, +Inf included
	// ((long)NaN is 0 too), so skipping it changes no bit. NaN stored
	// permits make freshPermits NaN, which takes the general path.
	var wait int64
	if freshPermits := requested - storedToSpend; freshPermits != 0 {
		wait = javaLong(float64(freshPermits * e.stableInterval))
	}
	if e.kind != Bursty { // a bursty limiter's stored permits are free
		// Saturating, unlike Guava's plain long sum: a saturated fresh
		// price plus a stored one must not wrap to a negative wait
		// (found by FuzzLimiter at 1e-9 permits/s).
		wait = sat.Add(e.storedPermitsToWaitTime(e.storedPermits, storedToSpend), wait)
	}
	if wait != 0 {
		e.nextFreeTicket = sat.Add(e.nextFreeTicket, wait)
	}
	e.storedPermits -= storedToSpend
	e.version++
}

// ReserveWait books permits at now and returns how long the caller must wait
// (never negative): Guava's reserveAndGetWaitLength. It is Reserve without
// the Undo, for callers that never cancel.
func (e *Engine) ReserveWait(permits int, now int64) int64 {
	e.resync(now)
	moment := e.nextFreeTicket
	e.book(permits)
	return sat.Wait(moment, now)
}

// Cancel gives back the reservation described by u if it is still the most
// recent change to the engine, restoring nextFreeTicket and storedPermits
// exactly. It reports whether it did.
func (e *Engine) Cancel(u Undo) bool {
	if u.version == 0 || u.version != e.version {
		return false
	}
	e.storedPermits = u.storedPermits
	e.nextFreeTicket = u.nextFreeTicket
	e.version++
	return true
}

// storedPermitsToWaitTime prices spending k of the stored permits: the
// integral of the throttling function over [stored-k, stored].
func (e *Engine) storedPermitsToWaitTime(stored, k float64) int64 {
	if e.kind == Bursty {
		return 0 // stored permits are free
	}
	above := stored - e.thresholdPermits
	var ticks int64
	if above > 0 { // false for NaN, as in Java
		take := min(above, k)
		length := e.permitsToTime(above) + e.permitsToTime(above-take)
		ticks = javaLong(take * length / 2.0) // the trapezoid
		k -= take
	}
	return sat.Add(ticks, javaLong(float64(e.stableInterval*k))) // the rectangle
}

// permitsToTime is the throttling interval at p permits above the
// threshold. The float64 conversion forbids a fused multiply-add, which
// Java never does and which would change the last bit.
func (e *Engine) permitsToTime(p float64) float64 {
	return e.stableInterval + float64(p*e.slope)
}

// NextFreeTicket returns the moment at which the next request may proceed
// (Guava's queryEarliestAvailable; it does not resync).
func (e *Engine) NextFreeTicket() int64 { return e.nextFreeTicket }

// CanAcquire reports whether a request made at now with the given timeout
// (ticks, clamped at 0) could start in time: nextFreeTicket - timeout <= now.
// Like Guava it looks only at when the next request may start, not at the
// number of permits.
func (e *Engine) CanAcquire(now, timeout int64) bool {
	return sat.Sub(e.nextFreeTicket, max(timeout, 0)) <= now
}

// StoredPermits returns the permits saved so far (as of the last resync).
func (e *Engine) StoredPermits() float64 { return e.storedPermits }

// StoredPermitsAt returns the permits that would be stored at now, without
// changing the engine.
func (e *Engine) StoredPermitsAt(now int64) float64 {
	c := *e
	c.resync(now)
	return c.storedPermits
}

// MaxPermits returns the cap on stored permits.
func (e *Engine) MaxPermits() float64 { return e.maxPermits }

// StableInterval returns the cost of one permit at the stable rate, in ticks.
func (e *Engine) StableInterval() float64 { return e.stableInterval }

// ThresholdPermits returns the stored-permit level above which permits cost
// more than the stable interval (warming-up only; 0 for bursty).
func (e *Engine) ThresholdPermits() float64 { return e.thresholdPermits }

// Slope returns the growth of the throttling interval per stored permit
// above the threshold (warming-up only; 0 for bursty).
func (e *Engine) Slope() float64 { return e.slope }

// CoolDownInterval returns the ticks it takes to store one permit while idle.
func (e *Engine) CoolDownInterval() float64 { return e.coolDownInterval() }

// TicksPerSecond returns the engine's resolution.
func (e *Engine) TicksPerSecond() float64 { return e.ticksPerSecond }

// WarmupPeriod returns the warm-up period in ticks (0 for bursty).
func (e *Engine) WarmupPeriod() int64 { return e.warmupPeriod }

// ColdFactor returns the cold factor (0 for bursty).
func (e *Engine) ColdFactor() float64 { return e.coldFactor }

// MaxBurstSeconds returns the bursty limiter's storage in seconds (0 for
// warming-up).
func (e *Engine) MaxBurstSeconds() float64 { return e.maxBurstSeconds }

// Fill sets the stored permits to the maximum, as if the limiter had been
// idle for long enough. It is how a bursty limiter starts full.
func (e *Engine) Fill() {
	e.storedPermits = e.maxPermits
	e.version++
}
