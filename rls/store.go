package rls

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"strings"
	"sync"
	"time"

	"github.com/smoothrate/ratelimit/throttle"
)

// Store errors: the module's one set of failure errors, the same values as
// throttle's and distributed's ErrStore, ErrUnavailable and
// ErrMisconfigured. A store error reads "rls: <what failed>: <cause>",
// whichever of the store's parts failed (the reference's windows or the
// additions' throttle store). A Service answers gRPC UNAVAILABLE for
// ErrUnavailable (an outage) and for the caller's own end, INTERNAL for any
// other store error: a store set up wrong (ErrMisconfigured, also counted
// by the store_misconfigured metric) or a bug; a command refuses to start
// on ErrMisconfigured.
var (
	// ErrStore: the store failed; every store error matches it (the
	// caller's context ending during a call too), and one of
	// ErrUnavailable and ErrMisconfigured when the failure is one of
	// theirs.
	ErrStore = throttle.ErrStore
	// ErrUnavailable: the store did not answer within the store timeout,
	// could not be reached, or said it cannot serve now (loading, a
	// failover, out of memory under maxmemory).
	ErrUnavailable = throttle.ErrUnavailable
	// ErrMisconfigured: the store answers but cannot be used as
	// configured (wrong password or database, cluster mode mismatch, a
	// key of another type).
	ErrMisconfigured = throttle.ErrMisconfigured
	// ErrInvalidOption: an option with a bad value.
	ErrInvalidOption = errors.New("rls: invalid option")
)

// A Store keeps the counters of a Service: MemoryStore (one process, the
// default) or RedisStore (shared by every instance that uses the same
// Redis). Both hold the reference's fixed windows and, for the additions'
// algorithms, a throttle store; they answer identically for identical calls
// at identical times.
//
// The interface is sealed: its methods are unexported.
type Store interface {
	// windows adds each op's hits to its window counter (or, with
	// onlyAdmitted, only when the sum stays within its limit) and sets
	// op.after, all in one step (one round trip on Redis).
	windows(ctx context.Context, ops []windowOp, onlyAdmitted bool) error
	// limits is the throttle store the additions' limiters use.
	limits() throttle.Store
	// now reads the store's clock, in whole seconds since the epoch.
	now() time.Time
	// traits says how a Service may use the store.
	traits() storeTraits
}

// storeTraits are what a Service needs to know of a store's shape.
type storeTraits struct {
	// prefix starts every window key (WithKeyPrefix).
	prefix string
	// remote: the store makes round trips, which the Service bounds by
	// its store timeout and runs at once (windows and additions).
	remote bool
	// oneSlot: the additions of several descriptors may be decided in
	// one AllowAll (their keys live on one server, or in this process).
	oneSlot bool
	// timedWindows: the store is a timedWindows whose windowsWithin
	// returns when its timeout passes whatever the client does, so that a
	// call with only windows runs without a goroutine of its own.
	timedWindows bool
}

// timedWindows is a store that bounds its windows by a timeout itself
// (see storeTraits.timedWindows).
type timedWindows interface {
	windowsWithin(ctx context.Context, ops []windowOp, onlyAdmitted bool, timeout time.Duration) error
}

// windowOp is one reference-window increment.
type windowOp struct {
	key    string // window key, including the window's start
	hits   uint64
	limit  uint64 // the window's requests_per_unit (for onlyAdmitted)
	ttl    int64  // seconds until the window ends, at least 1
	after  uint64 // result: the count after the increment (or as if added)
	cached bool   // result: answered by the refusal cache, not the store
}

// A StoreOption configures a MemoryStore or a RedisStore; bad values are
// reported by the constructor (ErrInvalidOption).
type StoreOption interface{ applyStore(*storeConfig) }

type storeOptionFunc func(*storeConfig)

func (f storeOptionFunc) applyStore(c *storeConfig) { f(c) }

