package throttle

import (
	"context"
	"crypto/sha256"
	"fmt"
	"math/bits"
	"runtime"
	"sync/atomic"
	"time"
	"unsafe"

	"github.com/smoothrate/ratelimit/internal/prefetch"
	"github.com/smoothrate/ratelimit/internal/tsc"
)

// MemoryStore keeps keyed-limiter state in this process: the embedded
// default, for a single server or for state that need not be shared. It is
// safe for concurrent use.
//
// Keys are spread over shards by hash, each with its own lock, so
// decisions on different keys rarely wait for each other, and a decision on
// an existing key allocates nothing. A key costs O(1) memory for every
// algorithm but the sliding log, which keeps one timestamp per admitted
// request younger than the period (docs/throttle.md gives bytes per key).
//
// The store holds at most WithMaxKeys keys (DefaultMaxKeys by default):
// when a shard is full, its least recently used key is evicted, which
// forgets that key's state (it is back to its full allowance; Stats counts
// evictions). A shard holds at least 1024 keys (a store of fewer has one
// shard), so a store never evicts while it holds fewer than
// min(WithMaxKeys, 1024) keys; a larger one first evicts when its fullest
// shard fills, at 0.90 full for 2^17 keys in 128 shards
// (TestMemoryNoEvictionBelowShardSize), later with larger shards. It
// holds at most WithMaxBytes bytes of tables, keys and states as well
// (DefaultMaxBytes by default; the heap it holds, but for its own struct:
// TestMemoryHeapWithinMaxBytes): a shard over its share evicts likewise,
// and a key longer than 512 bytes is held by its SHA-256 digest, so that
// no key costs more than a short one. A key whose state has expired (it
// is back to its full allowance anyway) is reclaimed by the inserts that
// follow, a couple of keys per insert: there is no sweeper goroutine and
// no pass that holds a lock over a whole shard.
//
// A clock that steps back never creates allowance: every algorithm keeps
// what it has counted until time passes the stored instants again, and a
// key is only reclaimed once its state is full at a time the clock has
// reached.
type MemoryStore struct {
	clock  Clock // nil: the wall clock, read through wall
	wall   atomic.Pointer[wallAnchor]
	tsc    atomic.Bool // the wall clock is extrapolated by the TSC (internal/tsc)
	seed   *hashSeed
	mask   uint64
	shards []*shard
	// probes counts the comparisons decideAll makes to find each check's
	// key among the keys before it, in calls of more than a few checks
	// (tests check that they are linear).
	probes atomic.Uint64
	// after, set only in tests, replaces time.AfterFunc (readWall).
	after func(time.Duration, func())
}

// MemoryStats are a MemoryStore's counters.
type MemoryStats struct {
	// Keys is the number of keys held now.
	Keys int
	// Evictions counts keys forgotten because their shard was full.
	Evictions uint64
	// Expired counts keys reclaimed because their state had expired.
	Expired uint64
	// Bytes is what the store holds now, its tables, the keys it keeps
	// as strings and the sliding logs (WithMaxBytes bounds it).
	Bytes int
}

// NewMemoryStore returns an empty store. It takes WithStoreClock,
// WithMaxKeys and WithMaxBytes; any other option, a nil one or a bad value is an error
// wrapping ErrInvalidOption.
func NewMemoryStore(opts ...StoreOption) (*MemoryStore, error) {
	cfg, err := buildStoreConfig(opts)
	if err != nil {
		return nil, err
	}
	// A refusal cache saves round trips and a prefix names Redis keys; a
	// MemoryStore has neither, and taking the option silently would let a
	// caller believe it works.
	if cfg.refusalCache > 0 {
		return nil, fmt.Errorf("%w: WithRefusalCache applies to a RedisStore only", ErrInvalidOption)
	}
	if cfg.setPrefix {
		return nil, fmt.Errorf("%w: WithKeyPrefix applies to a RedisStore only", ErrInvalidOption)
	}
	if cfg.setTimeout {
		return nil, fmt.Errorf("%w: WithCallTimeout applies to a RedisStore only", ErrInvalidOption)
	}
	n := shardCount(cfg.maxKeys, runtime.GOMAXPROCS(0))
	for n > 1 && cfg.maxBytes/n < minShardBytes {
		n /= 2
	}
	seed := newHashSeed()
	s := &MemoryStore{clock: cfg.clock, seed: &seed, mask: uint64(n - 1)}
	// Not where time is fake: in a testing/synctest bubble, time.Now
	// stands still while the counter runs on.
	s.tsc.Store(cfg.clock == nil && tsc.Usable() && !tsc.FakeTime())
	s.shards = make([]*shard, n)
	for i := range s.shards {
		// Shard i holds its share of maxKeys, the remainder going to the
		// first ones, so that the shards hold exactly maxKeys together.
		max := cfg.maxKeys / n
		if i < cfg.maxKeys%n {
			max++
		}
		s.shards[i] = newShard(s.seed, max)
		s.shards[i].maxBytes = cfg.maxBytes / n
	}
	return s, nil
}

