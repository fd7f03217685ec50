package throttle

import "sync"

// shard is one lock's worth of a MemoryStore: a map from (algorithm, key)
// to a slot of a dense slice of entries, the entries threaded on a
// least-recently-used list, and a free list of slots. Slots are int32
// indices, not pointers, so the garbage collector scans one slice per shard
// instead of a million small objects; none is the end of a list.
//
// Everything here runs with mu held.
type shard struct {
	mu      sync.Mutex
	index   map[memKey]int32
	entries []memEntry
	free    int32 // first free slot, threaded through next; none if empty
	lru     int32 // least recently used live slot; none if empty
	mru     int32 // most recently used live slot
	hand    int32 // the next slot the incremental reclaim looks at
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
// full allowance): then it may be reclaimed.
type memEntry struct {
	key        memKey
	st         state
	expires    int64
	log        *ring // SlidingLog only
	prev, next int32 // LRU neighbours (towards lru, towards mru); next threads the free list
	inUse      bool
}

// reclaimPerInsert is how many slots an insert inspects for expired keys:
// memory is reclaimed a little at a time, by the writers that need it, and
// never by a sweep that holds the lock over the whole shard.
const reclaimPerInsert = 2

func newShard(max int) *shard {
	return &shard{index: make(map[memKey]int32), free: none, lru: none, mru: none, max: max}
}

// lookup returns the key's slot, or none.
func (s *shard) lookup(k memKey) int32 {
	if i, ok := s.index[k]; ok {
		return i
	}
	return none
}

// touch makes slot i the most recently used.
func (s *shard) touch(i int32) {
	if s.mru == i {
		return
	}
	s.unlink(i)
	s.pushMRU(i)
}

func (s *shard) unlink(i int32) {
	e := &s.entries[i]
	if e.prev != none {
		s.entries[e.prev].next = e.next
	} else {
		s.lru = e.next
	}
	if e.next != none {
		s.entries[e.next].prev = e.prev
	} else {
		s.mru = e.prev
	}
}

func (s *shard) pushMRU(i int32) {
	e := &s.entries[i]
	e.prev, e.next = s.mru, none
	if s.mru != none {
		s.entries[s.mru].next = i
	} else {
		s.lru = i
	}
	s.mru = i
}

// insert adds k (absent) and returns its slot. It first reclaims a few
// expired keys, then, if the shard is full, evicts the least recently used
// one.
func (s *shard) insert(k memKey, now int64) int32 {
	s.reclaim(now)
	if s.live >= s.max {
		s.remove(s.lru)
		s.evictions++
	}
	i := s.free
	if i != none {
		s.free = s.entries[i].next
	} else {
		s.entries = append(s.entries, memEntry{})
		i = int32(len(s.entries) - 1)
	}
	e := &s.entries[i]
	*e = memEntry{key: k, inUse: true}
	s.index[k] = i
	s.pushMRU(i)
	s.live++
	return i
}

// remove forgets slot i (live) and frees it. A sliding log's ring is
// dropped with it.
func (s *shard) remove(i int32) {
	e := &s.entries[i]
	delete(s.index, e.key)
	s.unlink(i)
	*e = memEntry{next: s.free}
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
			s.remove(s.hand)
			s.expired++
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
