package distributed

import (
	"context"
	"errors"
	"fmt"
	"math"
	"time"

	"github.com/smoothrate/ratelimit"
	"github.com/smoothrate/ratelimit/internal/check"
)

// startLease launches a lease call in the background. Called with l.mu
// held; in the synchronous test mode (syncPrefetch) it makes the call
// inline, releasing l.mu for it, and holds it again on return.
func (l *Limiter) startLease(now time.Duration, need int64, wait time.Duration) {
	args := l.leaseArgsLocked(need, wait)
	ch := make(chan struct{})
	l.inflight = ch
	if l.cfg.syncPrefetch {
		l.mu.Unlock()
		l.runLease(args, ch)
		l.mu.Lock()
		return
	}
	l.wg.Add(1)
	go func() {
		defer l.wg.Done()
		l.runLease(args, ch)
	}()
}

// leaseRoundTrip makes a lease call in the caller's goroutine. It releases
// l.mu during the call and holds it again on return.
func (l *Limiter) leaseRoundTrip(need int64, wait time.Duration) {
	args := l.leaseArgsLocked(need, wait)
	ch := make(chan struct{})
	l.inflight = ch
	l.mu.Unlock()
	l.runLease(args, ch)
	l.mu.Lock()
}

func (l *Limiter) runLease(args []any, ch chan struct{}) {
	sent := l.elapsed()
	r, err := l.call(args)
	recv := l.elapsed()
	l.mu.Lock()
	defer l.mu.Unlock()
	l.applyLocked(sent, recv, r, err)
	if err == nil {
		l.aheadAt = recv + r.ahead
		switch {
		case r.granted > 0:
			l.leaseWait = r.wait
			l.resizeLocked()
			l.st.Leases++
			l.st.PermitsLeased += r.granted
			l.st.LargestLease = max(l.st.LargestLease, r.granted)
			// Spend no earlier than the reply's wait after it arrived
			// (the script ran before that), and no later than its
			// validity after the request left (the script ran after
			// that): a slow round trip only shortens a lease.
			l.insertLocked(tranche{n: r.granted, usable: recv + r.wait, expires: sent + r.validity, configVersion: r.configVersion, incarnation: r.incarnation})
		default:
			l.st.EmptyReplies++
		}
	}
	l.inflight = nil
	close(ch)
}

// refundableLocked: only permits leased from the current incarnation of the
// state under its current config version can be given back; the script
// checks again.
func (l *Limiter) refundableLocked(t tranche) bool {
	return t.configVersion == l.configVersion && t.incarnation == l.incarnation
}

// startRefund takes excess permits out of the pool (latest first)
// and gives them back in the background. Permits leased under an older
// config version or from a lost state are not refundable and stay. Called
// with l.mu held; like startLease, it releases it only in the synchronous
// test mode.
func (l *Limiter) startRefund(now time.Duration, excess int64) {
	var n int64
	for i := len(l.pool) - 1; i >= 0 && n < excess; i-- {
		t := &l.pool[i]
		if !l.refundableLocked(*t) {
			continue
		}
		k := min(t.n, excess-n)
		t.n -= k
		n += k
	}
	l.held -= n
	l.pruneLocked(now) // drops the emptied tranches
	if n == 0 {
		return
	}
	args := l.refundArgsLocked(n, l.configVersion, false)
	ch := make(chan struct{})
	l.inflight = ch
	run := func() {
		sent := l.elapsed()
		r, err := l.call(args)
		recv := l.elapsed()
		l.mu.Lock()
		l.applyLocked(sent, recv, r, err)
		if err == nil && r.granted > 0 {
			l.st.Refunds++
			l.st.PermitsRefunded += r.granted
		}
		l.inflight = nil
		close(ch)
		l.mu.Unlock()
	}
	if l.cfg.syncPrefetch {
		l.mu.Unlock()
		run()
		l.mu.Lock()
		return
	}
	l.wg.Add(1)
	go func() {
		defer l.wg.Done()
		run()
	}()
}

