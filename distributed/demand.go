package distributed

import (
	"math"
	"time"
)

// demandWindow is the time constant of the demand estimate (an
// exponentially weighted moving average of requested permits per second).
const demandWindow = time.Second

// reportWindow is how far back the demand a process reports to the
// fair-share registry looks for a sample above its average: when none is
// (demand fell), the report drops to the highest recent sample at once.
// See noteDemand.
const reportWindow = 500 * time.Millisecond

// demandState is what this process's callers ask for (granted or not),
// as the estimates that size its leases and that it reports to the
// fair-share registry, and the sizes derived from them. Guarded by
// Limiter.mu.
type demandState struct {
	demand     float64 // requested permits per second (EWMA over demandWindow)
	reported   float64 // what the registry is told: see noteDemand
	recent     [16]demandSample
	recentNext int     // where the next sample goes in recent
	lastSample float64 // the latest raw demand sample
	asked      float64 // requested since demandAt
	demandAt   time.Duration
	haveDemand bool
	// Derived from demand, lastSample, the round trip and the lease's
	// wait by resizeLocked whenever one of them changes, so that
	// maintain, which runs after every local decision, does no
	// floating-point work.
	slowWant    int64   // τ × sizing demand, rounded up
	refundFloor int64   // below this many held permits no refund is possible
	lowMark     float64 // prefetch when fewer permits than this are held
}

// demandSample is one raw demand sample, kept for the report.
type demandSample struct {
	at time.Duration
	v  float64
}

// noteDemand feeds the requested-demand estimates. It counts what callers
// ask for, granted or not: sizing leases by what was granted would let a
// starved process never ask for more.
//
// The registry is told min(the 1 s average, the highest sample of the last
// reportWindow): a rise is followed through the smooth average, a fall
// within reportWindow. The registry's water filling gives every contended
// process the fair level, so what one process reports decides what the
// others get; with the average alone a process whose demand fell kept a
// share it no longer spent for seconds, and a faster average passed the
// lumpy samples of Acquire callers on to the others. The measurements
// behind this choice are in docs/distributed.md ("Reported demand").
func (l *Limiter) noteDemand(n int64, now time.Duration) {
	if !l.haveDemand && l.asked == 0 {
		// The first request starts the first sample: the time between
		// New and first use says nothing about demand.
		l.demandAt = now
	}
	l.asked += float64(n)
	dt := now - l.demandAt
	if dt < max(l.cfg.leaseDuration/2, 10*time.Millisecond) {
		return
	}
	sample := l.asked / dt.Seconds()
	l.lastSample = sample
	if !l.haveDemand {
		l.demand, l.haveDemand = sample, true
	} else {
		alpha := 1 - math.Exp(-dt.Seconds()/demandWindow.Seconds())
		l.demand += float64(alpha * (sample - l.demand)) // rounded, not fused: the same on every processor
	}
	l.recent[l.recentNext] = demandSample{at: now, v: sample}
	l.recentNext = (l.recentNext + 1) % len(l.recent)
	peak := sample
	for _, r := range l.recent {
		if r.at > now-reportWindow && r.v > peak {
			peak = r.v
		}
	}
	l.reported = min(l.demand, peak)
	l.asked, l.demandAt = 0, now
	l.resizeLocked()
}

// sizingDemand is the demand that leases are sized for: the average, but
// at most twice the latest sample, so that a sharp drop in demand shrinks
// leases (and triggers refunds) at once rather than over seconds, while
// the ordinary noise of one sample changes nothing; and at least the
// latest sample, so that a rise is followed within one sample. Following
// a rise only through the average would take seconds (its time constant
// is demandWindow), during which leases sized for the old demand run dry
// before the prefetch that replaces them arrives, and callers with work
// to do are refused although the fleet has permits to spare.
func (l *Limiter) sizingDemand() float64 {
	return max(min(l.demand, 2*l.lastSample), l.lastSample)
}

// wantLocked is the lease size to ask for: τ × demand, at least 1, capped
// by the global burst capacity (a bigger lease could never be granted
// without debt anyway). The script caps it further at the fair share.
func (l *Limiter) wantLocked() int64 {
	w := math.Ceil(l.sizingDemand() * l.cfg.leaseDuration.Seconds())
	if l.maxPermits >= 1 && w > l.maxPermits {
		w = math.Floor(l.maxPermits)
	}
	if !(w >= 1) {
		return 1
	}
	return int64(min(w, 1<<40))
}

// maintain runs after a local decision, with l.mu held: it prefetches
// before the pool runs dry and gives back what a fallen demand no longer
// needs. At most one call is in flight. The call starts in the background
// (in the synchronous test mode, l.mu is released for it: see startLease).
func (l *Limiter) maintain(now time.Duration) {
	if l.inflight != nil || l.closed || !l.healthy || !l.haveDemand {
		return
	}
	held := l.heldLocked(now)
	// Give back what the current demand cannot spend before the leases
	// end (they would lapse unused, lost to the whole fleet). Keeping
	// 2 × slowWant, a refund needs more than refundFloor permits held: on
	// the hot path this one comparison settles it.
	if held > l.refundFloor {
		var spendable float64
		if n := len(l.pool); n > 0 {
			spendable = l.sizingDemand() * (l.pool[n-1].expires - now).Seconds()
		}
		keep := max(int64(math.Ceil(spendable)), 2*l.slowWant)
		if excess := held - keep; excess > max(l.slowWant, 2) {
			l.startRefund(now, excess)
			return
		}
	}
	if now < l.aheadAt-l.horizon() {
		return // Redis said no lease can be had yet
	}
	if float64(held) < l.lowMark {
		l.startLease(now, 0, l.horizon())
	}
}

// resizeLocked recomputes what maintain compares the pool with. It
// runs when the demand estimate, the round trip or the booked wait
// changes: at most once per demand sample or Redis reply.
func (l *Limiter) resizeLocked() {
	slow := l.sizingDemand()
	l.slowWant = int64(math.Ceil(slow * l.cfg.leaseDuration.Seconds()))
	l.refundFloor = 2*l.slowWant + max(l.slowWant, 2)
	// Ask again when what is left would last less than two round trips
	// plus the time a new lease takes to become usable (the last lease's
	// booked wait) plus half a lease of margin: the next permits are then
	// usable before these run out.
	l.lowMark = max(slow*(2*l.rtt+l.leaseWait+l.cfg.leaseDuration/2).Seconds(), 1)
}

// horizon is how far ahead a prefetch may book: two lease durations. The
// script grants a process that has had its fair share only leases one
// duration closer than that, which gives priority to the others.
func (l *Limiter) horizon() time.Duration { return min(2*l.cfg.leaseDuration, maxWait) }
