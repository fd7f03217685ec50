package throttle

import (
	"sync"
	"time"
)

// refusalCache remembers recent refusals of a RedisStore so that a key
// that floods is refused in this process, without a round trip, until its
// RetryAfter has passed (Envoy's over-limit cache, made exact).
//
// What may be served from it: a refusal of n with Remaining r, where
// n = r + 1, at time t0 with RetryAfter T. Every algorithm admits n only
// if it admits every smaller request (fits is monotone in n), and, when
// nothing is written, a key's room only grows with time. So until t0 + T,
// if no one else writes, the same request (same limit, same n) is refused,
// Remaining stays exactly r (r + 1 does not fit before t0 + T), RetryAfter
// is T − elapsed and ResetAfter is the recorded one minus elapsed: each
// algorithm's ResetAfter falls by exactly the time elapsed while nothing is
// written. The common flood (n = 1, Remaining 0) is always cached. Other
// refusals (n > r + 1, or n > Limit) are not: their Remaining could change
// before their RetryAfter.
//
// Writes by other processes only take room away, so they cannot turn a
// cached refusal into an allowance; a Reset or a more generous limit in
// another process can, and this process then keeps refusing until the
// cached RetryAfter has passed at most.
type refusalCache struct {
	shards []cacheShard
	per    int // entries per shard
}

// cacheShards is how many locks a large cache spreads its keys over.
const cacheShards = 16

type cacheShard struct {
	mu sync.Mutex
	m  map[cacheKey]cacheEntry
}

type cacheKey struct {
	alg Algorithm
	key string
}

type cacheEntry struct {
	p      params
	n      int64
	d      Decision // the refusal, as of t0
	t0     int64    // µs, the store's cacheNow before the call
	expiry int64    // t0 + RetryAfter
}

func newRefusalCache(maxKeys int) *refusalCache {
	n := 1
	if maxKeys >= 64*cacheShards {
		n = cacheShards
	}
	c := &refusalCache{shards: make([]cacheShard, n), per: maxKeys / n}
	for i := range c.shards {
		c.shards[i].m = make(map[cacheKey]cacheEntry)
	}
	return c
}

func (c *refusalCache) shard(key string) *cacheShard {
	// FNV-1a: cheap and good enough to spread keys over 16 shards.
	h := uint32(2166136261)
	for i := 0; i < len(key); i++ {
		h ^= uint32(key[i])
		h *= 16777619
	}
	return &c.shards[h%uint32(len(c.shards))]
}

// lookup returns the cached refusal of r at now, if there is one.
func (c *refusalCache) lookup(r request, now int64) (Decision, bool) {
	sh := c.shard(r.key)
	k := cacheKey{r.p.alg, r.key}
	sh.mu.Lock()
	e, ok := sh.m[k]
	if ok && now >= e.expiry {
		delete(sh.m, k)
		ok = false
	}
	sh.mu.Unlock()
	if !ok || e.n != r.n || e.p != *r.p || now < e.t0 {
		return Decision{}, false
	}
	el := time.Duration(now-e.t0) * time.Microsecond
	d := e.d
	d.RetryAfter -= el
	d.ResetAfter = max(0, d.ResetAfter-el)
	return d, true
}

// record remembers the refusal d of r, decided after now (the time before
// the call): cached only when it is exact (see refusalCache).
func (c *refusalCache) record(r request, d Decision, now int64) {
	if now < 0 || d.RetryAfter <= 0 || int64(d.Remaining)+1 != r.n {
		return
	}
	sh := c.shard(r.key)
	k := cacheKey{r.p.alg, r.key}
	e := cacheEntry{p: *r.p, n: r.n, d: d, t0: now, expiry: now + int64(d.RetryAfter/time.Microsecond)}
	sh.mu.Lock()
	if _, ok := sh.m[k]; !ok && len(sh.m) >= c.per {
		sh.evictLocked(now)
	}
	sh.m[k] = e
	sh.mu.Unlock()
}

// evictLocked makes room for one entry: the first expired entry among a
// few, else the first one seen (Go's map order is random, so this is a
// random eviction). Bounded work per insert.
func (sh *cacheShard) evictLocked(now int64) {
	var victim cacheKey
	seen := 0
	for k, e := range sh.m {
		if seen == 0 || now >= e.expiry {
			victim = k
			if now >= e.expiry {
				break
			}
		}
		if seen++; seen == 8 {
			break
		}
	}
	delete(sh.m, victim)
}

// forget drops every cached refusal of (alg, key): Reset through this
// store.
func (c *refusalCache) forget(alg Algorithm, key string) {
	sh := c.shard(key)
	sh.mu.Lock()
	delete(sh.m, cacheKey{alg, key})
	sh.mu.Unlock()
}

// len is the number of entries (for tests).
func (c *refusalCache) len() int {
	n := 0
	for i := range c.shards {
		sh := &c.shards[i]
		sh.mu.Lock()
		n += len(sh.m)
		sh.mu.Unlock()
	}
	return n
}