// applyLocked records what any script call taught us: health, round trip,
// the fleet's config and size.
func (l *Limiter) applyLocked(sent, recv time.Duration, r reply, err error) {
	l.st.RedisCalls++
	if r.joined && !l.joined {
		// A refused limiter keeps asking (and refusing) until the name
		// holds a limiter like its own, or none.
		l.joined = !r.refused
		l.storedRate, l.storedKind, l.storedUnit = r.rate, r.storedKind, r.storedUnit
		l.mismatch = !sameRate(r.rate, l.asked0) || r.storedKind != l.kind || r.storedUnit != l.cfg.unit
	}
	if err != nil {
		l.st.RedisErrors++
		l.lastErr = err
		l.failures++
		if l.healthy {
			l.healthy = false
			l.fallbackAt = recv
			l.fallbackRate, l.fallback = l.fallbackRateLocked(), nil
		}
		if errors.Is(err, ErrMisconfigured) {
			// Not an outage: no fallback, whatever the policy,
			// until a call succeeds (someone fixed the setup).
			l.fallbackRate, l.fallback = 0, nil
		}
		// Probe again after a jittered, growing pause, so that a fleet
		// does not stampede a recovering server.
		base := min(l.cfg.callTimeout<<min(l.failures, 10), time.Second)
		// (float64 of the draw: scripts/check-fma wants no fused operation.)
		l.probeAt = recv + time.Duration(float64(base)*(0.5+float64(l.rng.Float64())))
		return
	}
	if !l.healthy {
		l.healthy = true
		l.st.FallbackTime += recv - l.fallbackAt
		l.fallbackRate, l.fallback = 0, nil
	}
	l.failures = 0
	l.rtt = max(recv-sent, l.rtt*15/16)
	l.resizeLocked()
	if r.configVersion >= l.configVersion {
		l.configVersion, l.rate, l.maxPermits = r.configVersion, r.rate, r.maxPermits
	}
	if r.incarnation != 0 {
		l.incarnation = r.incarnation
	}
	if r.processes > 0 {
		l.processes = r.processes
	}
}

// Join makes the limiter's first lease now rather than at its first
// Acquire, so that a program learns before it does any work what its name
// holds (Stats: StoredRate, StoredKind, StoredUnit, Mismatch) and, made
// WithRefuseMismatch, whether it was refused (an error wrapping
// ErrNameMismatch). The permits the lease brings stay in the local pool for
// the next Acquires. Any other error is the call's (the limiter is then in
// its fallback, as after any failed call); ctx bounds only the wait for a
// call already in flight, the call itself is bounded by the call timeout.
// Join after the limiter has joined does nothing. A nil ctx is
// ratelimit.ErrNilContext.
func (l *Limiter) Join(ctx context.Context) error {
	if !l.made() {
		return errZero
	}
	if ctx == nil {
		return ratelimit.ErrNilContext
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	for l.inflight != nil && !l.joined {
		ch := l.inflight
		l.mu.Unlock()
		select {
		case <-ch:
		case <-ctx.Done():
			l.mu.Lock()
			return ctx.Err()
		}
		l.mu.Lock()
	}
	switch {
	case l.closed:
		return ErrClosed
	case l.joined:
		return nil
	}
	failed := l.st.RedisErrors
	l.leaseRoundTrip(1, 0)
	if l.st.RedisErrors != failed {
		return l.lastErr
	}
	return nil
}

// sameRate compares a rate read back from the state (as 1e6 / interval,
// so 7 reads 6.999999999999999) with the one asked for.
func sameRate(stored, asked float64) bool {
	if stored == asked {
		return true
	}
	return !math.IsInf(stored, 0) && !math.IsInf(asked, 0) && math.Abs(stored-asked) <= 1e-9*max(stored, asked)
}

// SetRate changes the fleet's rate, for every process, with Guava's rules
// (resync at the old rate, rescale the stored permits) applied once inside
// Redis. It needs Redis: if the call fails the rate is unchanged (or, if
// the reply was lost, changed without this process knowing until its next
// lease). Permits already leased keep the price they were leased at. A rate
// that is zero, negative or NaN is an error wrapping
// ratelimit.ErrInvalidRate; +Inf means unlimited.
func (l *Limiter) SetRate(permitsPerSecond float64) error {
	if err := check.Rate(permitsPerSecond); err != nil {
		return err
	}
	if !l.made() {
		return errZero
	}
	l.mu.Lock()
	if l.closed {
		l.mu.Unlock()
		return ErrClosed
	}
	args := l.baseArgsLocked("setrate")
	args = append(args, f64(permitsPerSecond))
	l.mu.Unlock()
	sent := l.elapsed()
	r, err := l.call(args)
	recv := l.elapsed()
	l.mu.Lock()
	defer l.mu.Unlock()
	l.applyLocked(sent, recv, r, err)
	if err != nil {
		return fmt.Errorf("distributed: SetRate: %w", err)
	}
	return nil
}
