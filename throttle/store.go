package throttle

import (
	"context"
	"fmt"
	"reflect"
	"strings"
	"time"
)

// A Store keeps the per-key state of keyed limiters and decides atomically.
// The two implementations are MemoryStore (one process, the embedded
// default) and RedisStore (shared by every process that uses the same
// Redis); they implement the same definitions with the same arithmetic and
// return identical Decisions for identical sequences of calls and times.
//
// The interface is sealed (its methods are unexported) so that it can grow
// without breaking anyone; wrap a Limiter rather than a Store.
type Store interface {
	// decide decides one request, atomically.
	decide(ctx context.Context, r request) (Decision, error)
	// decideAll decides every request as one atomic step: all are counted
	// if all allow and commit is set, none otherwise. out has len(rs)
	// elements.
	decideAll(ctx context.Context, rs []request, out []Decision, commit bool) error
	// reset forgets the key's state for the algorithm.
	reset(ctx context.Context, alg Algorithm, key string) error
	// err reports a configuration error (a bad option; a nil store).
	err() error
}

// request is one question to a store: may key do n under p?
type request struct {
	p   *params
	key string
	n   int64
}

// A StoreOption configures a MemoryStore or a RedisStore. A nil option, an
// option with a bad value and an option that does not apply to the store it
// is given to (WithKeyPrefix or WithRefusalCache to NewMemoryStore,
// WithMaxKeys to NewRedisStore) are errors wrapping ErrInvalidOption,
// returned by the constructor, as everywhere in this module.
type StoreOption interface {
	apply(*storeConfig) error
}

type storeOptionFunc func(*storeConfig) error

func (f storeOptionFunc) apply(c *storeConfig) error { return f(c) }

// storeConfig holds every store knob with its default; buildStoreConfig is
// the only place defaults are set.
type storeConfig struct {
	clock        Clock // nil: the time package (MemoryStore) or Redis TIME (RedisStore)
	maxKeys      int
	maxBytes     int
	prefix       string
	refusalCache int           // RedisStore: keys in the local refusal cache; 0: off
	callTimeout  time.Duration // RedisStore: the bound on one call

	// What was set, so that options that do not apply can be refused.
	setMaxKeys, setMaxBytes, setPrefix, setTimeout bool
}

// DefaultMaxKeys is how many keys a MemoryStore keeps when WithMaxKeys is
// not given.
const DefaultMaxKeys = 1 << 20

// DefaultMaxBytes is how many bytes of keys and states a MemoryStore
// keeps when WithMaxBytes is not given: 256 MiB, far above what
// DefaultMaxKeys keys of a few dozen bytes take, so that it bounds a
// store whose keys are long (a flood of distinct long values) and nothing
// else.
const DefaultMaxBytes = 256 << 20

// MinMaxBytes is the least WithMaxBytes takes: one shard's worth, which
// holds many keys of the longest length a shard keeps (maxHeldKey).
const MinMaxBytes = minShardBytes

// DefaultKeyPrefix starts every key a RedisStore writes.
const DefaultKeyPrefix = "throttle:"

func buildStoreConfig(opts []StoreOption) (storeConfig, error) {
	c := storeConfig{maxKeys: DefaultMaxKeys, maxBytes: DefaultMaxBytes, prefix: DefaultKeyPrefix, callTimeout: defaultCallTimeout}
	for _, o := range opts {
		if o == nil {
			return storeConfig{}, fmt.Errorf("%w: nil option", ErrInvalidOption)
		}
		if err := o.apply(&c); err != nil {
			return storeConfig{}, err
		}
	}
	return c, nil
}

// WithStoreClock makes the store decide at the times c reads instead of
// the wall clock. For a RedisStore the time is then passed into the scripts
// instead of reading Redis TIME: meant for tests (every process must then
// agree on the time).
func WithStoreClock(c Clock) StoreOption {
	return storeOptionFunc(func(cfg *storeConfig) error {
		if isNil(c) {
			return fmt.Errorf("%w: nil clock", ErrInvalidOption)
		}
		cfg.clock = c
		return nil
	})
}

