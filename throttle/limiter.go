package throttle

import (
	"context"
	"fmt"
	"slices"
)

// MaxKeyLen is the longest key, in bytes, that a Limiter takes (16 MiB − 1):
// a MemoryStore keeps a key's length in 24 bits of its entry. Every store
// refuses a longer key with ErrKeyTooLong, so that both decide alike.
const MaxKeyLen = 1<<24 - 1

// Limiter answers "may key K do this now?" for any number of keys under one
// Limit and one Algorithm, keeping the keys' state in a Store. Make one
// with New; the zero value returns ErrNilStore. A Limiter is safe for
// concurrent use and holds no state of its own: limiters with the same
// algorithm over the same store share a key's state, whatever their limits
// (as redis_rate's calls do), so a key's limit can change from one call to
// the next.
type Limiter struct {
	store Store
	// mem is store when it is a MemoryStore: AllowN then calls it
	// directly, without building a request or an interface call, so that
	// the whole decision on an existing key is a few calls deep.
	mem *MemoryStore
	p   params
}

// New returns a Limiter that applies limit with alg, keeping state in
// store. It returns an error wrapping ErrInvalidLimit, ErrInvalidAlgorithm,
// ErrNilStore or the store's configuration error (ErrInvalidOption).
func New(store Store, alg Algorithm, limit Limit) (*Limiter, error) {
	if isNil(store) {
		return nil, ErrNilStore
	}
	if err := store.err(); err != nil {
		return nil, err
	}
	p, err := newParams(alg, limit)
	if err != nil {
		return nil, err
	}
	mem, _ := store.(*MemoryStore)
	return &Limiter{store: store, mem: mem, p: p}, nil
}

// Algorithm returns the limiter's algorithm.
func (l *Limiter) Algorithm() Algorithm { return l.p.alg }

// Store returns the store l decides in (AllowAll takes limiters of one
// store only).
func (l *Limiter) Store() Store { return l.store }

// Limit returns the limiter's limit, with Burst filled in.
func (l *Limiter) Limit() Limit {
	return Limit{Count: int(l.p.count), Period: us(l.p.period), Burst: int(l.p.burst)}
}

// Allow is AllowN(ctx, key, 1).
func (l *Limiter) Allow(ctx context.Context, key string) (d Decision, err error) {
	err = l.allow(ctx, &d, key, 1)
	return d, err
}

// AllowN decides whether key may do n now and, if so, counts it. n = 0
// peeks: it changes nothing and reports the key's state. A refused request
// changes nothing either. A request for more than Decision.Limit is
// refused with RetryAfter = Never.
//
// Errors wrap ErrEmptyKey, ErrKeyTooLong, ErrInvalidCost, ErrNilStore,
// ErrNilContext, ErrInvalidTime or ErrStore (with the store's own error); the Decision is
// then the zero value, which refuses.
func (l *Limiter) AllowN(ctx context.Context, key string, n int) (d Decision, err error) {
	err = l.allow(ctx, &d, key, n) // small enough to inline: one call less
	return d, err
}

// allowN is AllowN through the Store interface, and every error.
func (l *Limiter) allowN(ctx context.Context, key string, n int) (Decision, error) {
	r, err := l.request(ctx, key, n)
	if err != nil {
		return Decision{}, err
	}
	return l.store.decide(ctx, r)
}

// Reset forgets key's state: it is back to its full allowance.
func (l *Limiter) Reset(ctx context.Context, key string) error {
	if _, err := l.request(ctx, key, 0); err != nil { // the same checks as a decision's
		return err
	}
	return l.store.reset(ctx, l.p.alg, key)
}

func (l *Limiter) request(ctx context.Context, key string, n int) (request, error) {
	switch {
	case ctx == nil:
		return request{}, ErrNilContext
	case l == nil || l.store == nil:
		return request{}, ErrNilStore
	case key == "":
		return request{}, ErrEmptyKey
	case len(key) > MaxKeyLen:
		return request{}, fmt.Errorf("%w: %d bytes", ErrKeyTooLong, len(key))
	case n < 0:
		return request{}, fmt.Errorf("%w: %d", ErrInvalidCost, n)
	}
	return request{p: &l.p, key: key, n: int64(n)}, nil
}

// Check is one (limiter, key, n) question for AllowAll.
type Check struct {
	Limiter *Limiter
	Key     string
	N       int
}

// AllowAll decides several checks as one atomic step ("per IP and per
// route"): every check is counted if all allow, none otherwise. It returns
// one Decision per check, in order. The checks are decided in order, as
// calls in a row at one instant would be, so two checks of the same key
// count against each other. When not all allow, nothing is counted and
// each Decision says whether its check fitted (after the checks before it)
// and its own wait (RetryAfter, 0 if it fitted), while Remaining and
// ResetAfter are its key's stored state, unchanged.
//
// All limiters must use the same store (ErrMixedStores otherwise). With a
// RedisStore the checks cost one round trip when all keys hash to one slot
// (always on a single server; in a Cluster, give the keys a common hash
// tag); see RedisStore for what happens otherwise.
func AllowAll(ctx context.Context, checks ...Check) (Decisions, error) {
	return decideChecks(ctx, checks, true)
}

// CheckAll decides the checks as AllowAll does, and counts nothing: each
// Decision says whether its check would fit (after the checks before it,
// as if they were counted) and its wait, while Remaining and ResetAfter
// are its key's stored state, as in a refused AllowAll. It
// answers "would these pass?" without spending anything, for a caller that
// must first know the answer of another limiter.
func CheckAll(ctx context.Context, checks ...Check) (Decisions, error) {
	return decideChecks(ctx, checks, false)
}

func decideChecks(ctx context.Context, checks []Check, commit bool) (Decisions, error) {
	if len(checks) == 0 {
		return nil, nil
	}
	var buf [4]request // a few checks, the common case, stay off the heap
	rs := buf[:0]
	if len(checks) > len(buf) {
		rs = make([]request, 0, len(checks))
	}
	rs = rs[:len(checks)]
	var store Store
	for i, c := range checks {
		r, err := c.Limiter.request(ctx, c.Key, c.N)
		if err != nil {
			return nil, fmt.Errorf("check %d: %w", i, err)
		}
		if i == 0 {
			store = c.Limiter.store
		} else if c.Limiter.store != store {
			return nil, ErrMixedStores
		}
		rs[i] = r
	}
	out := make(Decisions, len(rs))
	var err error
	if m, ok := store.(*MemoryStore); ok {
		err = m.decideAll(ctx, rs, out, commit)
	} else {
		// Through the interface rs would escape, buf with it: a copy
		// for the other stores, whose round trip dwarfs it.
		err = store.decideAll(ctx, slices.Clone(rs), out, commit)
	}
	if err != nil {
		return nil, err
	}
	return out, nil
}
