package ratelimit

import (
	"context"
	"fmt"
	"math"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/smoothrate/ratelimit/internal/check"
	"github.com/smoothrate/ratelimit/internal/sat"
	"github.com/smoothrate/ratelimit/internal/sleep"
	"github.com/smoothrate/ratelimit/internal/tsc"
	"github.com/smoothrate/ratelimit/smooth"
)

// Acquirer is the small interface shared by every limiter of this module:
// the local Limiter, the distributed one, and anything a byte shaper or job
// runner should accept. A permit is whatever the caller counts: a request, a
// job, a byte.
type Acquirer interface {
	// Acquire blocks until permits may be used and returns how long it
	// waited. See Limiter.Acquire.
	Acquire(ctx context.Context, permits int) (time.Duration, error)
	// TryAcquire takes permits if they can be had within timeout. See
	// Limiter.TryAcquire.
	TryAcquire(permits int, timeout time.Duration) bool
	// SetRate changes the stable rate, in permits per second.
	SetRate(permitsPerSecond float64) error
	// Rate returns the stable rate, in permits per second.
	Rate() float64
}

var _ Acquirer = (*Limiter)(nil)

// Limiter hands out permits at a smooth rate, the way Guava's RateLimiter
// does. Make one with NewBursty or NewWarmingUp. The zero value has no
// resolution and no rate: it refuses every request (TryAcquire and Reserve
// fail, Acquire and SetRate return an error wrapping ErrNotInitialized)
// rather than panic or let everything through.
//
// The model. The limiter knows when the next request may proceed
// (nextFreeTicket) and keeps a store of permits saved up while it was idle.
// A request never waits for its own permits: it waits only until
// nextFreeTicket, then pushes nextFreeTicket forward by the price of what it
// took, so the next request pays. An idle limiter therefore lets a request of
// any size through at once, and a request for 1000 permits delays the one
// after it. A bursty limiter's stored permits are free (a burst of up to
// maxBurstSeconds × rate); a warming-up limiter's are dear (it starts cold,
// and speeds up to the stable rate as it works through them).
//
// There are three ways to use it:
//   - Acquire blocks until the permits may be used; most callers want this.
//   - TryAcquire takes the permits only if it can do so within a timeout.
//   - Reserve books the permits without sleeping and says how long to wait,
//     for callers that schedule their own work.
//
// A Limiter is safe for concurrent use. Its lock is never held while
// sleeping; concurrent callers are served in the order they take the lock
// and each sleeps its own computed wait (no fairness beyond that, as in
// Guava).
type Limiter struct {
	mu sync.Mutex
	e  smooth.Engine

	// nextFree mirrors e.NextFreeTicket() so that a TryAcquire that must
	// fail can say so without taking the lock. It is written under mu, and
	// never exceeds e.NextFreeTicket(): a booking leaves it as it was when
	// the booking leaves no debt (published), since any value no later
	// than the present refuses no one.
	nextFree atomic.Int64

	clock Clock         // nil: the time package, through the fast path
	tick  time.Duration // 1 ns, or 1 µs in Guava mode

	// sw reads the time since the limiter was made: on clock, or on the
	// processor's counter (internal/tsc). When its unordered reading may
	// come from before the state it is compared with (sw.ReadsEarly),
	// refusals read the clock again in order, unless the debt exceeds the
	// timeout by more than slack (tsc.ReorderSlack in ticks).
	sw    tsc.Stopwatch
	slack int64
}

// orderedClock is a Clock whose Now, like the counter's unordered reading,
// may come from a little before the state the limiter compares it with,
// and whose nowOrdered may not: tests implement it to show what a stale
// reading does.
type orderedClock interface {
	Clock
	nowOrdered() time.Time
}

