package distributed

import (
	"context"
	"errors"
	"fmt"
	"math"
	"time"

	"github.com/smoothrate/ratelimit"
	"github.com/smoothrate/ratelimit/internal/redisscript"
)

// health is whether Redis answers this process, and the local limiter
// that serves while it does not. Guarded by Limiter.mu.
type health struct {
	healthy  bool
	failures int
	probeAt  time.Duration // an unhealthy limiter tries Redis again from then
	lastErr  error
	// While Redis is away: the fallback's rate (0: none, refuse) and the
	// local limiter itself, made at its first use (see fallbackLocked).
	fallbackRate float64
	fallback     *ratelimit.Limiter
	fallbackAt   time.Duration
	rtt          time.Duration // decaying maximum of the round trip
}

// unavailable is the error of a call refused while Redis is away: the last
// call's error (an outage, matching ErrUnavailable), with why after it.
func unavailable(last error, why string) error {
	var e *redisscript.Error
	if !errors.As(last, &e) || e.Class != redisscript.Outage {
		e = &redisscript.Error{Room: room, Class: redisscript.Outage, Err: last}
	}
	cause := errors.New(why)
	if e.Err != nil {
		cause = fmt.Errorf("%w (%s)", e.Err, why)
	}
	return &redisscript.Error{Room: e.Room, Class: e.Class, Kind: e.Kind, Err: cause}
}

// fallbackAcquire serves Acquire while Redis is away. Called with l.mu held;
// returns with it released.
func (l *Limiter) fallbackAcquire(ctx context.Context, permits int) (time.Duration, error) {
	if err := l.lastErr; errors.Is(err, ErrMisconfigured) {
		l.mu.Unlock()
		return 0, err // already wraps ErrMisconfigured, and not ErrUnavailable
	}
	if l.cfg.policy == FailClosed {
		err := l.lastErr
		l.mu.Unlock()
		return 0, unavailable(err, "the limiter fails closed")
	}
	fb := l.fallbackLocked()
	if fb == nil {
		err := l.lastErr
		l.mu.Unlock()
		return 0, unavailable(err, "no fallback rate: Redis has not answered yet, so the fleet's size is unknown, and no safe rate is set")
	}
	l.mu.Unlock()
	w, err := fb.Acquire(ctx, permits)
	if err == nil {
		l.mu.Lock()
		l.st.FallbackAdmitted += int64(permits)
		l.mu.Unlock()
	}
	return w, err
}

// fallbackTry serves TryAcquire while Redis is away. Called with l.mu held;
// returns with it released.
func (l *Limiter) fallbackTry(permits int, timeout time.Duration) bool {
	if l.cfg.policy == FailClosed {
		l.mu.Unlock()
		return false
	}
	fb := l.fallbackLocked()
	if fb == nil {
		l.mu.Unlock()
		return false
	}
	l.mu.Unlock()
	ok := fb.TryAcquire(permits, timeout)
	if ok {
		l.mu.Lock()
		l.st.FallbackAdmitted += int64(permits)
		l.mu.Unlock()
	}
	return ok
}

// fallbackRateLocked is the rate of the local limiter used while Redis is
// away: the safe rate, or this process's last known share of the fleet's
// rate.
//
// A process that has never had a lease reply knows no process count, and
// then, without a safe rate, there is no fallback (0): it refuses, as
// failing closed does, until Redis answers. Any rate it picked would be a
// guess, and the only guess available, the full rate, is what lets a
// fleet that starts during an outage admit N times the limit (Sentinel's
// cluster mode, issue #2660); Doorman's client likewise drops to zero
// capacity without a server grant.
func (l *Limiter) fallbackRateLocked() float64 {
	if l.cfg.safeRate > 0 {
		return l.cfg.safeRate
	}
	if l.processes == 0 {
		return 0
	}
	return l.rate / float64(l.processes)
}

// fallbackLocked returns the local limiter that serves while Redis is
// away, or nil if there is no fallback rate. It is made at its first use,
// once the permits held have run out, not when Redis failed: it stores up
// to τ of permits while unused, and a limiter made at the failure would
// fill that store while the process spends its last leases, then admit it
// on top of them.
//
// It is a SmoothBursty with τ of burst, not none: without stored permits
// a caller that polls with TryAcquire(1, 0) loses the time between each
// permit's moment and its next poll, and gets well under its share
// (docs/distributed.md §3 has the figures). The store adds at most
// τ × its share after an idle spell, about R·τ for the fleet.
func (l *Limiter) fallbackLocked() *ratelimit.Limiter {
	if l.fallback != nil || l.fallbackRate == 0 {
		return l.fallback
	}
	opts := []ratelimit.Option{ratelimit.WithMaxBurstSeconds(l.cfg.leaseDuration.Seconds())}
	if l.clock != nil {
		opts = append(opts, ratelimit.WithClock(l.clock))
	}
	fb, err := ratelimit.NewBursty(l.fallbackRate, opts...)
	if err != nil {
		// Not reached (the rate is positive; +Inf is unlimited, as the
		// fleet's rate then is), but never admit everything on an
		// error: admit nothing.
		fb, _ = ratelimit.NewBursty(math.SmallestNonzeroFloat64, opts...)
	}
	l.fallback = fb
	return fb
}
