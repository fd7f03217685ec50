package throttle

import (
	"context"
	"fmt"
	"reflect"
	"strings"
	"time"

	"github.com/smoothrate/ratelimit"
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
	// if all allow, none otherwise. out has len(rs) elements.
	decideAll(ctx context.Context, rs []request, out []Decision) error
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

// A StoreOption configures a MemoryStore or a RedisStore. Options that do
// not apply to a store, or that have bad values, do not panic: the store
// keeps the error, and New and every call return it (ErrInvalidOption).
type StoreOption interface {
	apply(*storeConfig)
}

type storeOptionFunc func(*storeConfig)

func (f storeOptionFunc) apply(c *storeConfig) { f(c) }

// storeConfig holds every store knob with its default; buildStoreConfig is
// the only place defaults are set.
type storeConfig struct {
	clock        ratelimit.Clock // nil: the time package (MemoryStore) or Redis TIME (RedisStore)
	maxKeys      int
	maxKeysSet   bool
	prefix       string
	refusalCache int           // RedisStore: keys in the local refusal cache; 0: off
	callTimeout  time.Duration // RedisStore: the bound on one call
	timeoutSet   bool
	errs         []error
}

// DefaultMaxKeys is how many keys a MemoryStore keeps when WithMaxKeys is
// not given.
const DefaultMaxKeys = 1 << 20

// DefaultKeyPrefix starts every key a RedisStore writes.
const DefaultKeyPrefix = "throttle:"

func buildStoreConfig(opts []StoreOption) storeConfig {
	c := storeConfig{maxKeys: DefaultMaxKeys, prefix: DefaultKeyPrefix, callTimeout: defaultCallTimeout}
	for _, o := range opts {
		if o == nil {
			c.errs = append(c.errs, fmt.Errorf("%w: nil option", ErrInvalidOption))
			continue
		}
		o.apply(&c)
	}
	return c
}

// err joins the configuration errors, or returns nil.
func (c *storeConfig) err() error {
	if len(c.errs) == 0 {
		return nil
	}
	if len(c.errs) == 1 {
		return c.errs[0]
	}
	msgs := make([]string, len(c.errs))
	for i, e := range c.errs {
		msgs[i] = e.Error()
	}
	return fmt.Errorf("%w: %s", ErrInvalidOption, strings.Join(msgs, "; "))
}

// WithClock makes the store read time from c. For a RedisStore the time is
// then passed into the scripts instead of reading Redis TIME: meant for
// tests (every process must then agree on the time).
func WithClock(c ratelimit.Clock) StoreOption {
	return storeOptionFunc(func(cfg *storeConfig) {
		if isNil(c) {
			cfg.errs = append(cfg.errs, fmt.Errorf("%w: nil clock", ErrInvalidOption))
			return
		}
		cfg.clock = c
	})
}

// WithMaxKeys bounds a MemoryStore to n keys (n ≥ 1), evicting a key that
// was not used recently when full (CLOCK, the usual approximation of least
// recently used, per shard; no eviction while the store holds fewer than
// min(n, 1024) keys). Default DefaultMaxKeys.
func WithMaxKeys(n int) StoreOption {
	return storeOptionFunc(func(cfg *storeConfig) {
		if n < 1 {
			cfg.errs = append(cfg.errs, fmt.Errorf("%w: max keys %d must be at least 1", ErrInvalidOption, n))
			return
		}
		cfg.maxKeys, cfg.maxKeysSet = n, true
	})
}

// WithKeyPrefix sets the prefix of every key a RedisStore writes (default
// DefaultKeyPrefix). It must not contain '{' or '}': hash tags belong to
// the keys themselves (see RedisStore).
func WithKeyPrefix(s string) StoreOption {
	return storeOptionFunc(func(cfg *storeConfig) {
		if strings.ContainsAny(s, "{}") {
			cfg.errs = append(cfg.errs, fmt.Errorf("%w: key prefix %q must not contain '{' or '}'", ErrInvalidOption, s))
			return
		}
		cfg.prefix = s
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
	return storeOptionFunc(func(cfg *storeConfig) {
		if maxKeys < 1 {
			cfg.errs = append(cfg.errs, fmt.Errorf("%w: refusal cache size %d must be at least 1", ErrInvalidOption, maxKeys))
			return
		}
		cfg.refusalCache = maxKeys
	})
}