type storeConfig struct {
	clock        throttle.Clock
	prefix       string
	refusalCache int
	maxKeys      int
	setPrefix    bool
	errs         []error
}

func buildStoreConfig(opts []StoreOption) (storeConfig, error) {
	c := storeConfig{}
	for _, o := range opts {
		if o == nil || (reflect.ValueOf(o).Kind() == reflect.Func && reflect.ValueOf(o).IsNil()) {
			c.errs = append(c.errs, fmt.Errorf("%w: nil store option", ErrInvalidOption))
			continue
		}
		o.applyStore(&c)
	}
	return c, errors.Join(c.errs...)
}

// WithStoreClock makes the store read time from c instead of the time
// package (for tests: every instance sharing a Redis must agree on the
// time), as throttle.WithStoreClock does. A ratelimit.Clock or a clocktest
// clock will do.
func WithStoreClock(c throttle.Clock) StoreOption {
	return storeOptionFunc(func(cfg *storeConfig) {
		if c == nil || (reflect.ValueOf(c).Kind() == reflect.Pointer && reflect.ValueOf(c).IsNil()) {
			cfg.errs = append(cfg.errs, fmt.Errorf("%w: nil clock", ErrInvalidOption))
			return
		}
		cfg.clock = c
	})
}

// WithKeyPrefix starts every key the store writes with prefix (the
// reference's CACHE_KEY_PREFIX; default none for the windows, throttle's
// DefaultKeyPrefix for the additions' keys, which follow it).
func WithKeyPrefix(prefix string) StoreOption {
	return storeOptionFunc(func(cfg *storeConfig) {
		if strings.ContainsAny(prefix, "{}") {
			cfg.errs = append(cfg.errs, fmt.Errorf("%w: key prefix %q must not contain '{' or '}'", ErrInvalidOption, prefix))
			return
		}
		cfg.prefix, cfg.setPrefix = prefix, true
	})
}

// WithRefusalCache makes a RedisStore remember up to n over-limit keys in
// this process and refuse them again without a round trip until their
// window ends (the reference's LOCAL_CACHE_SIZE_IN_BYTES, counted in
// keys), and gives its additions throttle.WithRefusalCache(n).
func WithRefusalCache(n int) StoreOption {
	return storeOptionFunc(func(cfg *storeConfig) {
		if n < 1 {
			cfg.errs = append(cfg.errs, fmt.Errorf("%w: refusal cache size %d must be at least 1", ErrInvalidOption, n))
			return
		}
		cfg.refusalCache = n
	})
}

// WithMaxKeys bounds a MemoryStore to about n window counters and n keys
// of the additions (throttle.WithMaxKeys); default throttle.DefaultMaxKeys.
// A window's counter is dropped once its window has ended; when the store
// is full of live ones, a random one is dropped (its descriptor starts
// again from zero), so that a flood of distinct descriptors cannot
// exhaust memory.
func WithMaxKeys(n int) StoreOption {
	return storeOptionFunc(func(cfg *storeConfig) {
		if n < 1 {
			cfg.errs = append(cfg.errs, fmt.Errorf("%w: max keys %d must be at least 1", ErrInvalidOption, n))
			return
		}
		cfg.maxKeys = n
	})
}

func (c *storeConfig) nowFunc() func() time.Time {
	if c.clock != nil {
		return c.clock.Now
	}
	return time.Now
}

// MemoryStore keeps every counter in this process: one instance needs
// nothing else. Safe for concurrent use.
type MemoryStore struct {
	cfg    storeConfig
	clock  func() time.Time
	shards [memShards]memShard
	lim    *throttle.MemoryStore
	// perShard bounds each shard's window counters.
	perShard int
}

const memShards = 64

type memShard struct {
	mu sync.Mutex
	m  map[string]memWindow
	// sweepAt is the size at which the shard next drops ended windows:
	// twice its live size after the last sweep, so sweeping costs O(1)
	// per insert, amortized.
	sweepAt int
	_       [40]byte
}

