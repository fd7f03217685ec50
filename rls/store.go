package rls

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"strings"
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
	// windows adds each op's hits to its window counter as mode says and
	// sets op.after, all in one step (one round trip on Redis, or a few
	// for a call of more than maxBatchKeys windows counted with
	// countEvery). It returns when ctx ends, counting none of what it has
	// not counted yet.
	windows(ctx context.Context, ops []windowOp, mode countMode) error
	// undo takes back the hits of ops that windows counted with
	// countWhole (never below 0), for a call that the additions then
	// refused, and sets op.after to what each counter holds.
	undo(ctx context.Context, ops []windowOp) error
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
	windowsWithin(ctx context.Context, ops []windowOp, mode countMode, timeout time.Duration) error
}

// countMode is how the windows count a call's hits.
type countMode uint8

const (
	// countEvery adds every hit to its window, refused ones too (the
	// reference's counting): each window on its own.
	countEvery countMode = iota
	// countWhole adds a call's hits to all of its windows when every one
	// of them stays within its limit, and to none otherwise
	// (WithCountOnlyAdmitted). A refused call's op.after is the count
	// after its hits for a window that goes over, and the count the window
	// holds for the others.
	countWhole
	// countUndo takes back what countWhole counted (Store.undo).
	countUndo
)

// maxCount is where a window's count saturates: hits_addend is a uint64,
// and a count of at most 2^53 − 1 stays exact in the Redis script's
// doubles and never overflows Redis's INCRBY, so a huge hits_addend
// leaves a counter that is over any limit (requests_per_unit is a uint32)
// and that every later call still reads. Both stores saturate here.
const maxCount = 1<<53 - 1

// windowOp is one reference-window increment.
type windowOp struct {
	key    string // window key, including the window's start
	hits   uint64 // at most maxCount
	limit  uint64 // the window's requests_per_unit
	ttl    int64  // seconds until the window ends, at least 1
	keep   int64  // seconds Redis keeps the counter (its TTL): a window past its end
	end    int64  // unix seconds at which the window ends
	after  uint64 // result: the count after the increment (or as if added), at most maxCount
	cached bool   // result: answered by the refusal cache, not the store
}

// anyOver reports whether any op's count is over its limit: a refused call.
func anyOver(ops []windowOp) bool {
	for i := range ops {
		if ops[i].after > ops[i].limit {
			return true
		}
	}
	return false
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
	maxBytes     int
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

// WithMaxBytes bounds a MemoryStore's window counters to about n bytes
// (their keys and counts, and the map entries that hold them) and gives
// its additions throttle.WithMaxBytes(n); default DefaultMaxBytes. Past
// it, the store drops counters as when it is full of keys (WithMaxKeys),
// so that a flood of long descriptor values cannot exhaust memory however
// few keys it makes. n must be at least MinMaxBytes.
func WithMaxBytes(n int) StoreOption {
	return storeOptionFunc(func(cfg *storeConfig) {
		if n < MinMaxBytes {
			cfg.errs = append(cfg.errs, fmt.Errorf("%w: max bytes %d must be at least %d", ErrInvalidOption, n, MinMaxBytes))
			return
		}
		cfg.maxBytes = n
	})
}

func (c *storeConfig) nowFunc() func() time.Time {
	if c.clock != nil {
		return c.clock.Now
	}
	return time.Now
}
