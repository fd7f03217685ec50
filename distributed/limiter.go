package distributed

import (
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"math"
	"math/rand/v2"
	"strconv"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/smoothrate/ratelimit"
	"github.com/smoothrate/ratelimit/internal/check"
	"github.com/smoothrate/ratelimit/internal/sat"
	"github.com/smoothrate/ratelimit/internal/sleep"
	"github.com/smoothrate/ratelimit/internal/tsc"
)

var _ ratelimit.Acquirer = (*Limiter)(nil)

// maxWait mirrors lease.lua's MAX_WAIT: the longest wait a single lease
// call may book. Longer waits are made of several calls.
const maxWait = time.Second

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
// A Limiter is safe for concurrent use. Make one with New and call Close
// when done, to give unused permits back and stop its background calls.
// The zero value has no client: it refuses every request (Acquire and
// SetRate return an error wrapping ratelimit.ErrNotInitialized) and starts
// no background call.
type Limiter struct {
	client redis.UniversalClient
	keys   []string
	cfg    config
	kind   string          // "b" or "w", as in engine.lua
	asked0 float64         // the rate New was given
	clock  ratelimit.Clock // nil: the time package
	start  time.Time
	// tsc: the clock is the processor's counter (internal/tsc: clock nil,
	// the counter usable, time not fake); startTSC is start on it.
	tsc      bool
	startTSC int64
	// unordered: elapsedFast may read a time from before the state it is
	// compared with (the counter, or a test's orderedClock), so the hot
	// path reads the clock again with elapsed before anything but a grant.
	unordered bool

	wg sync.WaitGroup // every goroutine that talks to Redis

	mu            sync.Mutex
	rate          float64 // the fleet's rate as last reported (or configured)
	configVersion int64   // config version as last reported
	incarnation   int64   // the state's incarnation as last reported
	maxPermits    float64 // the global burst capacity as last reported
	processes     int     // live processes as last reported
	pool          []tranche
	held          int64         // Σ pool[i].n, kept up to date so that the hot path never scans the pool
	nextLapse     time.Duration // no tranche lapses before this (a lower bound: pruning recomputes it)
	demand        float64       // requested permits per second (EWMA over demandWindow)
	reported      float64       // what the registry is told: see noteDemand
	recent        [16]demandSample
	recentNext    int     // where the next sample goes in recent
	lastSample    float64 // the latest raw demand sample
	asked         float64 // requested since demandAt
	demandAt      time.Duration
	haveDemand    bool
	inflight      chan struct{} // non-nil while a Redis call is in flight; closed after
	aheadAt       time.Duration // no lease with maximum wait w can be granted before aheadAt - w
	healthy       bool
	failures      int
	probeAt       time.Duration
	lastErr       error
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
	// What the name holds, learnt from the first lease reply: joined is
	// set then, and mismatch if the stored rate, kind or unit differs from
	// this limiter's.
	joined     bool
	storedRate float64 // as learnt then; joined, l.rate follows SetRate
	storedKind string
	storedUnit string
	mismatch   bool
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
	if check.IsNil(client) {
		return nil, ErrNilClient
	}
	if name == "" || len(name) > 200 || containsAny(name, "{}") {
		return nil, fmt.Errorf("%w: %q", ErrInvalidName, name)
	}
	if err := check.Rate(permitsPerSecond); err != nil {
		return nil, err
	}
	cfg, err := buildConfig(opts)
	if err != nil {
		return nil, err
	}
	l := &Limiter{
		client:    client,
		keys:      keysOf(name),
		cfg:       cfg,
		kind:      "b",
		clock:     cfg.clock,
		rate:      permitsPerSecond,
		asked0:    permitsPerSecond,
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
		l.tsc = tsc.Usable() && !tsc.FakeTime()
		l.startTSC = tsc.Since(l.start)
	} else {
		l.start = l.clock.Now()
	}
	_, ordered := l.clock.(orderedClock)
	l.unordered = l.tsc || ordered
	if cfg.logger != nil && !contextTimeoutEnabled(client) {
		cfg.logger.Warn("distributed: the redis client does not set ContextTimeoutEnabled: a call to a server that hangs outlives the call timeout, until the client's ReadTimeout, and Close waits for it",
			"limiter", name, "callTimeout", cfg.callTimeout)
	}
	h := fnv.New64a()
	_, _ = h.Write([]byte(cfg.processID))
	l.rng = rand.New(rand.NewPCG(h.Sum64(), uint64(time.Now().UnixNano())))
	return l, nil
}