type memWindow struct {
	count uint64
	end   int64 // unix seconds at which the window ends
}

// NewMemoryStore returns an empty in-process store. Options: WithStoreClock
// and WithMaxKeys; WithKeyPrefix and WithRefusalCache apply to a RedisStore
// only, so they are errors here (ErrInvalidOption), as any option that does
// not apply is.
func NewMemoryStore(opts ...StoreOption) (*MemoryStore, error) {
	cfg, err := buildStoreConfig(opts)
	if err != nil {
		return nil, err
	}
	if cfg.refusalCache > 0 {
		return nil, fmt.Errorf("%w: WithRefusalCache applies to a RedisStore (a MemoryStore has no round trip to save)", ErrInvalidOption)
	}
	if cfg.setPrefix {
		return nil, fmt.Errorf("%w: WithKeyPrefix applies to a RedisStore (a MemoryStore's keys never leave the process)", ErrInvalidOption)
	}
	var topts []throttle.StoreOption
	if cfg.clock != nil {
		topts = append(topts, throttle.WithStoreClock(cfg.clock))
	}
	if cfg.maxKeys > 0 {
		topts = append(topts, throttle.WithMaxKeys(cfg.maxKeys))
	}
	lim, err := newThrottleMemory(topts...)
	if err != nil {
		return nil, err
	}
	maxKeys := cfg.maxKeys
	if maxKeys == 0 {
		maxKeys = throttle.DefaultMaxKeys
	}
	s := &MemoryStore{cfg: cfg, clock: cfg.nowFunc(), lim: lim, perShard: max(1, maxKeys/memShards)}
	for i := range s.shards {
		s.shards[i].m = map[string]memWindow{}
		s.shards[i].sweepAt = 1024
	}
	return s, nil
}

// newThrottleMemory is the one place a throttle.MemoryStore is made.
func newThrottleMemory(opts ...throttle.StoreOption) (*throttle.MemoryStore, error) {
	s, err := throttle.NewMemoryStore(opts...)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrInvalidOption, err)
	}
	return s, nil
}

func (s *MemoryStore) now() time.Time         { return s.clock() }
func (s *MemoryStore) limits() throttle.Store { return s.lim }
func (s *MemoryStore) traits() storeTraits    { return storeTraits{prefix: s.cfg.prefix, oneSlot: true} }

func (s *MemoryStore) windows(_ context.Context, ops []windowOp, onlyAdmitted bool) error {
	now := s.clock().Unix()
	for i := range ops {
		op := &ops[i]
		sh := &s.shards[fnv32(op.key)%memShards]
		sh.mu.Lock()
		w, ok := sh.m[op.key]
		if ok && now >= w.end {
			w, ok = memWindow{}, false
		}
		sum := w.count + op.hits
		if sum < w.count {
			sum = ^uint64(0) // saturate: no wrap to a small count
		}
		op.after = sum
		if op.hits > 0 && (!onlyAdmitted || sum <= op.limit) {
			if !ok {
				w.end = now + op.ttl
				if len(sh.m) >= min(sh.sweepAt, s.perShard) {
					sh.sweep(now)
					if len(sh.m) >= s.perShard {
						sh.evict()
					}
				}
			}
			w.count = sum
			sh.m[op.key] = w
		}
		sh.mu.Unlock()
	}
	return nil
}

func (sh *memShard) sweep(now int64) {
	for k, w := range sh.m {
		if now >= w.end {
			delete(sh.m, k)
		}
	}
	sh.sweepAt = max(1024, 2*len(sh.m))
}

// evict drops one live counter: Go's map order makes it a random one.
func (sh *memShard) evict() {
	for k := range sh.m {
		delete(sh.m, k)
		return
	}
}

func fnv32(s string) uint32 {
	h := uint32(2166136261)
	for i := 0; i < len(s); i++ {
		h ^= uint32(s[i])
		h *= 16777619
	}
	return h
}