// WithMaxKeys bounds a MemoryStore to n keys (n ≥ 1), evicting a key that
// was not used recently when full (CLOCK, the usual approximation of least
// recently used, per shard; no eviction while the store holds fewer than
// min(n, 1024) keys). Default DefaultMaxKeys. MemoryStore only.
func WithMaxKeys(n int) StoreOption {
	return storeOptionFunc(func(cfg *storeConfig) error {
		if n < 1 {
			return fmt.Errorf("%w: max keys %d must be at least 1", ErrInvalidOption, n)
		}
		cfg.maxKeys, cfg.setMaxKeys = n, true
		return nil
	})
}

// WithMaxBytes bounds a MemoryStore to n bytes of heap (n ≥ MinMaxBytes;
// default DefaultMaxBytes): its tables (a slot of 32 bytes, 72 in a shard
// that holds a wide state, 8 more in one that holds a key of fewer than 4
// or more than 16 bytes, at most three quarters of them used), the keys
// it keeps as strings (in Go's size classes) and the sliding logs (their
// buffers, 8 bytes an entry); KeyOverhead sizes it. A key longer than 512
// bytes is held by its SHA-256 digest (32 bytes), so that a long key costs
// what a short one does and the bound holds whatever the keys. When a
// shard's share of n is used, the shard evicts as when it is full of keys
// (WithMaxKeys), and a table grows no longer than its share allows. The
// bound counts a key's own bytes: the store copies
// a key of 4 to 16 bytes into its table, and keeps a longer or shorter
// one as the string it was given, as a map does, so such a key sliced out
// of a larger string keeps all of that string alive; give it
// strings.Clone(key) then.
// MemoryStore only.
func WithMaxBytes(n int) StoreOption {
	return storeOptionFunc(func(cfg *storeConfig) error {
		if n < MinMaxBytes {
			return fmt.Errorf("%w: max bytes %d must be at least %d", ErrInvalidOption, n, MinMaxBytes)
		}
		cfg.maxBytes, cfg.setMaxBytes = n, true
		return nil
	})
}

// WithKeyPrefix sets the prefix of every key a RedisStore writes (default
// DefaultKeyPrefix). RedisStore only. It must not contain '{' or '}': hash tags belong to
// the keys themselves (see RedisStore).
func WithKeyPrefix(s string) StoreOption {
	return storeOptionFunc(func(cfg *storeConfig) error {
		if strings.ContainsAny(s, "{}") {
			return fmt.Errorf("%w: key prefix %q must not contain '{' or '}'", ErrInvalidOption, s)
		}
		cfg.prefix, cfg.setPrefix = s, true
		return nil
	})
}

// maxMicros bounds the clock: microseconds since the epoch must stay below
// 2^52 (year 2112), so that a window end or a log entry plus a period
// (below 2^52 µs as well) stays an exact float64 in the Redis scripts.
const maxMicros = 1 << 52

// micros converts t to whole microseconds since the Unix epoch.
func micros(t time.Time) (int64, error) {
	us := t.UnixMicro()
	if us < 0 || us >= maxMicros {
		return 0, fmt.Errorf("%w: %v", ErrInvalidTime, t)
	}
	return us, nil
}

// isNil reports whether v is nil or a typed nil pointer, map, func, …
func isNil(v any) bool {
	if v == nil {
		return true
	}
	switch rv := reflect.ValueOf(v); rv.Kind() {
	case reflect.Pointer, reflect.Map, reflect.Func, reflect.Chan, reflect.Slice, reflect.Interface:
		return rv.IsNil()
	}
	return false
}

// WithRefusalCache makes a RedisStore remember up to maxKeys recent
// refusals in this process (maxKeys ≥ 1): a key refused with RetryAfter T
// is then refused again without a round trip until T has passed, which
// keeps a flooding key off Redis. Only refusals that stay exact are cached
// (a request of n refused with Remaining n − 1, which includes every
// refused single request); the cached answer is the Decision Redis would
// give if no other process wrote to the key: same Remaining, RetryAfter and
// ResetAfter reduced by the time elapsed. Reset through this store forgets
// the key's entry; a Reset by another process is seen once the cached
// RetryAfter has passed. AllowAll does not use the cache. When full, a
// random entry (an expired one if found) makes room. It applies to a
// RedisStore only: a MemoryStore has no round trip to save.
func WithRefusalCache(maxKeys int) StoreOption {
	return storeOptionFunc(func(cfg *storeConfig) error {
		if maxKeys < 1 {
			return fmt.Errorf("%w: refusal cache size %d must be at least 1", ErrInvalidOption, maxKeys)
		}
		cfg.refusalCache = maxKeys
		return nil
	})
}