// minShardKeys is the fewest keys a shard holds when there is more than
// one. A shard evicts when it is full, not when the store is, so a store
// split into shards of c keys can evict while it holds as few as c keys
// (all of them hashed to one shard). With shards of at least minShardKeys,
// a store never evicts while it holds fewer than min(WithMaxKeys,
// minShardKeys) keys (TestMemoryNoEvictionBelowShardSize). With keys
// spread by a good hash, the fullest of n shards holds about
// m + sqrt(2 m ln n) keys when the mean is m, so the first eviction comes
// at 0.91 full for 128 shards of 1024 (0.90 in that test), 0.89 for 1024 of
// 1024, 0.97 for 128 of 8192 (the default store on two processors).
const minShardKeys = 1024

// minShardBytes is the fewest bytes a shard may hold when there is more
// than one (WithMaxBytes): about a hundred keys of the longest length a
// shard holds (maxHeldKey).
const minShardBytes = 64 << 10

// maxShards is the most shards a store has (shardCount).
const maxShards = 1024

// shardCount is a power of two: 64 shards per processor (at least 64, at
// most 1024), so parallel decisions seldom meet on a lock, but never so
// many that a shard holds fewer than minShardKeys keys (so a small store
// has one shard). With fewer shards per processor, two processors meet on
// one lock often enough to slow parallel decisions down (bench/keyed's
// KeyedParallel).
func shardCount(maxKeys, procs int) int {
	n := 1 << bits.Len(uint(max(64, 64*procs)-1))
	n = min(n, maxShards)
	for n > 1 && maxKeys/n < minShardKeys {
		n /= 2
	}
	return n
}

func (s *MemoryStore) err() error {
	if s == nil {
		return ErrNilStore
	}
	return nil
}

// now is the store's time in µs. Without WithStoreClock it is the wall clock,
// read as the last wall reading plus the time since, counted by the
// processor's time-stamp counter where that counter is invariant
// (internal/tsc: the vDSO's reading is ordered after every memory reference
// before it, which costs a decision on a key out of cache more than the
// rest of it), else by the monotonic clock (time.Since reads one clock
// where time.Now reads two: BenchmarkClockRead). The wall clock is read
// again every wallRefresh (readWall), so a step of the wall clock is
// followed within a second (a step back is safe: see MemoryStore).
func (s *MemoryStore) now() (int64, error) {
	if now, ok := s.nowCounter(); ok {
		return now, nil
	}
	return s.nowSlow()
}

// nowCounter is now read from the counter, when the anchor is scaled and
// fresh (ok).
func (s *MemoryStore) nowCounter() (now int64, ok bool) {
	// wall is only ever set without WithStoreClock (readWall), so the common
	// case tests nothing else.
	if a := s.wall.Load(); a != nil && a.usPerTick > 0 {
		return a.at(tsc.Read())
	}
	return 0, false
}

// at is the time in µs at counter reading c, while the anchor is fresh
// (ok). The counter may read a little behind the anchor: another
// processor's, or read before the anchor was (nothing orders the two).
// That is the anchor's own time. (tsc's Anchor.elapsed does the same;
// written out here, small enough to inline into allow.)
func (a *wallAnchor) at(c uint64) (int64, bool) {
	d := int64(c - a.TSC)
	if d < 0 && d > -int64(a.MaxTicks>>10) {
		d = 0
	}
	return a.micros + int64(float64(d)*a.usPerTick), uint64(d) < a.MaxTicks
}

