package throttle

import (
	"sync"
	"sync/atomic"
	"unsafe"
)

// shard is one lock's worth of a MemoryStore: the keys' entries in one
// open-addressing table, and a clock hand that walks the table to reclaim
// expired keys and to choose which key to evict when the shard is full.
//
// The layout is for the decision on an existing key, which must be fast
// when keys are many and scattered (100 000 live keys do not fit in a CPU
// cache, nor their pages in its TLB): one hash of the key, which also chose
// the shard, and one 64-byte entry, found at the key's home position or a
// few entries after it (linear probing: the next entries are the next cache
// lines of the same page). The table holds the entries themselves, not an
// index of them, because every extra indirection is one more random memory
// reference per decision, and at this size each costs more than the
// decision's arithmetic. The decision asks for that entry's line as soon
// as it has the hash, before the clock and the lock (homeLine,
// internal/prefetch), so that the wait for it overlaps them. No pointer
// per key either, so the garbage collector scans one slice per shard, not
// a million small objects.
//
// Everything here runs with mu held.
type shard struct {
	mu sync.Mutex
	// first and length are the table's address and length, read without
	// mu to prefetch a key's home entry before taking mu (homeLine). A
	// reading taken across a grow may point into the old table, or past
	// it: that only wastes the prefetch, which never faults.
	first   atomic.Uintptr
	length  atomic.Int64
	seed    *hashSeed  // the store's
	entries []memEntry // the table (setEntries); an empty key marks a free entry
	hand    int32      // the next entry the clock hand looks at
	live    int
	max     int // keys this shard may hold

	evictions, expired uint64

	_ [64]byte // keep neighbouring shards' locks off one cache line
}

const none int32 = -1

// memKey is a key's identity: its state is per (algorithm, key).
type memKey struct {
	key string
	alg Algorithm
}

// memEntry is one key's state, 64 bytes: one cache line (a table of at
// least 32 KiB is page-aligned, so entries do not straddle lines). An empty
// key marks a free entry: keys are never empty (ErrEmptyKey). tag is the
// high half of the key's hash: scaled to the table's length it is the
// key's home position, so the table can grow and delete without hashing
// keys again, and comparing it first spares most key comparisons. expires is the time (µs)
// from which the state is indistinguishable from an absent key (the key
// is back to its full allowance): then it may be reclaimed. used is set by
// every decision and cleared by the clock hand: a key used since the hand
// last passed it gets a second chance before eviction.
type memEntry struct {
	key     string
	st      state
	expires int64
	log     *ring // SlidingLog only
	tag     uint32
	alg     Algorithm
	used    bool
}

// maxLoad is the fraction of a table's entries that may be in use before
// it grows (maxLoadNum / maxLoadDen): at most three quarters full, a
// lookup of a present key reads 2.5 entries at worst on average with
// linear probing, all on one page but for the rare run that crosses one.
// A table grows by half until it is as large as its shard's max keys need
// at that load, and no larger: its length need not be a power of two (a
// key's home is its tag scaled to the length, not masked), so a full
// store costs 64 / maxLoad bytes per key, and a growing one is at least
// half full (a doubling table sinks to three eighths: more pages for the
// same keys, each one more entry for the processor's TLB to miss).
const maxLoadNum, maxLoadDen = 3, 4

// reclaimPerInsert is how many entries an insert inspects for expired
// keys: memory is reclaimed a little at a time, by the writers that need
// it, and never by a sweep that holds the lock over the whole shard.
const reclaimPerInsert = 2

func newShard(seed *hashSeed, max int) *shard {
	s := &shard{seed: seed, max: max}
	s.setEntries(make([]memEntry, 8))
	return s
}

// setEntries makes es the table.
func (s *shard) setEntries(es []memEntry) {
	s.entries = es
	s.first.Store(uintptr(unsafe.Pointer(unsafe.SliceData(es))))
	s.length.Store(int64(len(es)))
}

// homeLine is the address of the home entry of the key of hash h, for a
// prefetch: safe without mu, and only a hint (see first).
func (s *shard) homeLine(h uint64) uintptr {
	return s.first.Load() + uintptr(home(tag(h), int(s.length.Load())))*unsafe.Sizeof(memEntry{})
}

// keyHash hashes (alg, key). Its low bits choose the shard, its high 32
// bits (the tag) the position in the shard's table.
func keyHash(seed *hashSeed, alg Algorithm, key string) uint64 {
	return strHash(seed, key) ^ uint64(alg)*0x9e3779b97f4a7c15
}

// tag is the part of a key's hash the table keeps.
func tag(h uint64) uint32 { return uint32(h >> 32) }

// home is where a key of tag t belongs in a table of n entries: t scaled
// from [0, 2³²) to [0, n).
func home(t uint32, n int) int { return int(uint64(t) * uint64(n) >> 32) }

// lookup returns the key's position, or none. h is the key's hash. It is
// written to stay within the compiler's inlining budget: inlined into
// allow, it saves a call and the registers spilled around it.
func (s *shard) lookup(h uint64, k memKey) int32 {
	t := uint32(h >> 32)
	for pos := home(t, len(s.entries)); ; pos++ {
		if pos == len(s.entries) {
			pos = 0
		}
		e := &s.entries[pos]
		if e.tag == t && e.key == k.key && e.alg == k.alg {
			return int32(pos)
		}
		if e.key == "" {
			return none
		}
	}
}

