package distributed

import (
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"math"
	"math/rand/v2"
	"sort"
	"strconv"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/smoothrate/ratelimit"
)

var _ ratelimit.Acquirer = (*Limiter)(nil)

// maxWait mirrors lease.lua's MAX_WAIT: the longest wait a single lease
// call may book. Longer waits are made of several calls.
const maxWait = time.Second

// demandWindow is the time constant of the demand estimate (an
// exponentially weighted moving average of requested permits per second).
const demandWindow = time.Second

// reportWindow is how far back the demand a process reports to the
// fair-share registry looks for a sample above its average: when none is
// (demand fell), the report drops to the highest recent sample at once.
// See noteDemand.
const reportWindow = 500 * time.Millisecond

// demandSample is one raw demand sample, kept for the report.
type demandSample struct {
	at time.Duration
	v  float64
}

// Limiter is one process's handle on a rate shared by a whole fleet through
// Redis. See the package documentation for the protocol.
//
// The model. The fleet shares one Guava-style smooth limiter kept in Redis.
// A Limiter leases permits from it in batches sized to about τ of this
// process's demand and hands them out from a local pool; a permit is always
// taken from Redis before it is handed out (debit before spend), so most
// calls never leave the process and none can overspend the fleet's rate.
//
// There are two ways to take permits, as with the local limiter:
//   - Acquire waits until the permits may be used; most callers want this.
//   - TryAcquire takes them only if it can within a timeout; with timeout 0
//     it never waits for Redis when the answer is known locally.
//
// SetRate changes the rate of the whole fleet; Stats says what happened.
// A Limiter is safe for concurrent use. Make one with New (the zero value
// is not usable) and call Close when done, to give unused permits back and
// stop its background calls.
type Limiter struct {
	client redis.UniversalClient
	keys   []string
	cfg    config
	kind   string          // "b" or "w", as in engine.lua
	clock  ratelimit.Clock // nil: the time package
	start  time.Time

	wg sync.WaitGroup // every goroutine that talks to Redis

	mu         sync.Mutex
	rate       float64 // the fleet's rate as last reported (or configured)
	ver        int64   // config version as last reported
	born       int64   // the state's incarnation as last reported
	maxPermits float64 // the global burst capacity as last reported
	processes  int     // live processes as last reported
	pool       []tranche
	held       int64         // Σ pool[i].n, kept up to date so that the hot path never scans the pool
	nextLapse  time.Duration // no tranche lapses before this (a lower bound: pruning recomputes it)
	demand     float64       // requested permits per second (EWMA over demandWindow)
	reported   float64       // what the registry is told: see noteDemand
	recent     [16]demandSample
	recentNext int     // where the next sample goes in recent
	lastSample float64 // the latest raw demand sample
	asked      float64 // requested since demandAt
	demandAt   time.Duration
	haveDemand bool
	inflight   chan struct{} // non-nil while a Redis call is in flight; closed after
	aheadAt    time.Duration // no lease with maximum wait w can be granted before aheadAt - w
	healthy    bool
	failures   int
	probeAt    time.Duration
	lastErr    error
	// While Redis is away: the fallback's rate (0: none, refuse) and the
	// local limiter itself, made at its first use (see fallbackLocked).
	fallbackRate float64
	fallback     *ratelimit.Limiter
	fallbackAt   time.Duration
	rtt          time.Duration // decaying maximum of the round trip
	leaseWait    time.Duration // how far ahead the last lease was booked
	// Derived from demand, lastSample, rtt and leaseWait by resizeLocked
	// whenever one of them changes, so that maintainLocked, which runs
	// after every local decision, does no floating-point work.
	slowWant    int64   // τ × sizing demand, rounded up
	refundFloor int64   // below this many held permits no refund is possible
	lowMark     float64 // prefetch when fewer permits than this are held
	closed      bool
	rng         *rand.Rand
	st          Stats
}

// tranche is the permits of one lease still held locally.
type tranche struct {
	n       int64
	usable  time.Duration // local time from which they may be spent
	expires time.Duration // local time at which unspent ones lapse
	ver     int64         // config version they were leased under
	born    int64         // the state incarnation they came from (-1: mixed)
}

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
	LocalDecisions   int64         // Acquire/TryAcquire answered without waiting for Redis
	RemoteDecisions  int64         // those that waited for a Redis reply
	FallbackAdmitted int64         // permits admitted by the fallback limiter
	FallbackTime     time.Duration // time spent with Redis unreachable
	InFallback       bool          // Redis is unreachable now
	Held             int64         // permits in the local pool now
	Processes        int           // live processes Redis last reported
	Demand           float64       // measured requested demand, permits/s
	LastError        error         // the last Redis error, if any
}