// nowSlow is now when the counter is not read: the monotonic clock since
// the anchor, or a new anchor, or WithStoreClock.
func (s *MemoryStore) nowSlow() (int64, error) {
	// Unsigned, a negative el is out of range too.
	if a := s.wall.Load(); a != nil && a.usPerTick <= 0 {
		if el := uint64(time.Since(a.t)); el < uint64(wallRefresh) && (a.TSC == 0 || el < uint64(tsc.MinSpan)) {
			// (An anchor with a counter reading but no scale yet, the
			// first, is read again after tsc.MinSpan, to scale the
			// counter from then on.)
			return a.micros + int64(el/uint64(time.Microsecond)), nil
		}
	}
	return s.clockNow()
}

// clockNow is now when the anchor is missing or stale, or with WithStoreClock.
func (s *MemoryStore) clockNow() (int64, error) {
	if s.clock == nil {
		return s.readWall()
	}
	return micros(s.clock.Now())
}

// wallAnchor is a reading of the wall clock with its monotonic reading
// and, when the store uses it, the time-stamp counter's (internal/tsc: its
// Mono is tsc.Since(t)).
type wallAnchor struct {
	tsc.Anchor
	t         time.Time
	micros    int64
	usPerTick float64 // Anchor.NsPerTick in µs, so that now multiplies once (0: not scaled, read time.Since)
}

// wallRefresh is how long the wall clock is extrapolated from one reading.
const wallRefresh = time.Second

// readWall reads the wall clock and makes it the new anchor.
func (s *MemoryStore) readWall() (int64, error) {
	var t time.Time
	var c uint64 // the counter with it, where the store uses it
	if s.tsc.Load() {
		t, c = tsc.Pair()
	} else {
		t = time.Now()
	}
	us, err := micros(t)
	if err != nil {
		return 0, err
	}
	a := &wallAnchor{t: t, micros: us}
	if c != 0 {
		var prev *tsc.Anchor
		if p := s.wall.Load(); p != nil {
			prev = &p.Anchor
		}
		next, ok := tsc.Next(prev, tsc.Since(t), c, wallRefresh)
		if !ok {
			// The counter disagreed with the monotonic clock: from now
			// on, time.Since.
			s.tsc.Store(false)
		}
		a.Anchor, a.usPerTick = next, next.NsPerTick/1e3
	}
	s.wall.Store(a)
	if a.usPerTick > 0 {
		// The anchor lives a second of the counter (at), or of the
		// monotonic clock, whichever ends first: a counter that stopped
		// or slowed would otherwise keep it (tsc.Expired).
		expire := func() { s.expireWall(a) }
		if s.after != nil {
			s.after(wallRefresh, expire)
		} else {
			time.AfterFunc(wallRefresh, expire)
		}
	}
	return us, nil
}

// expireWall replaces a, if it is still the anchor, with its expired copy
// (tsc.Expired), so that the next reading anchors again and checks the
// counter against the monotonic clock.
func (s *MemoryStore) expireWall(a *wallAnchor) {
	if x := tsc.Expired(&a.Anchor); x != nil {
		e := *a
		e.Anchor = *x
		s.wall.CompareAndSwap(a, &e)
	}
}

// heldKey returns the identity under which the store holds (alg, key), its
// shard and its hash (Limiter.allow does the same inline for a key of at
// most maxHeldKey bytes). A longer key is held by its SHA-256 digest, its
// hash's tag set apart by hashedTag, so that a digest is never found for a
// key of the same 32 bytes: a key costs at most keyCost(maxHeldKey) bytes
// besides its slot however long it is, at the cost of a digest per
// decision (a collision of two long keys would take 2^128 of them).
func (s *MemoryStore) heldKey(alg Algorithm, key string) (memKey, *shard, uint64) {
	k := memKey{key: key, alg: alg}
	if len(key) > maxHeldKey {
		d := sha256.Sum256([]byte(key))
		k.key, k.hashed = string(d[:]), true
	}
	h := keyHash(s.seed, alg, k.key)
	if k.hashed {
		h ^= hashedTag
	}
	return k, s.shards[h&s.mask], h
}