// keysOf returns the Redis keys of the limiter name, in lease.lua's KEYS
// order: the shared state (with the registry of processes in it) and the
// histogram of their demands. The hash tag {name} puts them in one cluster
// slot.
func keysOf(name string) []string {
	p := "ratelimit:{" + name + "}:"
	return []string{p + "state", p + "demand"}
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

// elapsed reads the local clock: the time since the limiter was made.
// With the default clock it is read in order, after every memory reference
// before it (see elapsedFast).
func (l *Limiter) elapsed() time.Duration {
	if l.tsc {
		return time.Duration(tsc.NowOrdered() - l.startTSC)
	}
	if l.clock == nil {
		return time.Since(l.start)
	}
	if c, ok := l.clock.(orderedClock); ok {
		return c.nowOrdered().Sub(l.start)
	}
	return l.clock.Now().Sub(l.start)
}

// orderedClock is a Clock whose Now, like the counter's unordered reading,
// may come from a little before the state the limiter compares it with,
// and whose nowOrdered may not: tests implement it to show what a stale
// reading does (elapsedFast reads Now, elapsed nowOrdered).
type orderedClock interface {
	ratelimit.Clock
	nowOrdered() time.Time
}

// elapsedFast is elapsed for the hot path's first reading: with the
// default clock, where the processor's counter is the kernel's clock, the
// counter read without a fence (about a third of what time.Since costs:
// internal/tsc's BenchmarkClock), which the processor may take a little
// before the memory references that precede it (as the root Limiter does:
// ratelimit.Limiter's elapsed).
// Acquire and TryAcquire grant on it only from a tranche that is not within
// tsc.ReorderSlack of lapsing, and a refusal or a call to Redis reads the
// clock again with elapsed. A grant that must wait for its permits waits
// from the unordered reading: at most a fraction of a microsecond longer,
// never less.
func (l *Limiter) elapsedFast() time.Duration {
	if l.tsc {
		return time.Duration(tsc.Now() - l.startTSC)
	}
	if l.clock != nil {
		return l.clock.Now().Sub(l.start)
	}
	return l.elapsed()
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
	return time.Duration(sat.Add(int64(now), int64(left)))
}

func (l *Limiter) sleep(ctx context.Context, d time.Duration) error {
	if d <= 0 {
		return ctx.Err()
	}
	if l.clock != nil {
		return l.clock.Sleep(ctx, d)
	}
	return sleep.Ctx(ctx, d)
}

// contextTimeoutEnabled reports whether client lets a context deadline
// bound its socket I/O; true for clients it cannot tell (its own types).
func contextTimeoutEnabled(client redis.UniversalClient) bool {
	switch c := client.(type) {
	case *redis.Client:
		return c.Options().ContextTimeoutEnabled
	case *redis.ClusterClient:
		return c.Options().ContextTimeoutEnabled
	case *redis.Ring:
		return c.Options().ContextTimeoutEnabled
	}
	return true
}

// errZero is what the methods of a zero Limiter return.
var errZero = fmt.Errorf("%w: distributed.Limiter (use New)", ratelimit.ErrNotInitialized)

// made reports whether New made l: only New sets a client, and every method
// that may start a Redis call checks it first, so that no background
// goroutine ever calls a nil client.
func (l *Limiter) made() bool { return l.client != nil }

// Rate returns the fleet's rate as this process last learnt it from Redis
// (the configured rate before the first call).
func (l *Limiter) Rate() float64 {
	if !l.made() {
		return 0
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.rate
}

// Close gives the unspent permits back to the fleet, leaves the fair-share
// registry and waits for every background call to end (bounded by ctx).
// After Close, Acquire returns ErrClosed and TryAcquire false; callers
// already sleeping until permits they took become usable are not
// interrupted. Closing twice is harmless.
func (l *Limiter) Close(ctx context.Context) error {
	if !l.made() {
		return nil // a zero Limiter has nothing to give back or wait for
	}
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
	args := l.refundArgsLocked(n, l.configVersion, true)
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
