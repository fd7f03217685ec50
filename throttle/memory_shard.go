package throttle

import (
	"hash/maphash"
	"sync"
)

// shard is one lock's worth of a MemoryStore: the keys' entries in a dense
// slice, found through an open-addressing index, and a clock hand that
// walks the entries to reclaim expired keys and to choose which key to
// evict when the shard is full.
//
// The layout is for the decision on an existing key, which must be fast
// when keys are many and scattered (100 000 live keys do not fit in a CPU
// cache): one hash of the key, which also chose the shard; one index word
// (8 bytes, sixteen probes per cache line); one 64-byte entry. No pointer
// per key either, so the garbage collector scans one slice per shard, not a
// million small objects.
//
// Everything here runs with mu held.
type shard struct {
	mu      sync.Mutex
	seed    maphash.Seed // the store's
	index   []uint64     // 0: empty; else the hash's high 32 bits << 32 | slot+1
	entries []memEntry
	free    int32 // first free slot, threaded through next; none if empty
	hand    int32 // the next slot the clock hand looks at
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

// memEntry is one key's state. expires is the time (µs) from which the
// state is indistinguishable from an absent key (the key is back to its
// full allowance): then it may be reclaimed. used is set by every decision
// and cleared by the clock hand: a key used since the hand last passed it
// gets a second chance before eviction.
type memEntry struct {
	key     string
	alg     Algorithm
	inUse   bool
	used    bool
	next    int32 // free list
	st      state
	expires int64
	log     *ring // SlidingLog only
}

// reclaimPerInsert is how many slots an insert inspects for expired keys:
// memory is reclaimed a little at a time, by the writers that need it, and
// never by a sweep that holds the lock over the whole shard.
const reclaimPerInsert = 2

func newShard(seed maphash.Seed, max int) *shard {
	return &shard{seed: seed, index: make([]uint64, 8), free: none, max: max}
}

// keyHash hashes (alg, key). Its low bits choose the shard, its high 32
// bits the position in the shard's index.
func keyHash(seed maphash.Seed, alg Algorithm, key string) uint64 {
	return maphash.String(seed, key) ^ uint64(alg)*0x9e3779b97f4a7c15
}

// tag is the part of a key's hash the index keeps; its low bits are the
// key's home position, so the index can be rebuilt and repaired without
// reading entries.
func tag(h uint64) uint64 { return h >> 32 }

// lookup returns the key's slot, or none. h is the key's hash. It is
// written to stay within the compiler's inlining budget (pos wraps through
// the mask at each read rather than at each step, the slot is the index
// word's low 32 bits by conversion): inlined into allow, it saves a call
// and the registers spilled around it.
func (s *shard) lookup(h uint64, k memKey) int32 {
	mask := uint64(len(s.index) - 1)
	t := h >> 32
	for pos := t; ; pos++ {
		v := s.index[pos&mask]
		if v == 0 {
			return none
		}
		if v>>32 == t {
			if e := &s.entries[int32(v)-1]; e.key == k.key && e.alg == k.alg {
				return int32(v) - 1
			}
		}
	}
}

// insert adds k (absent, hash h) and returns its slot. It first reclaims a
// few expired keys, then, if the shard is full, evicts one.
func (s *shard) insert(h uint64, k memKey, now int64) int32 {
	s.reclaim(now)
	if s.live >= s.max {
		s.evict(now)
	}
	i := s.free
	if i != none {
		s.free = s.entries[i].next
	} else {
		s.entries = append(s.entries, memEntry{})
		i = int32(len(s.entries) - 1)
	}
	s.entries[i] = memEntry{key: k.key, alg: k.alg, inUse: true, next: none}
	if 2*(s.live+1) > len(s.index) {
		s.grow()
	}
	mask := uint64(len(s.index) - 1)
	pos := tag(h) & mask
	for s.index[pos] != 0 {
		pos = (pos + 1) & mask
	}
	s.index[pos] = tag(h)<<32 | uint64(i+1)
	s.live++
	return i
}

// grow doubles the index.
func (s *shard) grow() {
	old := s.index
	s.index = make([]uint64, 2*len(old))
	mask := uint64(len(s.index) - 1)
	for _, v := range old {
		if v == 0 {
			continue
		}
		pos := (v >> 32) & mask
		for s.index[pos] != 0 {
			pos = (pos + 1) & mask
		}
		s.index[pos] = v
	}
}

// remove forgets slot i (live, hash h) and frees it. A sliding log's ring
// is dropped with it.
func (s *shard) remove(h uint64, i int32) {
	mask := uint64(len(s.index) - 1)
	want := tag(h)<<32 | uint64(i+1)
	pos := tag(h) & mask
	for s.index[pos] != want {
		pos = (pos + 1) & mask
	}
	// Backward-shift deletion: pull later entries of the probe run into
	// the hole when the hole lies between their home and where they are,
	// so lookups never need tombstones.
	for j := (pos + 1) & mask; s.index[j] != 0; j = (j + 1) & mask {
		home := (s.index[j] >> 32) & mask
		if (j-home)&mask >= (j-pos)&mask {
			s.index[pos] = s.index[j]
			pos = j
		}
	}
	s.index[pos] = 0
	s.entries[i] = memEntry{next: s.free}
	s.free = i
	s.live--
}

// reclaim inspects the next reclaimPerInsert slots, round robin, and
// removes those whose state has expired at now. Every slot is inspected
// once per len(entries)/reclaimPerInsert inserts, so expired keys never
// pile up past what the inserts themselves bring; a clock that steps back
// reclaims less, never more.
func (s *shard) reclaim(now int64) {
	n := int32(len(s.entries))
	for range min(reclaimPerInsert, n) {
		if s.hand >= n {
			s.hand = 0
		}
		if e := &s.entries[s.hand]; e.inUse && e.expires <= now {
			s.remove(s.hashOf(e), s.hand)
			s.expired++
		}
		s.hand++
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
		case !e.inUse:
		case e.expires <= now:
			s.remove(s.hashOf(e), s.hand)
			s.expired++
			s.hand++
			return
		case !e.used:
			s.remove(s.hashOf(e), s.hand)
			s.evictions++
			s.hand++
			return
		default:
			e.used = false
		}
		s.hand++
	}
}

// hashOf recomputes an entry's hash (eviction and reclaim only: the
// decision path hashes once).
func (s *shard) hashOf(e *memEntry) uint64 { return keyHash(s.seed, e.alg, e.key) }

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