// hashedTag sets a digest's hash apart from the hash of a key of the same
// bytes: it changes the tag (the high 32 bits), which every lookup
// compares, and the shard.
const hashedTag = 0x5bd1e995<<32 | 0x1b873593

func (s *MemoryStore) decide(ctx context.Context, r request) (Decision, error) {
	if err := s.err(); err != nil {
		return Decision{}, err
	}
	if len(r.key) > maxHeldKey {
		// A long key is decided as an AllowAll of one check, which
		// holds it by its digest (heldKey): the same definitions, so
		// the same Decision.
		var out [1]Decision
		err := s.decideAll(ctx, []request{r}, out[:], true)
		return out[0], err
	}
	l := Limiter{store: s, mem: s, p: *r.p}
	var d Decision
	err := l.allow(ctx, &d, r.key, int(r.n))
	return d, err
}

// allow is AllowN, writing the Decision to *d (on error, the zero
// Decision). With a MemoryStore (l.mem) it decides here, in one function
// from the clock to the algorithm: a Decision is too wide to stay in
// registers, so every call level that returns one copies it through
// memory; written through d, it is written once, where the caller wants
// it. Anything else, and every error, goes through the Store interface
// (allowN).
func (l *Limiter) allow(ctx context.Context, d *Decision, key string, n int) (err error) {
	if l == nil || l.mem == nil || uint(len(key))-1 >= maxHeldKey || n < 0 || ctx == nil { // empty, too long or held by its digest: allowN says which
		*d, err = l.allowN(ctx, key, n)
		return err
	}
	s, p := l.mem, &l.p
	// The key's hash first, the clock after: the hash reads the key's
	// bytes, and the sooner that read begins, the more of it overlaps the
	// previous decision's memory references (internal/tsc). A short key is
	// read into two words (shortKey), which the probe below compares.
	// Everything on the way to a common decision is written out in this
	// function rather than called: a Go call spills every value the caller
	// holds in a register, and the fewer instructions a decision runs, the
	// sooner the next one's loads begin while this one still waits for its
	// entry (bench/NOTES.md).
	var h uint64
	var k shortKey
	if isShort(len(key)) {
		k = shortKeyOf(key)
		h = k.hash(s.seed)
	} else {
		h = strHash(s.seed, key)
	}
	h ^= algHash(p.alg)
	sh := s.shards[h&s.mask]
	if p.wide {
		// The state continues in ext (packState).
		if x := sh.homeExtLine(h); x != 0 {
			prefetch.Line(x)
		}
	}
	// Then start loading the key's entry: on a store of many keys it is
	// the decision's longest wait, and the clock read and the lock, which
	// must come before the entry is read, now overlap it. A short key is
	// in its entry; another key's bytes are pointed to from long, whose
	// line the probe reads too. With them, the lock's line, for writing:
	// in parallel another processor often took the lock last, and its line
	// then moves here while the clock is read. Where the store counts time
	// with the counter, one call does all three and reads it
	// (tsc.ReadPrefetching).
	line, lock := sh.homeLine(h), uintptr(unsafe.Pointer(&sh.mu))
	words := line // a long key's pointer, else the entry again
	if k.n == 0 {
		if x := sh.homeLongLine(h); x != 0 {
			words = x
		}
	}
	var now int64
	ok := false
	if a := s.wall.Load(); a != nil && a.usPerTick > 0 {
		now, ok = a.at(tsc.ReadPrefetching(line, words, lock))
	} else {
		prefetch.Lines(line, words, lock)
	}
	if !ok {
		if now, err = s.nowSlow(); err != nil {
			return err
		}
	}
	sh.mu.Lock()
	i := none
	if k.n != 0 {
		// lookup, for a short key.
		id := identityOf(p.alg, len(key))
		for pos := home(tag(h), len(sh.entries)); ; pos++ {
			if pos == len(sh.entries) {
				pos = 0
			}
			e := &sh.entries[pos]
			if e.w == (keyWords{k.a, k.b}) && e.m>>metaShift == id {
				i = int32(pos)
				break
			}
			if e.free() {
				break
			}
		}
	} else {
		i = sh.lookup(h, memKey{key: key, alg: p.alg})
	}
	if p.alg == GCRA && i != none && !sh.entries[i].isWide() {
		// The common decision, a GCRA request on an existing key whose
		// state is packed in its entry (packState), when it is allowed:
		// decideGCRA and meter fused, the same operations on the same
		// integers, so the same Decision to the bit, without the
		// definition's three calls, its second division by den
		// (ResetAfter's ceiling is the new TAT's quotient, rounded up) and
		// the Decision it zeroes and fills field by field. Everything
		// else (a new key, a refusal, another algorithm) is decideLocked's.
		// Every instruction here counts twice: the fewer a decision runs,
		// the sooner the next decision's loads begin, while this one still
		// waits for its entry (bench/NOTES.md).
		e := &sh.entries[i]
		n := int64(n)
		var debt int64
		if c := int64(uint64(e.b) >> 32); c > 0 { // shard.state, inlined
			debt = gcraDebt(p, state{a: e.a(), b: e.b & (1<<32 - 1), c: c}, now)
		}
		// (now within 2^52 µs of 1970 and q within 2^51, maxDebt: the
		// new TAT fits in the entry.)
		if used := debt + n*p.emission; n <= p.burst && (used <= p.tau || n == 0) && p.den < 1<<32 && uint64(now+1<<52) < 1<<53 {
			q := quo(used, p.den)
			frac := used - q*p.den
			reset := q
			if frac != 0 {
				reset++
			}
			e.m |= metaUsed
			if n > 0 {
				e.setPacked(now+q, p.den<<32|frac) // setState, inlined
			}
			*d = Decision{Allowed: true, Limit: int(p.limit), Remaining: int(quo(max(0, p.tau-used), p.emission)), ResetAfter: us(reset)}
			sh.mu.Unlock()
			return nil
		}
	}
	sh.decideLocked(d, p, h, i, key, int64(n), now)
	sh.mu.Unlock()
	return nil
}