// New returns a limiter named name that shares permitsPerSecond with every
// other Limiter of the same name on the same Redis (a single server, a
// failover setup or a Cluster: client may be any redis.UniversalClient). It
// makes no network call; the first lease creates the shared state if it
// does not exist. If it exists, its rate and kind win: the first process to
// create it configures the fleet, and SetRate changes it for everyone.
//
// The limiter is a SmoothBursty shared by the fleet, or a SmoothWarmingUp
// with WithWarmup. Invalid arguments return errors wrapping this package's
// sentinels or the root package's (ratelimit.ErrInvalidRate, ...).
func New(client redis.UniversalClient, name string, permitsPerSecond float64, opts ...Option) (*Limiter, error) {
	if client == nil {
		return nil, ErrNilClient
	}
	if name == "" || len(name) > 200 || containsAny(name, "{}") {
		return nil, fmt.Errorf("%w: %q", ErrInvalidName, name)
	}
	if err := checkRate(permitsPerSecond); err != nil {
		return nil, err
	}
	cfg, err := buildConfig(opts)
	if err != nil {
		return nil, err
	}
	l := &Limiter{
		client:    client,
		keys:      []string{"ratelimit:{" + name + "}:state", "ratelimit:{" + name + "}:procs"},
		cfg:       cfg,
		kind:      "b",
		clock:     cfg.clock,
		rate:      permitsPerSecond,
		healthy:   true,
		nextLapse: math.MaxInt64,
	}
	l.resizeLocked()
	if cfg.setWarmup {
		l.kind = "w"
	}
	if _, ok := l.clock.(ratelimit.SystemClock); ok {
		l.clock = nil
	}
	if l.clock == nil {
		l.start = time.Now()
	} else {
		l.start = l.clock.Now()
	}
	h := fnv.New64a()
	_, _ = h.Write([]byte(cfg.processID))
	l.rng = rand.New(rand.NewPCG(h.Sum64(), uint64(time.Now().UnixNano())))
	return l, nil
}

func containsAny(s, chars string) bool {
	for i := 0; i < len(s); i++ {
		for j := 0; j < len(chars); j++ {
			if s[i] == chars[j] {
				return true
			}
		}
	}
	return false
}

func checkRate(r float64) error {
	if !(r > 0) {
		return fmt.Errorf("%w: %v", ratelimit.ErrInvalidRate, r)
	}
	return nil
}

// elapsed reads the local clock: the time since the limiter was made.
func (l *Limiter) elapsed() time.Duration {
	if l.clock == nil {
		return time.Since(l.start)
	}
	return l.clock.Now().Sub(l.start)
}

// localDeadline converts ctx's deadline to the local time line.
func (l *Limiter) localDeadline(ctx context.Context, now time.Duration) time.Duration {
	d, ok := ctx.Deadline()
	if !ok {
		return math.MaxInt64
	}
	var left time.Duration
	if l.clock == nil {
		left = time.Until(d)
	} else {
		left = d.Sub(l.clock.Now())
	}
	return satAdd(now, left)
}