// insert adds k (absent, hash h) and returns its position, which holds
// until the shard next inserts or removes a key (both move entries). It
// first reclaims a few expired keys, then, if the shard is full, evicts
// one.
func (s *shard) insert(h uint64, k memKey, now int64) int32 {
	s.reclaim(now)
	if s.live >= s.max {
		s.evict(now)
	}
	if maxLoadDen*(s.live+1) > maxLoadNum*len(s.entries) {
		s.grow()
	}
	pos := s.free(tag(h))
	s.entries[pos] = memEntry{key: k.key, alg: k.alg, tag: tag(h)}
	s.live++
	return int32(pos)
}

// free returns the first free entry from tag t's home on.
func (s *shard) free(t uint32) int {
	pos := home(t, len(s.entries))
	for s.entries[pos].key != "" {
		if pos++; pos == len(s.entries) {
			pos = 0
		}
	}
	return pos
}

// grow makes the table half as long again, or as large as the shard's
// max keys need at maxLoad if that is less.
func (s *shard) grow() {
	old := s.entries
	n := len(old) + len(old)/2
	if full := s.max*maxLoadDen/maxLoadNum + 1; n > full {
		n = max(full, len(old)+1)
	}
	s.setEntries(make([]memEntry, n))
	for i := range old {
		if old[i].key != "" {
			s.entries[s.free(old[i].tag)] = old[i]
		}
	}
	s.hand = 0
}

// remove forgets the key at position i (live). A sliding log's ring is
// dropped with it. Entries after i may move back into the hole.
func (s *shard) remove(i int32) {
	n := len(s.entries)
	// dist is how far ahead of from, wrapping, to is.
	dist := func(from, to int) int {
		if d := to - from; d >= 0 {
			return d
		}
		return to - from + n
	}
	next := func(j int) int {
		if j++; j == n {
			return 0
		}
		return j
	}
	pos := int(i)
	// Backward-shift deletion: pull later entries of the probe run into
	// the hole when the hole lies between their home and where they are,
	// so lookups never need tombstones.
	for j := next(pos); s.entries[j].key != ""; j = next(j) {
		if dist(home(s.entries[j].tag, n), j) >= dist(pos, j) {
			s.entries[pos] = s.entries[j]
			pos = j
		}
	}
	s.entries[pos] = memEntry{}
	s.live--
}

// reclaim inspects the next reclaimPerInsert keys, round robin, and
// removes those whose state has expired at now (it passes at most four
// times as many entries, free ones included). Every key is inspected once
// per about live/reclaimPerInsert inserts (but for one that a removal
// moves back past the hand, which waits a turn), so expired keys never
// pile up past what the inserts themselves bring; a clock that steps back
// reclaims less, never more.
func (s *shard) reclaim(now int64) {
	n := int32(len(s.entries))
	keys := 0
	for range min(4*reclaimPerInsert, n) {
		if s.hand >= n {
			s.hand = 0
		}
		e := &s.entries[s.hand]
		if e.key == "" {
			s.hand++
			continue
		}
		if keys++; e.expires <= now {
			s.remove(s.hand)
			s.expired++ // the hole may have been filled: the hand stays
		} else {
			s.hand++
		}
		if keys == reclaimPerInsert {
			return
		}
	}
}

// evict removes one key of a full shard: the first the hand finds that has
// expired or has not been used since the hand last passed it (the CLOCK
// approximation of least recently used; a used key loses its mark and is
// passed over once). It ends within two turns of the hand.
func (s *shard) evict(now int64) {
	n := int32(len(s.entries))
	for {
		if s.hand >= n {
			s.hand = 0
		}
		e := &s.entries[s.hand]
		switch {
		case e.key == "":
		case e.expires <= now:
			s.remove(s.hand)
			s.expired++
			return
		case !e.used:
			s.remove(s.hand)
			s.evictions++
			return
		default:
			e.used = false
		}
		s.hand++
	}
}

// ring is a sliding log's timestamps, oldest first, in a power-of-two
// buffer used as a circular queue, so that dropping expired entries and
// logging new ones allocate nothing once the buffer is large enough.
type ring struct {
	buf      []int64
	start, n int
}

func (r *ring) Len() int       { return r.n }
func (r *ring) At(i int) int64 { return r.buf[(r.start+i)&(len(r.buf)-1)] }

// drop forgets the k oldest entries.
func (r *ring) drop(k int) {
	if k >= r.n {
		r.start, r.n = 0, 0
		return
	}
	r.start = (r.start + k) & (len(r.buf) - 1)
	r.n -= k
}

// push logs ts k times, growing the buffer to the next power of two that
// holds them.
func (r *ring) push(ts int64, k int) {
	if need := r.n + k; need > len(r.buf) {
		size := max(4, len(r.buf))
		for size < need {
			size *= 2
		}
		buf := make([]int64, size)
		for i := range r.n {
			buf[i] = r.At(i)
		}
		r.buf, r.start = buf, 0
	}
	mask := len(r.buf) - 1
	for j := range k {
		r.buf[(r.start+r.n+j)&mask] = ts
	}
	r.n += k
}

// clone returns a copy that shares nothing with r.
func (r *ring) clone() *ring {
	c := &ring{}
	if r != nil && r.n > 0 {
		c.buf = make([]int64, len(r.buf))
		for i := range r.n {
			c.buf[i] = r.At(i)
		}
		c.n = r.n
	}
	return c
}