// decideLocked decides n for key (hash h, at i or none) at now, with the
// shard locked: allow's decision for everything but its common case.
func (sh *shard) decideLocked(d *Decision, p *params, h uint64, i int32, key string, n, now int64) {
	if p.alg == GCRA {
		// decideGCRA and meter fused, as in allow, for a request that is
		// allowed on a new key or on a wide state (a refusal is decided
		// below, by the definition). used is read only when n ≤ burst,
		// when it cannot have overflowed.
		var e *memEntry
		var debt int64
		if i != none {
			e = &sh.entries[i]
			st := state{a: e.a(), b: e.b & (1<<32 - 1), c: int64(uint64(e.b) >> 32)} // shard.state, inlined
			if e.isWide() {
				x := &sh.ext[i]
				st = state{a: x.a, b: x.b, c: x.c}
			}
			if st.c > 0 {
				debt = gcraDebt(p, st, now)
			}
		}
		if used := debt + n*p.emission; n <= p.burst && (used <= p.tau || n == 0) {
			q := quo(used, p.den)
			frac := used - q*p.den
			reset := q
			if frac != 0 {
				reset++
			}
			if e != nil {
				e.m |= metaUsed // a new key is inserted unused, as below
			}
			if n > 0 {
				if e == nil {
					i = sh.insert(h, memKey{key: key, alg: GCRA}, now)
					e = &sh.entries[i]
				}
				if p.den < 1<<32 && !e.isWide() && fitsState(now+q) {
					e.setPacked(now+q, p.den<<32|frac) // setState, inlined
				} else if sh.setState(i, state{a: now + q, b: frac, c: p.den}, now+reset) {
					sh.fitBytes(now, h, memKey{key: key, alg: GCRA})
				}
			}
			*d = Decision{Allowed: true, Limit: int(p.limit), Remaining: int(quo(max(0, p.tau-used), p.emission)), ResetAfter: us(reset)}
			return
		}
	}
	if p.alg == SlidingLog {
		*d = sh.decideLog(h, i, p, key, n, now)
		return
	}
	var st state
	if i != none {
		sh.entries[i].m |= metaUsed
		st, _ = sh.state(i)
	}
	next, write := decideStateTo(d, p, st, i != none, now, n)
	if write {
		if i == none {
			i = sh.insert(h, memKey{key: key, alg: p.alg}, now)
		}
		if sh.setState(i, next, expiresAt(p.alg, next, d, now)) {
			sh.fitBytes(now, h, memKey{key: key, alg: p.alg})
		}
	}
}