func newLimiter(cfg config, build func(ticksPerSecond float64) smooth.Engine) *Limiter {
	l := &Limiter{clock: cfg.clock, tick: cfg.resolution}
	if _, ok := l.clock.(SystemClock); ok {
		l.clock = nil
	}
	var ordered func() time.Time
	if c, ok := l.clock.(orderedClock); ok {
		ordered = c.nowOrdered
	}
	l.sw = tsc.NewStopwatch(l.clock, ordered) // a nil clock: the process's
	l.slack = l.ticks(tsc.ReorderSlack)
	l.e = build(float64(time.Second / l.tick))
	l.nextFree.Store(l.e.NextFreeTicket())
	return l
}

// published mirrors the engine's nextFreeTicket into nextFree after a
// booking made at now, with mu held. A booking only moves nextFreeTicket
// later, so the mirror, left as it was, stays no later than the engine's;
// it need not be written unless the booking left a debt past now, which
// later callers must see to be refused without the lock. A granted call
// that spends stored permits (nextFreeTicket at now) then makes one
// atomic write fewer, the costliest instruction of its path after the
// lock's own. Cancel and SetRate, which may move nextFreeTicket either
// way, always write it.
func (l *Limiter) published(now int64) {
	if nf := l.e.NextFreeTicket(); nf > now {
		l.nextFree.Store(nf)
	}
}

// errZero is what the methods of a zero Limiter return.
var errZero = fmt.Errorf("%w: ratelimit.Limiter (use NewBursty or NewWarmingUp)", ErrNotInitialized)

// made reports whether a constructor made l: only then is its tick set.
// Every method checks it before converting a time to ticks, which would
// divide by the zero tick.
func (l *Limiter) made() bool { return l.tick != 0 }

// elapsed reads the clock once: the time since the limiter's origin,
// unordered (tsc.Stopwatch).
//
// With the default clock, where the processor's time-stamp counter can be
// read (internal/tsc), the reading is the counter read without a fence,
// about a third of what time.Since costs (internal/tsc's BenchmarkClock),
// but the processor may take it a little before the memory references that
// precede it (a fraction of a microsecond). For a grant that is harmless:
// the call is served as if it had come at the moment of the reading, a
// moment that did pass, so the rate holds over the readings, and over real
// time to within the rate times that fraction; and a reading older than
// the state is read again anyway (rereadIfStale). A refusal must not rest
// on a time read before the state it refuses on (the state may be another
// caller's booking from a later moment), so every refusal that is not
// clear by more than tsc.ReorderSlack reads the clock again with
// elapsedOrdered (TryAcquire, rereadIfStale).
func (l *Limiter) elapsed() time.Duration { return l.sw.ElapsedUnordered() }

// elapsedOrdered is elapsed, read after every memory reference before it
// has completed.
func (l *Limiter) elapsedOrdered() time.Duration { return l.sw.ElapsedOrdered() }

// ticks converts an elapsed time to engine ticks, truncating like Guava's
// readMicros.
func (l *Limiter) ticks(d time.Duration) int64 {
	if l.tick == time.Nanosecond {
		return int64(d)
	}
	return int64(d / l.tick)
}

// duration converts engine ticks to a Duration, saturating.
func (l *Limiter) duration(ticks int64) time.Duration { return sat.Scale(ticks, l.tick) }

// rereadIfStale returns el and now, read again if they are older than the next
// free ticket. l.mu must be held.
//
// The clock is read before taking the lock, to keep the read out of the
// critical section. But a caller may be overtaken between its read and the
// lock by another that read a later time and was served: judged at its stale
// reading, the first would be refused, or made to wait for time that has
// already passed (up to a whole timer tick of sleep for nothing). Only a
// reading older than nextFreeTicket can be affected, so only then is the
// clock read again, under the lock, as Guava always does.
func (l *Limiter) rereadIfStale(el time.Duration, now int64) (time.Duration, int64) {
	if now >= l.e.NextFreeTicket() {
		return el, now
	}
	return l.reread()
}