func (l *Limiter) sleep(ctx context.Context, d time.Duration) error {
	if d <= 0 {
		return ctx.Err()
	}
	if l.clock != nil {
		return l.clock.Sleep(ctx, d)
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

func satAdd(a, b time.Duration) time.Duration {
	s := a + b
	if b > 0 && s < a {
		return math.MaxInt64
	}
	if b < 0 && s > a {
		return math.MinInt64
	}
	return s
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
// ratelimit.ErrInvalidPermits.
func (l *Limiter) Acquire(ctx context.Context, permits int) (time.Duration, error) {
	if permits <= 0 {
		return 0, fmt.Errorf("%w: %d", ratelimit.ErrInvalidPermits, permits)
	}
	if err := ctx.Err(); err != nil {
		return 0, err
	}
	n := int64(permits)
	begin := l.elapsed()
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
		}
		at, taken, ok, enough := l.takeLocked(n, now, deadline)
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

// fallbackAcquire serves Acquire while Redis is away. Called with l.mu held;
// returns with it released.
func (l *Limiter) fallbackAcquire(ctx context.Context, permits int) (time.Duration, error) {
	if l.cfg.policy == FailClosed {
		err := l.lastErr
		l.mu.Unlock()
		return 0, fmt.Errorf("%w: %w", ErrUnavailable, err)
	}
	fb := l.fallbackLocked()
	if fb == nil {
		err := l.lastErr
		l.mu.Unlock()
		return 0, fmt.Errorf("%w: no fallback rate (Redis has not answered yet, so the fleet's size is unknown, and no safe rate is set): %w", ErrUnavailable, err)
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

// TryAcquire takes permits if they can be had within timeout and reports
// whether it did, sleeping at most timeout when the permits it holds become
// usable a little later. With timeout 0 it never waits for Redis while
// another call is in flight or while the shared bucket is known to be
// empty: those answers are made locally. A negative timeout counts as 0;
// permits <= 0 is refused.
func (l *Limiter) TryAcquire(permits int, timeout time.Duration) bool {
	if permits <= 0 {
		return false
	}
	n := int64(permits)
	timeout = max(timeout, 0)
	begin := l.elapsed()
	latest := satAdd(begin, timeout)
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
		}
		at, _, ok, enough := l.takeLocked(n, now, max(latest, now))
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

func (l *Limiter) countDecision(remote bool) {
	if remote {
		l.st.RemoteDecisions++
	} else {
		l.st.LocalDecisions++
	}
}

// noteDemand feeds the requested-demand estimates. It counts what callers
// ask for, granted or not: sizing leases by what was granted would let a
// starved process never ask for more.
//
// The registry is told min(the 1 s average, the highest sample of the last
// reportWindow), not the average alone. The registry's water filling sets
// every contended process's share to the fair level, so what one process
// reports decides what the others get. With the average alone, a process
// whose demand fell from 120/s to 20/s kept reporting more than it asked
// for for seconds, and the fleet ran at 189/s of 200 from 1.5 to 4 s after
// the drop (TestFleetPlot); sizingDemand is no faster on a fall (at most
// twice the latest sample, then the average: 190/s there). With the
// minimum, the report falls to the new demand once a whole window of
// samples is below the average, 0.5 s after the drop.
//
// Why not simply a faster average: the samples of a process whose callers
// wait in Acquire are lumpy (a lease's permits become usable together), and
// a 250 ms average passed that noise on to the others' level. Shares then
// moved from one lease to the next, more leases were refused for being
// ahead of their process's share, and TestRealTimeFleet saw up to 20.7
// Redis calls/s per process instead of at most 16.7. Noise has peaks above
// the average, so the window's highest sample stays above it and the
// report is the smooth average, as before; a rise is followed through the
// average, as before, too.
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
		l.demand += alpha * (sample - l.demand)
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
	taken = tranche{n: n, usable: at, expires: math.MaxInt64, ver: math.MaxInt64, born: l.pool[0].born}
	for left = n; left > 0; {
		t := &l.pool[0]
		k := min(t.n, left)
		taken.expires = min(taken.expires, t.expires)
		taken.ver = min(taken.ver, t.ver)
		if t.born != taken.born {
			taken.born = -1
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

// maintainLocked runs after a local decision: it prefetches before the
// pool runs dry and gives back what a fallen demand no longer needs. At
// most one call is in flight.
func (l *Limiter) maintainLocked(now time.Duration) {
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
			l.startRefundLocked(now, excess)
			return
		}
	}
	if now < l.aheadAt-l.horizon() {
		return // Redis said no lease can be had yet
	}
	if float64(held) < l.lowMark {
		l.startLeaseLocked(now, 0, l.horizon())
	}
}

// resizeLocked recomputes what maintainLocked compares the pool with. It
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

// startLeaseLocked launches a lease call in the background (or inline in
// the synchronous test mode).
func (l *Limiter) startLeaseLocked(now time.Duration, need int64, wait time.Duration) {
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

// leaseLocked makes a lease call in the caller's goroutine. It releases
// l.mu during the call and holds it again on return.
func (l *Limiter) leaseLocked(need int64, wait time.Duration) {
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
			l.insertLocked(tranche{n: r.granted, usable: recv + r.wait, expires: sent + r.validity, ver: r.ver, born: r.born})
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
func (l *Limiter) refundableLocked(t tranche) bool { return t.ver == l.ver && t.born == l.born }

// startRefundLocked takes excess permits out of the pool (latest first)
// and gives them back in the background. Permits leased under an older
// config version or from a lost state are not refundable and stay.
func (l *Limiter) startRefundLocked(now time.Duration, excess int64) {
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
	args := l.refundArgsLocked(n, l.ver, false)
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
	if err != nil {
		l.st.RedisErrors++
		l.lastErr = err
		l.failures++
		if l.healthy {
			l.healthy = false
			l.fallbackAt = recv
			l.fallbackRate, l.fallback = l.fallbackRateLocked(), nil
		}
		// Probe again after a jittered, growing pause, so that a fleet
		// does not stampede a recovering server.
		base := min(l.cfg.callTimeout<<min(l.failures, 10), time.Second)
		l.probeAt = recv + time.Duration(float64(base)*(0.5+l.rng.Float64()))
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
	if r.ver >= l.ver {
		l.ver, l.rate, l.maxPermits = r.ver, r.rate, r.maxPermits
	}
	if r.born != 0 {
		l.born = r.born
	}
	if r.processes > 0 {
		l.processes = r.processes
	}
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
// It is a SmoothBursty with τ of burst, not none. Without stored permits a
// caller that polls with TryAcquire(1, 0) every s seconds is refused until
// the first poll after each 1/rate, and the time between that moment and
// the poll is lost: at 50/s (one permit per 20 ms), a caller polling every
// 8.3 ms got one permit per 25 ms, 40/s, and one polling every 16.7 ms one
// per 33 ms, 30/s. A burst of τ keeps those fractions, so that each
// process admits its whole share; it adds at most τ × its share after an
// idle spell, about R·τ for the fleet, no more than a round of leases.
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

// SetRate changes the fleet's rate, for every process, with Guava's rules
// (resync at the old rate, rescale the stored permits) applied once inside
// Redis. It needs Redis: if the call fails the rate is unchanged (or, if
// the reply was lost, changed without this process knowing until its next
// lease). Permits already leased keep the price they were leased at. A rate
// that is zero, negative or NaN is an error wrapping
// ratelimit.ErrInvalidRate; +Inf means unlimited.
func (l *Limiter) SetRate(permitsPerSecond float64) error {
	if err := checkRate(permitsPerSecond); err != nil {
		return err
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

// Rate returns the fleet's rate as this process last learnt it from Redis
// (the configured rate before the first call).
func (l *Limiter) Rate() float64 {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.rate
}

// Stats returns a snapshot of the limiter's counters.
func (l *Limiter) Stats() Stats {
	now := l.elapsed()
	l.mu.Lock()
	defer l.mu.Unlock()
	held := l.heldLocked(now) // counts what lapsed
	s := l.st
	s.Held = held
	s.Processes = l.processes
	s.Demand = l.demand
	s.LastError = l.lastErr
	s.InFallback = !l.healthy
	if !l.healthy {
		s.FallbackTime += now - l.fallbackAt
	}
	return s
}

// Close gives the unspent permits back to the fleet, leaves the fair-share
// registry and waits for every background call to end (bounded by ctx).
// After Close, Acquire returns ErrClosed and TryAcquire false; callers
// already sleeping until permits they took become usable are not
// interrupted. Closing twice is harmless.
func (l *Limiter) Close(ctx context.Context) error {
	l.mu.Lock()
	if l.closed {
		l.mu.Unlock()
		return nil
	}
	l.closed = true
	for l.inflight != nil {
		ch := l.inflight
		l.mu.Unlock()
		select {
		case <-ch:
		case <-ctx.Done():
			return ctx.Err()
		}
		l.mu.Lock()
	}
	now := l.elapsed()
	l.heldLocked(now)
	var n int64
	for _, t := range l.pool {
		if l.refundableLocked(t) {
			n += t.n
		}
	}
	l.emptyPoolLocked()
	healthy := l.healthy
	args := l.refundArgsLocked(n, l.ver, true)
	l.mu.Unlock()

	var err error
	if healthy {
		sent := l.elapsed()
		var r reply
		r, err = l.call(args)
		recv := l.elapsed()
		l.mu.Lock()
		l.applyLocked(sent, recv, r, err)
		if err == nil && r.granted > 0 {
			l.st.Refunds++
			l.st.PermitsRefunded += r.granted
		}
		l.mu.Unlock()
		if err != nil {
			err = fmt.Errorf("distributed: Close could not give permits back: %w", err)
		}
	}
	done := make(chan struct{})
	go func() {
		l.wg.Wait()
		close(done)
	}()
	select {
	case <-done:
	case <-ctx.Done():
		return errors.Join(err, ctx.Err())
	}
	return err
}

func f64(x float64) string { return strconv.FormatFloat(x, 'g', -1, 64) }

func micros(d time.Duration) int64 { return d.Microseconds() }