// emptyLog is the log of a key that has none; nothing writes to it.
var emptyLog ring

// decideLog is decide for the sliding log; i is the key's slot or none.
func (sh *shard) decideLog(h uint64, i int32, p *params, key string, n, now int64) Decision {
	log := &emptyLog
	if i != none {
		sh.entries[i].m |= metaUsed
		log = sh.ext[i].log // a sliding log's entry is always wide
	}
	d, expired, at, write := decideSlidingLog(p, log, now, n)
	if write {
		if i == none {
			i = sh.insert(h, memKey{key: key, alg: p.alg}, now)
		}
		wide := sh.ext != nil
		x := sh.extOf(i)
		was := x.log.bytes()
		if x.log == nil {
			x.log = &ring{}
		}
		x.log.drop(expired)
		x.log.push(at, int(n))
		x.expires = now + int64(d.ResetAfter/time.Microsecond)
		grew := x.log.bytes() - was
		sh.bytes += grew
		if grew > 0 || !wide {
			sh.fitBytes(now, h, memKey{key: key, alg: p.alg})
		}
	}
	return d
}

// pending is one key's state during AllowAll: a copy, changed by the checks
// in order, written back only if all allow.
type pending struct {
	sh      *shard
	h       uint64
	k       memKey
	st      state
	ok      bool
	log     *ring
	expires int64
	written bool
}

// load copies the key's state out of its shard (locked).
func (p *pending) load() {
	i := p.sh.lookup(p.h, p.k)
	p.ok = i != none
	if p.k.alg == SlidingLog {
		var src *ring
		if p.ok {
			src = p.sh.ext[i].log
		}
		p.log = src.clone()
	} else if p.ok {
		p.st, _ = p.sh.state(i)
	}
}

// apply decides r against the copy and updates the copy if allowed.
func (p *pending) apply(r *request, now int64) Decision {
	if p.k.alg == SlidingLog {
		d, expired, at, write := decideSlidingLog(r.p, p.log, now, r.n)
		if write {
			p.log.drop(expired)
			p.log.push(at, int(r.n))
			p.ok, p.written = true, true
			p.expires = now + int64(d.ResetAfter/time.Microsecond)
		}
		return d
	}
	d, next, write := decideState(r.p, p.st, p.ok, now, r.n)
	if write {
		p.st, p.ok, p.written = next, true, true
		p.expires = expiresAt(r.p.alg, next, &d, now)
	}
	return d
}

// store writes the copy back (shard locked).
func (p *pending) store(now int64) {
	i := p.sh.lookup(p.h, p.k)
	if i == none {
		i = p.sh.insert(p.h, p.k, now)
	}
	p.sh.entries[i].m |= metaUsed
	if p.k.alg == SlidingLog {
		p.sh.setLog(i, p.h, p.k, p.log, p.expires, now)
		return
	}
	if p.sh.setState(i, p.st, p.expires) {
		p.sh.fitBytes(now, p.h, p.k)
	}
}