// reread is rereadIfStale's read, out of line so that its test inlines
// (TryAcquire writes the test out).
func (l *Limiter) reread() (time.Duration, int64) {
	el := l.elapsedOrdered()
	return el, l.ticks(el)
}

func (l *Limiter) sleep(ctx context.Context, d time.Duration) error {
	if l.clock == nil {
		return sleep.Ctx(ctx, d)
	}
	return l.clock.Sleep(ctx, d)
}

// Acquire takes permits, sleeping until they may be used, and returns the
// time it slept (the computed wait, 0 when not throttled).
//
// The wait is Guava's: the request waits only for the debt left by earlier
// requests, and its own permits push the next request back. If ctx has a
// deadline that the wait cannot meet, Acquire fails at once, reserving
// nothing, with an error that wraps context.DeadlineExceeded. If ctx ends
// during the sleep, Acquire returns ctx's error and gives its reservation
// back, provided no other request has been booked since (the state is then
// exactly as if the call had not happened).
// A deadline exactly the wait away is met: a context that ends at the
// instant the sleep does has not interrupted it.
//
// The deadline is compared with the limiter's clock, but a context expires
// on the real clock: with a fake clock, a context.WithDeadline taken from the
// fake's Now is usually expired before Acquire looks at it (clocktest's
// fakes start in 2000). Test deadlines with the default clock inside a
// testing/synctest bubble, where contexts and the limiter share the bubble's
// time.
//
// permits <= 0 is an error that wraps ErrInvalidPermits; a nil ctx is
// ErrNilContext.
func (l *Limiter) Acquire(ctx context.Context, permits int) (time.Duration, error) {
	if permits <= 0 {
		return 0, fmt.Errorf("%w: %d", ErrInvalidPermits, permits)
	}
	if !l.made() {
		return 0, errZero
	}
	if ctx == nil {
		return 0, ErrNilContext
	}
	if err := ctx.Err(); err != nil {
		return 0, err
	}
	el := l.elapsed()
	now := l.ticks(el)

	l.mu.Lock()
	el, now = l.rereadIfStale(el, now)
	if deadline, ok := ctx.Deadline(); ok {
		wait := l.duration(sat.Wait(l.e.NextFreeTicket(), now))
		// deadline.Sub saturates; (deadline − start) − el could
		// overflow with the two far apart on either side of the origin.
		if wait > 0 && wait > deadline.Sub(l.sw.Start().Add(el)) {
			l.mu.Unlock()
			return 0, fmt.Errorf("ratelimit: waiting %v would exceed the context deadline: %w", wait, context.DeadlineExceeded)
		}
	}
	moment, undo := l.e.Reserve(permits, now)
	l.published(now)
	l.mu.Unlock()

	wait := l.duration(sat.Wait(moment, now))
	if wait == 0 && l.clock == nil {
		return 0, nil
	}
	if err := l.sleep(ctx, wait); err != nil {
		l.mu.Lock()
		l.e.Cancel(undo)
		l.nextFree.Store(l.e.NextFreeTicket())
		l.mu.Unlock()
		return 0, err
	}
	return wait, nil
}

