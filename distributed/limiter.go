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
	"github.com/smoothrate/ratelimit/internal/redisscript"
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
//
// Its state is in a few named parts, each in its own file: identity (who
// it is: client, keys, kind; identity.go), localClock (its time line;
// clock.go), fleet (what Redis last said about the fleet and the name;
// identity.go), leasePool (the permits held and the call in flight;
// pool.go), demandState (what callers ask for, and the lease sizes it
// implies; demand.go) and health (whether Redis answers, and the local
// fallback while it does not; fallback.go). One decision loop
// (acquire.go) serves Acquire and TryAcquire.
type Limiter struct {
	identity
	cfg config
	localClock

	wg sync.WaitGroup // every goroutine that talks to Redis

	// mu guards everything below. A method whose name ends in Locked is
	// called with mu held and returns with it held, never releasing it.
	mu sync.Mutex
	fleet
	leasePool
	// nextLapse belongs to leasePool: no tranche lapses before it (a
	// lower bound: pruneLocked recomputes it). It is a field of Limiter
	// itself so that a Limiter literal can set it (the pool's tests make
	// bare Limiters).
	nextLapse time.Duration
	demandState
	health
	closed   bool
	gaveBack bool // a Close gave the unspent permits back (or tried)
	st       Stats
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
		identity:   identity{client: client, gate: redisscript.NewGate(client, cfg.callTimeout), keys: keysOf(name), kind: "b", asked0: permitsPerSecond},
		cfg:        cfg,
		localClock: startClock(cfg.clock),
		fleet:      fleet{rate: permitsPerSecond},
		nextLapse:  math.MaxInt64,
		health:     health{healthy: true},
	}
	l.resizeLocked()
	if cfg.setWarmup {
		l.kind = "w"
	}
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

// contextTimeoutEnabled reports whether client lets a context deadline
// bound its socket I/O; true for clients it cannot tell (its own types).
func contextTimeoutEnabled(client redis.UniversalClient) bool {
	on, known := redisscript.ContextTimeout(client)
	return on || !known
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
// interrupted. Closing twice is harmless, and a Close that ctx ended before
// it gave the permits back can be called again to finish. A nil ctx is
// ratelimit.ErrNilContext, and closes nothing.
func (l *Limiter) Close(ctx context.Context) error {
	if !l.made() {
		return nil // a zero Limiter has nothing to give back or wait for
	}
	if ctx == nil {
		return ratelimit.ErrNilContext
	}
	l.mu.Lock()
	l.closed = true
	for l.inflight != nil && !l.gaveBack {
		ch := l.inflight
		l.mu.Unlock()
		select {
		case <-ch:
		case <-ctx.Done():
			return ctx.Err() // a later Close takes it from here
		}
		l.mu.Lock()
	}
	if l.gaveBack { // by an earlier Close
		l.mu.Unlock()
		return l.waitBackground(ctx, nil)
	}
	l.gaveBack = true
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
	return l.waitBackground(ctx, err)
}

// waitBackground waits, within ctx, for every background call to end, and
// returns err joined with ctx's error if ctx ends first.
func (l *Limiter) waitBackground(ctx context.Context, err error) error {
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