// decideAll decides every request as one step. The shards involved are
// locked in ascending order, so two AllowAll calls never deadlock. The
// checks apply in order to copies of their keys' states, so two checks of
// the same key see each other (the second is decided after the first is
// counted); the copies are written back only if every check allowed (and
// commit is set). The work is linear in len(rs): a check's key is found
// among the keys before it by a map once there are more than a few. A
// context that ends before the copies are written back ends the call with
// nothing counted (it is checked every checkEvery checks).
func (s *MemoryStore) decideAll(ctx context.Context, rs []request, out []Decision, commit bool) error {
	if err := s.err(); err != nil {
		return err
	}
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("%w: %w", ErrStore, err)
	}
	now, err := s.now()
	if err != nil {
		return err
	}
	// A few checks ("per IP and per route") are the common case: their
	// bookkeeping lives on the stack.
	const few = 4
	var psBuf [few]pending
	var orderBuf [few]int
	ps, order := psBuf[:0], orderBuf[:0]
	var index map[memKey]int // the keys' places in ps, past a few checks
	if len(rs) > few {
		ps, order = make([]pending, 0, len(rs)), make([]int, 0, len(rs))
		index = make(map[memKey]int, len(rs))
	}
	var locked shardSet
	probes := 0
	for j := range rs {
		k, sh, h := s.heldKey(rs[j].p.alg, rs[j].key)
		idx, seen := 0, false
		if index != nil {
			idx, seen = index[k]
			probes++
		} else {
			for idx < len(ps) && !seen {
				probes++
				if seen = ps[idx].k == k; !seen {
					idx++
				}
			}
		}
		if !seen {
			idx = len(ps)
			prefetch.Line(sh.homeLine(h)) // as in allow: the keys' entries load together, under the locks
			ps = append(ps, pending{sh: sh, h: h, k: k})
			locked.add(int(h & s.mask))
			if index != nil {
				index[k] = idx
			}
		}
		order = append(order, idx)
	}
	if len(rs) > few {
		// Not for a few checks, the hot path: a shared counter would
		// cost their calls on other processors a cache line each.
		s.probes.Add(uint64(probes))
	}
	for i := locked.next(0); i >= 0; i = locked.next(i + 1) {
		s.shards[i].mu.Lock()
	}
	defer func() {
		for i := locked.next(0); i >= 0; i = locked.next(i + 1) {
			s.shards[i].mu.Unlock()
		}
	}()
	for i := range ps {
		ps[i].load()
	}
	all := true
	for j := range rs {
		if j%checkEvery == checkEvery-1 {
			if err := ctx.Err(); err != nil {
				return fmt.Errorf("%w: %w", ErrStore, err)
			}
		}
		out[j] = ps[order[j]].apply(&rs[j], now)
		all = all && out[j].Allowed
	}
	if all && commit {
		for i := range ps {
			if ps[i].written {
				ps[i].store(now)
			}
		}
		return nil
	}
	// Nothing is counted: each decision keeps its outcome and wait but
	// reports the key's stored state.
	for j := range rs {
		p := &ps[order[j]]
		stored := pending{sh: p.sh, h: p.h, k: p.k}
		stored.load()
		peek := stored.apply(&request{p: rs[j].p, key: rs[j].key}, now)
		out[j].Remaining, out[j].ResetAfter = peek.Remaining, peek.ResetAfter
	}
	return nil
}

// checkEvery is how many checks decideAll decides between two looks at
// its context: often enough that a call of many thousand checks stops
// soon after its caller gives up, seldom enough to cost nothing.
const checkEvery = 1024

// shardSet is a set of shard indexes (below maxShards), iterated in
// ascending order: the order in which decideAll locks them. One bit per
// shard, on the stack, so adding is O(1) whatever the number of checks.
type shardSet [maxShards / 64]uint64

func (s *shardSet) add(i int) { s[i/64] |= 1 << (i % 64) }

// next returns the least index ≥ i in the set, or -1.
func (s *shardSet) next(i int) int {
	for w := i / 64; w < len(s); w++ {
		b := s[w]
		if w == i/64 {
			b &^= 1<<(i%64) - 1
		}
		if b != 0 {
			return w*64 + bits.TrailingZeros64(b)
		}
	}
	return -1
}

func (s *MemoryStore) reset(_ context.Context, alg Algorithm, key string) error {
	if err := s.err(); err != nil {
		return err
	}
	k, sh, h := s.heldKey(alg, key)
	sh.mu.Lock()
	if i := sh.lookup(h, k); i != none {
		sh.remove(i)
	}
	sh.mu.Unlock()
	return nil
}

// Stats returns the store's counters. It locks one shard at a time, so the
// figures of a store in use are not one instant's.
func (s *MemoryStore) Stats() MemoryStats {
	var st MemoryStats
	if s == nil {
		return st
	}
	for _, sh := range s.shards {
		sh.mu.Lock()
		st.Keys += sh.live
		st.Bytes += sh.used()
		st.Evictions += sh.evictions
		st.Expired += sh.expired
		sh.mu.Unlock()
	}
	return st
}