// TryAcquire takes permits if the request can start within timeout, sleeping
// for up to timeout if it must, and reports whether it took them. It never
// sleeps and then fails; a refusal is immediate and changes nothing.
//
// As in Guava, the decision looks only at when the next request may start,
// not at the number of permits ("pay later"): on an idle limiter
// TryAcquire(1000, 0) succeeds and pushes the following requests back by
// 1000 permits' worth. A negative timeout counts as 0; permits <= 0 is
// refused, and so is every request to a zero Limiter.
func (l *Limiter) TryAcquire(permits int, timeout time.Duration) bool {
	if permits <= 0 || !l.made() {
		return false
	}
	// Load nextFree before reading the clock: a refusal then compares the
	// state at the load with a time no earlier than the load, so the
	// limiter really was in debt at that instant. In the other order, a
	// caller overtaken between its clock read and the load would be
	// refused on another caller's later booking.
	nextFree := l.nextFree.Load()
	el := l.elapsed()
	now := l.ticks(el)
	to := l.ticks(max(timeout, 0))
	if nextFree-to > now { // nextFree >= 0 and to >= 0: no overflow
		// With the unordered counter (elapsed), the reading may precede
		// the load: refuse at once only if the debt is clear by more
		// than tsc.ReorderSlack, else read the clock again, in order.
		if !l.sw.ReadsEarly() || nextFree-to-now > l.slack {
			return false
		}
		el = l.elapsedOrdered()
		if now = l.ticks(el); nextFree-to > now {
			return false
		}
	}
	l.mu.Lock()
	if now < l.e.NextFreeTicket() { // rereadIfStale, inlined
		_, now = l.reread()
	}
	if !l.e.CanAcquire(now, to) {
		l.mu.Unlock()
		return false
	}
	w := l.e.ReserveWait(permits, now)
	l.published(now)
	l.mu.Unlock()

	if w == 0 && l.clock == nil {
		return true
	}
	_ = l.sleep(context.Background(), l.duration(w))
	return true
}

// Reservation is a booking made by Limiter.Reserve: the caller should wait
// Delay before using its permits. It is a small value; making one allocates
// nothing.
type Reservation struct {
	lim  *Limiter
	undo smooth.Undo
	wait time.Duration
	ok   bool
}

// OK reports whether the reservation was made (false only for invalid
// permits or a zero Limiter).
func (r Reservation) OK() bool { return r.ok }

// Delay is how long to wait, from the moment of the reservation, before
// using the permits.
func (r Reservation) Delay() time.Duration { return r.wait }

// Cancel gives the permits back if no other reservation or rate change has
// happened on the limiter since, restoring its state exactly, and reports
// whether it did. Otherwise the permits stay spent: a later booking was
// priced on top of this one and cannot be re-priced.
func (r Reservation) Cancel() bool {
	if !r.ok {
		return false
	}
	l := r.lim
	l.mu.Lock()
	ok := l.e.Cancel(r.undo)
	l.nextFree.Store(l.e.NextFreeTicket())
	l.mu.Unlock()
	return ok
}

// Reserve books permits without sleeping and returns the reservation: wait
// its Delay, then use the permits, or Cancel it. For event loops that
// schedule their own work.
func (l *Limiter) Reserve(permits int) Reservation {
	if permits <= 0 || !l.made() {
		return Reservation{}
	}
	el := l.elapsed()
	now := l.ticks(el)
	l.mu.Lock()
	_, now = l.rereadIfStale(el, now)
	moment, undo := l.e.Reserve(permits, now)
	l.published(now)
	l.mu.Unlock()
	return Reservation{lim: l, undo: undo, wait: l.duration(sat.Wait(moment, now)), ok: true}
}

// SetRate changes the stable rate. As in Guava, the stored permits are first
// brought up to date at the old rate, then rescaled to keep the same fraction
// of the new capacity; debt already booked is not re-priced, and goroutines
// already sleeping keep their waits. A rate that is zero, negative or NaN
// is an error that wraps ErrInvalidRate; +Inf means unlimited.
func (l *Limiter) SetRate(permitsPerSecond float64) error {
	if err := check.Rate(permitsPerSecond); err != nil {
		return err
	}
	if !l.made() {
		return errZero
	}
	now := l.ticks(l.elapsed())
	l.mu.Lock()
	l.e.SetRate(permitsPerSecond, now)
	l.nextFree.Store(l.e.NextFreeTicket())
	l.mu.Unlock()
	return nil
}

// Rate returns the stable rate in permits per second. Like Guava it is
// computed back from the stable interval, so it may differ from the value
// given in the last ulp. A zero Limiter's rate is 0.
func (l *Limiter) Rate() float64 {
	if !l.made() {
		return 0
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.e.Rate()
}

// Snapshot is a read-only view of a limiter's state at one moment.
type Snapshot struct {
	Kind           smooth.Kind
	Rate           float64       // permits per second
	StoredPermits  float64       // as of the snapshot's moment
	MaxPermits     float64       // cap on StoredPermits
	StableInterval time.Duration // cost of one permit at the stable rate
	// ColdInterval is the cost of a stored permit when the store is full
	// (a warming-up limiter's coldest price: StableInterval × its cold
	// factor); 0 for a bursty limiter, whose stored permits are free.
	ColdInterval time.Duration
	// ThresholdPermits is the level of stored permits above which a
	// warming-up limiter prices them dearer than fresh ones; 0 for a
	// bursty limiter.
	ThresholdPermits float64
	// NextFree is how long from the snapshot's moment until the next
	// request may proceed (0 when it may proceed now).
	NextFree time.Duration
	// Elapsed is the snapshot's moment, measured from the limiter's
	// creation on its clock.
	Elapsed time.Duration
}

// Snapshot returns the limiter's state now, without changing it (the zero
// Snapshot for a zero Limiter).
func (l *Limiter) Snapshot() Snapshot {
	if !l.made() {
		return Snapshot{}
	}
	el := l.elapsed()
	now := l.ticks(el)
	l.mu.Lock()
	defer l.mu.Unlock()
	tick := float64(l.tick)
	var cold time.Duration
	if l.e.Kind() == smooth.WarmingUp {
		cold = sat.Duration(l.e.StableInterval() * l.e.ColdFactor() * tick)
	}
	return Snapshot{
		Kind:             l.e.Kind(),
		Rate:             l.e.Rate(),
		StoredPermits:    l.e.StoredPermitsAt(now),
		MaxPermits:       l.e.MaxPermits(),
		StableInterval:   sat.Duration(l.e.StableInterval() * tick),
		ColdInterval:     cold,
		ThresholdPermits: l.e.ThresholdPermits(),
		NextFree:         l.duration(sat.Wait(l.e.NextFreeTicket(), now)),
		Elapsed:          el,
	}
}

// String describes the limiter like Guava's toString:
// "RateLimiter[stableRate=5.0qps]". A rate of 1e16 or more, whose digits
// past the 17th say nothing, prints in exponent form ("1e+308") where
// Java's %.1f would print every digit of the integer (309 for 1e308).
func (l *Limiter) String() string {
	return "RateLimiter[stableRate=" + formatHalfUp1(l.Rate()) + "qps]"
}

// formatHalfUp1 prints x with one decimal the way Java's %.1f does: half-up
// on the shortest decimal representation (0.25 → "0.3", where Go's %.1f
// gives "0.2").
func formatHalfUp1(x float64) string {
	switch {
	case math.IsNaN(x):
		return "NaN"
	case math.IsInf(x, 1):
		return "Infinity"
	case math.IsInf(x, -1):
		return "-Infinity"
	}
	if math.Abs(x) >= 1e16 {
		return strconv.FormatFloat(x, 'e', -1, 64)
	}
	neg := x < 0
	s := strconv.FormatFloat(math.Abs(x), 'f', -1, 64)
	intPart, frac, _ := strings.Cut(s, ".")
	frac += "00"
	digits := []byte(intPart + frac[:1])
	if frac[1] >= '5' {
		i := len(digits) - 1
		for ; i >= 0; i-- {
			if digits[i] == '9' {
				digits[i] = '0'
				continue
			}
			digits[i]++
			break
		}
		if i < 0 {
			digits = append([]byte{'1'}, digits...)
		}
	}
	out := string(digits[:len(digits)-1]) + "." + string(digits[len(digits)-1:])
	if neg && strings.Trim(out, "0.") != "" {
		out = "-" + out
	}
	return out
}
