package throttle

import (
	"encoding/binary"
	"math"
	"math/bits"
	"slices"
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
// the shard, and one 32-byte entry, found at the key's home position or a
// few entries after it (linear probing: the next entries are on the same or
// the next cache line). A short key's entry holds the key itself, its
// identity and its state (memEntry), so that such a decision waits for one
// line of memory and reads no other. The table holds the entries
// themselves, not an index of them, because every extra indirection is one
// more random memory reference per decision, and at this size each costs
// more than the decision's arithmetic. The decision asks for that entry's
// line as soon as it has the hash, before the clock and the lock
// (homeLine, internal/prefetch), so that the wait overlaps them.
//
// An entry is half a cache line, not a whole one, because the wait for it
// is most of a decision, and the smaller the table the more of it the
// processor's caches hold. A GCRA, fixed-window or sliding-window state
// fits in the entry (packState). The buckets' states (three words and an
// expiry), a sliding log and the rare state too large to pack are in ext,
// an array parallel to the table that a shard allocates only when it first
// holds such a state: ext[i] belongs to entries[i], at an address known
// from the hash as well, so its line is prefetched with the entry's and the
// two waits overlap. A key of another length than a short key's keeps its
// bytes in an allocation of its own, pointed to from long, a third
// parallel array that a shard allocates only when it first holds such a
// key. The table holds no pointer (the garbage collector does not scan
// it), ext and long one per key at most.
//
// Everything here runs with mu held.
type shard struct {
	shardTable
	_ [128 - unsafe.Sizeof(shardTable{})]byte
	shardLocked
	_ [128 - unsafe.Sizeof(shardLocked{})]byte // the next shard's first line is not this one's last
}

// shardTable is the part of a shard that every decision reads and only a
// grow writes; shardLocked, written by every decision or insert, is on
// lines of its own, so that a decision finds its shard's table (and asks
// for its entry's line) without waiting for the line of a lock that
// another processor took last.
type shardTable struct {
	// first, extFirst, longFirst and length are the addresses of the
	// table, of ext and of long (0: none) and the table's length, read
	// without mu to prefetch a key's home entry before taking mu
	// (homeLine). A reading taken across a grow may point into the old
	// arrays, or past them: that only wastes the prefetch, which never
	// faults.
	first     atomic.Uintptr
	extFirst  atomic.Uintptr
	longFirst atomic.Uintptr
	length    atomic.Int64
	seed      *hashSeed        // the store's
	entries   []memEntry       // the table (setEntries); a zero entry is free
	ext       []extState       // nil, or as long as entries: wide states
	long      []unsafe.Pointer // nil, or as long as entries: long keys' bytes

	// testHash, when set (by tests only), is the hash of a short key that
	// the shard computes itself (hashAt): the one the test gave lookup
	// and insert, so that it can force keys into the same home.
	testHash func(key string) uint64
}

type shardLocked struct {
	mu   sync.Mutex
	hand int32 // the next entry the clock hand looks at
	live int
	max  int // keys this shard may hold
	// bytes counts what the live keys hold besides their slots (keyCost,
	// and their sliding logs: ring.bytes), table what the table takes
	// (tableBytes); maxBytes bounds the two together (used).
	bytes, table, maxBytes int

	evictions, expired uint64
}

const none int32 = -1

// memKey is a key's identity: its state is per (algorithm, key). A key
// longer than maxHeldKey is held by its SHA-256 digest (hashed): its hash
// then differs from any other key's in its tag (heldKey), so a digest is
// never taken for a key of the same bytes.
type memKey struct {
	key    string
	alg    Algorithm
	hashed bool
}

// maxHeldKey is the longest key a shard holds as it is; a longer one is
// held by its digest (heldKey), so that no key costs more than
// keyCost(maxHeldKey) bytes besides its slot.
const maxHeldKey = 512

// KeyOverhead is, for sizing WithMaxBytes, the most a key of 4 to 16
// bytes costs a MemoryStore that holds many: its slot of the table (a
// 32-byte entry) at the least load a table has after it grows, three
// fifths full (maxLoad). Such a key's bytes are in its entry; a key of
// another length costs its own allocation besides (its length rounded up
// to Go's size class) and, in a shard that holds one, 8 bytes a slot
// (long). A shard that holds a wide state (the buckets', a sliding log's)
// has 40 bytes a slot more (ext), and a sliding log its buffer and its
// ring. Stats().Bytes counts what the store holds, tables included, and
// that is what WithMaxBytes bounds.
const KeyOverhead = 54

// keyCost is what holding a key of n bytes costs besides its slot: the
// string the shard keeps (a short key's bytes are in its entry). A string of
// fewer than 16 bytes may be in one of the allocator's 16-byte blocks of
// tiny objects, which it keeps whole.
func keyCost(n int) int {
	if isShort(n) {
		return 0
	}
	return allocSize(max(n, 16))
}

// allocSize is what Go's allocator takes for an object of n bytes: its
// size class (sizeClasses), or whole pages of 8 KiB above 32 KiB.
func allocSize(n int) int {
	if n > int(sizeClasses[len(sizeClasses)-1]) {
		return (n + 8<<10 - 1) &^ (8<<10 - 1)
	}
	i, _ := slices.BinarySearch(sizeClasses[:], uint16(n))
	return int(sizeClasses[i])
}

// allocSizePointers is allocSize for an object that holds pointers: one
// of more than 512 bytes carries an 8-byte header for the collector, up to
// the size of a large object (malloc.go's mallocHeaderSize).
func allocSizePointers(n int) int {
	if n > 512 && n <= int(sizeClasses[len(sizeClasses)-1])-8 {
		n += 8
	}
	return allocSize(n)
}

// sizeClasses are Go's allocation size classes (internal/runtime/gc's
// SizeClassToSize).
var sizeClasses = [...]uint16{0, 8, 16, 24, 32, 48, 64, 80, 96, 112, 128, 144, 160, 176, 192, 208, 224, 240, 256, 288, 320, 352, 384, 416, 448, 480, 512, 576, 640, 704, 768, 896, 1024, 1152, 1280, 1408, 1536, 1792, 2048, 2304, 2688, 3072, 3200, 3456, 4096, 4864, 5376, 6144, 6528, 6784, 6912, 8192, 9472, 9728, 10240, 10880, 12288, 13568, 14336, 16384, 18432, 19072, 20480, 21760, 24576, 27264, 28672, 32768}

// slotBytes is what a slot of a table costs: its entry, and its ext when
// wide is set and its long when long is.
func slotBytes(wide, long bool) int {
	n := int(unsafe.Sizeof(memEntry{}))
	if wide {
		n += int(unsafe.Sizeof(extState{}))
	}
	if long {
		n += int(unsafe.Sizeof(unsafe.Pointer(nil)))
	}
	return n
}

// tableBytes is what a shard with a table of n slots costs (with ext when
// wide is set, with long when long is), the shard itself included.
func tableBytes(n int, wide, long bool) int {
	b := allocSize(n*int(unsafe.Sizeof(memEntry{}))) + int(unsafe.Sizeof(shard{}))
	if wide {
		b += allocSizePointers(n * int(unsafe.Sizeof(extState{})))
	}
	if long {
		b += allocSizePointers(n * int(unsafe.Sizeof(unsafe.Pointer(nil))))
	}
	return b
}

// tableBytes is what the shard would cost with a table of n slots, its
// ext and long kept or not as they are.
func (s *shard) tableBytes(n int) int { return tableBytes(n, s.ext != nil, s.long != nil) }

// used is what the shard holds: its table, its keys' own bytes and its
// logs. WithMaxBytes bounds it.
func (s *shard) used() int { return s.table + s.bytes }

// memEntry is one key, 32 bytes: two to a cache line (a table of at least
// 32 KiB is page-aligned, and a smaller one's size class is a multiple of
// 32 bytes, so entries do not straddle lines).
//
// w is the key: a short key's two words (keyWords: minShortKey to
// maxShortKey bytes, every one of them), or, for a key of another length,
// its hash and its length, its bytes being at the same position in the
// shard's long. m holds the rest of the key's identity, two flags, and a
// packed state's first word:
//
//	bits 60–63  kind: 0 for a free entry (the whole entry is zero), n - 3
//	            for a short key of n bytes, kindLong for another key
//	bits 56–59  the algorithm
//	bit 55      wide: the state is in the shard's ext
//	bit 54      used: set by every decision and cleared by the clock hand,
//	            so that a key used since the hand last passed it gets a
//	            second chance before eviction
//	bits 0–53   a packed state's a, a signed number (packState)
//
// so that a short key is found by comparing three words, its bytes
// among them, with no other memory read. b is a packed state's second
// word. A short key's home position is recomputed from its words when the
// table grows or deletes (homeOf); a long key's is its hash's.
type memEntry struct {
	w keyWords
	m uint64
	b int64
}

const (
	metaUsed  = 1 << 54
	metaWide  = 1 << 55
	metaShift = 56 // m >> metaShift is the key's identity: kind and algorithm
	kindLong  = 15
	stateBits = 54
	stateMask = 1<<stateBits - 1
)

// identityOf is the identity (m >> metaShift) of a key of n bytes of alg.
func identityOf(alg Algorithm, n int) uint64 {
	kind := uint64(kindLong)
	if isShort(n) {
		kind = uint64(n - (minShortKey - 1))
	}
	return kind<<4 | uint64(alg)
}

// fitsState reports whether a is a number an entry packs (in its m's
// low stateBits bits, signed): within 2^53 µs of 1970, 285 years.
func fitsState(a int64) bool { return uint64(a+1<<(stateBits-1)) < 1<<stateBits }

func (e *memEntry) free() bool     { return e.m == 0 }
func (e *memEntry) kind() int      { return int(e.m >> 60) }
func (e *memEntry) alg() Algorithm { return Algorithm(e.m >> metaShift & 0xf) }
func (e *memEntry) isWide() bool   { return e.m&metaWide != 0 }

// a is a packed state's first word.
func (e *memEntry) a() int64 { return int64(e.m<<(64-stateBits)) >> (64 - stateBits) }

// setPacked makes (a, b) the entry's packed state: a must fit
// (fitsState).
func (e *memEntry) setPacked(a, b int64) {
	e.m = e.m&^stateMask | uint64(a)&stateMask
	e.b = b
}

// keyLen is the length of the key of the live entry e.
func (e *memEntry) keyLen() int {
	if k := e.kind(); k != kindLong {
		return k + minShortKey - 1
	}
	return int(e.w.b)
}

// keyAt is the key of the live entry at i.
func (s *shard) keyAt(i int) string {
	e := &s.entries[i]
	n := e.keyLen()
	if isShort(n) {
		return e.w.key(n)
	}
	return unsafe.String((*byte)(s.long[i]), n)
}

// hashAt is the hash of the key of the live entry at i (keyHash, with
// hashedTag for a digest): a long key's is in its entry, a short key's is
// recomputed from its words.
func (s *shard) hashAt(i int) uint64 { return s.hashOf(&s.entries[i]) }

// hashOf is hashAt of live entry e, of this table or of one it replaces.
func (s *shard) hashOf(e *memEntry) uint64 {
	if k := e.kind(); k != kindLong {
		n := k + minShortKey - 1
		if s.testHash != nil {
			return s.testHash(e.w.key(n))
		}
		return shortKey{a: e.w.a, b: e.w.b, n: uint64(n)}.hash(s.seed) ^ algHash(e.alg())
	}
	return e.w.a
}

// homeOf is the home position of the key of the live entry at i.
func (s *shard) homeOf(i int) int { return home(tag(s.hashAt(i)), len(s.entries)) }

// isShort reports whether a key of n bytes is short: held in its entry's
// w, read as a shortKey.
func isShort(n int) bool { return uint(n)-minShortKey <= maxShortKey-minShortKey }

// keyWords is a short key's two words (shortKey: its length is in its
// entry's kind), which hold every byte of it: a lookup compares them in
// the entry, instead of following a pointer to the key's bytes, an
// allocation of its own elsewhere in memory (one dependent memory
// reference fewer per decision on a key that is not the very string the
// store keeps, as a server's request builds its key anew), and the store
// keeps no caller's string alive.
type keyWords struct{ a, b uint64 }

// wordsOf is the keyWords of a short key.
func wordsOf(key string) keyWords {
	k := shortKeyOf(key)
	return keyWords{k.a, k.b}
}

// key is the short key of n bytes whose words w are: shortKeyOf's
// inverse.
func (w keyWords) key(n int) string {
	var b [maxShortKey]byte
	if n > 8 {
		binary.LittleEndian.PutUint64(b[:], w.a)
		binary.LittleEndian.PutUint64(b[n-8:], w.b)
	} else {
		binary.LittleEndian.PutUint32(b[:], uint32(w.a))
		binary.LittleEndian.PutUint32(b[n-4:], uint32(w.b))
	}
	return string(b[:n])
}

// extState is a wide state, one that does not fit in its entry: the token
// and leaky buckets' (three words), a GCRA, window or sliding window state
// whose numbers are too large to pack, and the sliding log's ring; and,
// since only a packed state's is known from the state itself, the expiry:
// the time (µs) from which the state is indistinguishable from an absent
// key (the key is back to its full allowance), when the key may be
// reclaimed.
type extState struct {
	a, b, c, expires int64
	log              *ring // SlidingLog only
}

// packState returns the entry words (a, b) of st, a state of alg that
// expires at expires, and whether it fits in them:
//
//   - GCRA, when its denominator is below 2^32: a = TAT, b = the
//     denominator and the fraction (less than it) in b's high and low
//     halves. The expiry follows from the state: TAT, rounded up to a
//     whole µs.
//   - FixedWindow: a = the window's end, b = its count. It expires at its
//     end.
//   - SlidingWindow, when both counts are below 2^24: a = the window's end,
//     b = the previous and current counts in bits 0–23 and 24–47, and in
//     bits 48–63 the time from the end to the expiry (the period it was
//     written under), rounded up to ten significant bits (periodCode): the
//     expiry read back is at most a thousandth of a period late, never
//     early, so a key is never reclaimed before it is full again.
//
// a must fit in the entry (fitsState). So such a key needs nothing in ext.
func packState(alg Algorithm, st state, expires int64) (a, b int64, ok bool) {
	if !fitsState(st.a) {
		return 0, 0, false
	}
	switch alg {
	case GCRA:
		if st.c > 0 && st.c < 1<<32 && st.b >= 0 && st.b < st.c {
			return st.a, st.c<<32 | st.b, true
		}
	case FixedWindow:
		if st.c == 0 {
			return st.a, st.b, true
		}
	case SlidingWindow:
		if uint64(st.b) < 1<<24 && uint64(st.c) < 1<<24 {
			if code, ok := periodCode(expires - st.a); ok {
				return st.a, int64(uint64(st.b) | uint64(st.c)<<24 | code<<48), true
			}
		}
	}
	return 0, 0, false
}

// periodCode encodes d > 0 µs as the least m·2^e ≥ d with m < 2^10: e in
// the code's bits 10–15, m in bits 0–9 (periodOf decodes it).
func periodCode(d int64) (uint64, bool) {
	if d <= 0 {
		return 0, false
	}
	e := uint64(max(0, bits.Len64(uint64(d))-10))
	m := (uint64(d) + 1<<e - 1) >> e
	if m == 1<<10 { // rounded up past ten bits: 2^10·2^e = 2^9·2^(e+1)
		m, e = 1<<9, e+1
	}
	return e<<10 | m, true
}

// periodOf decodes periodCode.
func periodOf(code uint64) int64 { return int64(code&(1<<10-1)) << (code >> 10) }

// state returns the state of the live entry at i and when it expires.
func (s *shard) state(i int32) (state, int64) {
	e := &s.entries[i]
	if e.isWide() {
		x := &s.ext[i]
		return state{a: x.a, b: x.b, c: x.c}, x.expires
	}
	a := e.a()
	switch e.alg() {
	case GCRA:
		// TAT, rounded up to the next whole µs: the time at which the
		// debt is 0 (decideGCRA's ResetAfter).
		st := state{a: a, b: e.b & (1<<32 - 1), c: int64(uint64(e.b) >> 32)} // den is unsigned: up to 2^32 - 1
		if st.b != 0 {
			return st, st.a + 1
		}
		return st, st.a
	case SlidingWindow:
		b := uint64(e.b)
		return state{a: a, b: int64(b & (1<<24 - 1)), c: int64(b >> 24 & (1<<24 - 1))}, a + periodOf(b>>48)
	}
	// A fixed window's count is 0 at its end (decideFixedWindow).
	return state{a: a, b: e.b}, a
}

// expiry is when the state of the live entry at i expires.
func (s *shard) expiry(i int32) int64 {
	_, exp := s.state(i)
	return exp
}

// setState makes st, expiring at expires, the state of the live entry at
// i: packed into the entry when it fits (packState: expires then follows
// from st), wide otherwise. It reports whether the shard allocated its
// ext for it, which may have put the shard over its bytes: the caller
// then calls fitBytes.
func (s *shard) setState(i int32, st state, expires int64) (allocated bool) {
	e := &s.entries[i]
	if a, b, ok := packState(e.alg(), st, expires); ok {
		if e.isWide() {
			s.ext[i] = extState{}
			e.m &^= metaWide
		}
		e.setPacked(a, b)
		return false
	}
	allocated = s.ext == nil
	x := s.extOf(i)
	e.setPacked(0, 0)
	x.a, x.b, x.c, x.expires = st.a, st.b, st.c, expires
	return allocated
}

// setLog makes lg the sliding log of the live entry at i, key k of hash
// h, counting the change in its bytes, and evicts other keys while the
// shard is over its bytes (the entry at i may move: callers do not use i
// after).
func (s *shard) setLog(i int32, h uint64, k memKey, lg *ring, expires int64, now int64) {
	x := s.extOf(i)
	s.bytes += lg.bytes() - x.log.bytes()
	x.log, x.expires = lg, expires
	s.fitBytes(now, h, k)
}

// fitBytes brings the shard within its bytes, keeping k (of hash h,
// live): it evicts other keys until they fit, or until they fit in a
// shorter table that does (when the shard's first wide state has made it
// allocate its ext, or a sliding log has grown), and makes the table that
// long. A key that alone outgrows its shard (a long sliding log) is kept,
// and limited, alone. The keys' positions change: callers do not use
// them after.
func (s *shard) fitBytes(now int64, h uint64, k memKey) {
	for s.used() > s.maxBytes {
		if n := s.shorterFit(s.live, 0); n > 0 {
			s.resize(n)
			return
		}
		if s.live <= 1 {
			return
		}
		s.evictExcept(now, s.lookup(h, k))
	}
}

// minTable is the length of a new shard's table, and the shortest one.
const minTable = 8

// shorterFit is the length of the longest table shorter than the shard's
// that holds keys keys at maxLoad and brings the shard, with extra bytes
// more, within its bytes, or 0 if there is none.
func (s *shard) shorterFit(keys, extra int) int {
	lo := max(minTable, (maxLoadDen*keys+maxLoadNum-1)/maxLoadNum)
	fits := func(n int) bool { return s.tableBytes(n)+s.bytes+extra <= s.maxBytes }
	hi := len(s.entries) - 1
	if lo > hi || !fits(lo) {
		return 0
	}
	for lo < hi { // the longest n in [lo, hi] that fits: tableBytes grows with n
		if mid := (lo + hi + 1) / 2; fits(mid) {
			lo = mid
		} else {
			hi = mid - 1
		}
	}
	return lo
}

// extOf returns the ext of the live entry at i, making the entry wide (and
// allocating ext, the first time).
func (s *shard) extOf(i int32) *extState {
	if s.ext == nil {
		s.ext = make([]extState, len(s.entries))
		s.extFirst.Store(uintptr(unsafe.Pointer(unsafe.SliceData(s.ext))))
		s.table = s.tableBytes(len(s.entries))
	}
	s.entries[i].m |= metaWide
	return &s.ext[i]
}

// maxLoad is the fraction of a table's entries that may be in use before
// it grows (maxLoadNum / maxLoadDen): at most three quarters full, a
// lookup of a present key reads 2.5 entries at worst on average with
// linear probing, all on one page but for the rare run that crosses one.
// (Fuller, the runs an insert and a removal walk grow fast: seven eighths
// full, a flood of new keys into a full store took ten times as long.)
// A table grows by a quarter until it is as large as its shard's max
// keys need at that load, or its bytes allow, and no larger (and shrinks
// when the shard's first wide state does not fit in its bytes otherwise):
// its length need not be a power of two (a key's home is its tag scaled
// to the length, not masked), so a full store costs 32 / maxLoad bytes
// per short key (72 / maxLoad in a shard with an ext), and a growing one
// is at least three fifths full. The smaller the table, the
// more of it the processor's caches hold: a doubling table sinks to three
// eighths full, and one grown by half to a half.
const maxLoadNum, maxLoadDen = 3, 4

// reclaimPerInsert is how many entries an insert inspects for expired
// keys: memory is reclaimed a little at a time, by the writers that need
// it, and never by a sweep that holds the lock over the whole shard.
const reclaimPerInsert = 2

func newShard(seed *hashSeed, max int) *shard {
	s := &shard{shardTable: shardTable{seed: seed}, shardLocked: shardLocked{max: max, maxBytes: math.MaxInt}}
	s.setEntries(make([]memEntry, minTable), nil, nil)
	return s
}

// setEntries makes es the table and ext and long, each nil or as long,
// its ext and its long.
func (s *shard) setEntries(es []memEntry, ext []extState, long []unsafe.Pointer) {
	s.entries, s.ext, s.long = es, ext, long
	s.table = s.tableBytes(len(es))
	s.longFirst.Store(uintptr(unsafe.Pointer(unsafe.SliceData(long))))
	s.first.Store(uintptr(unsafe.Pointer(unsafe.SliceData(es))))
	s.extFirst.Store(uintptr(unsafe.Pointer(unsafe.SliceData(ext))))
	s.length.Store(int64(len(es)))
}

// homeLine is the address of the home entry of the key of hash h, for a
// prefetch: safe without mu, and only a hint (see first).
func (s *shard) homeLine(h uint64) uintptr {
	return s.first.Load() + uintptr(home(tag(h), int(s.length.Load())))*unsafe.Sizeof(memEntry{})
}

// homeLongLine is homeLine's counterpart in long, or 0 when the shard
// has none.
func (s *shard) homeLongLine(h uint64) uintptr {
	if x := s.longFirst.Load(); x != 0 {
		return x + uintptr(home(tag(h), int(s.length.Load())))*unsafe.Sizeof(unsafe.Pointer(nil))
	}
	return 0
}

// homeExtLine is homeLine's counterpart in ext, or 0 when the shard has
// none.
func (s *shard) homeExtLine(h uint64) uintptr {
	if x := s.extFirst.Load(); x != 0 {
		return x + uintptr(home(tag(h), int(s.length.Load())))*unsafe.Sizeof(extState{})
	}
	return 0
}

// keyHash hashes (alg, key). Its low bits choose the shard, its high 32
// bits (the tag) the position in the shard's table.
func keyHash(seed *hashSeed, alg Algorithm, key string) uint64 {
	return strHash(seed, key) ^ algHash(alg)
}

// algHash is what keyHash mixes into a key's hash for its algorithm.
func algHash(alg Algorithm) uint64 { return uint64(alg) * 0x9e3779b97f4a7c15 }

// tag is the part of a key's hash the table keeps.
func tag(h uint64) uint32 { return uint32(h >> 32) }

// home is where a key of tag t belongs in a table of n entries: t scaled
// from [0, 2³²) to [0, n).
func home(t uint32, n int) int { return int(uint64(t) * uint64(n) >> 32) }

// lookup returns the key's position, or none. h is the key's hash.
// (allow has the same loop for a short key written out.)
func (s *shard) lookup(h uint64, k memKey) int32 {
	id := identityOf(k.alg, len(k.key))
	w := keyWords{h, uint64(len(k.key))}
	short := isShort(len(k.key))
	if short {
		w = wordsOf(k.key)
	}
	for pos := home(tag(h), len(s.entries)); ; pos++ {
		if pos == len(s.entries) {
			pos = 0
		}
		e := &s.entries[pos]
		if e.w == w && e.m>>metaShift == id && (short || unsafe.String((*byte)(s.long[pos]), len(k.key)) == k.key) {
			return int32(pos)
		}
		if e.free() {
			return none
		}
	}
}

// insert adds k (absent, hash h) and returns its position, which holds
// until the shard next inserts or removes a key (both move entries). It
// first reclaims a few expired keys, then, while the shard is full (of
// keys, or of bytes), evicts one.
func (s *shard) insert(h uint64, k memKey, now int64) int32 {
	s.reclaim(now)
	short := isShort(len(k.key))
	if !short && s.long == nil {
		// The shard's first long key: its long, which may put the
		// shard over its bytes, as a first wide state does; the loop
		// below brings it back within them.
		s.setEntries(s.entries, s.ext, make([]unsafe.Pointer, len(s.entries)))
	}
	cost := keyCost(len(k.key))
	n := len(s.entries)
	for s.live > 0 {
		if s.live < s.max {
			if n = s.lengthFor(s.live+1, cost); n > 0 {
				break
			}
			// Over its bytes: evicting a short key frees none (its
			// bytes are its slot), so the table must be shorter for
			// this key's bytes (or a first long's) to fit, which it
			// may once it holds fewer keys; by minResize at least.
			if n = s.shorterFit(s.live+1, cost); n > 0 {
				if short := len(s.entries) - len(s.entries)/minResize; n > short {
					n = 0
					if short >= minTable && maxLoadDen*(s.live+1) <= maxLoadNum*short {
						n = short
					}
				}
				if n > 0 {
					break
				}
			}
		}
		s.evict(now)
		n = len(s.entries)
	}
	s.bytes += cost
	if n != len(s.entries) {
		s.resize(n)
	}
	pos := s.free(tag(h))
	m := identityOf(k.alg, len(k.key)) << metaShift
	if short {
		s.entries[pos] = memEntry{w: wordsOf(k.key), m: m}
	} else {
		s.entries[pos] = memEntry{w: keyWords{h, uint64(len(k.key))}, m: m}
		s.long[pos] = unsafe.Pointer(unsafe.StringData(k.key))
	}
	s.live++
	return int32(pos)
}

// free returns the first free entry from tag t's home on.
func (s *shard) free(t uint32) int {
	pos := home(t, len(s.entries))
	for !s.entries[pos].free() {
		if pos++; pos == len(s.entries) {
			pos = 0
		}
	}
	return pos
}

// lengthFor is the length of the table that holds keys keys, one of them
// about to be inserted at a cost of cost bytes (keyCost), within the
// shard's bytes: the table's own if they fit in it at maxLoad, else a
// longer one, half as long again or as long as the shard's max keys need
// at maxLoad if that is less, or as long as its bytes allow if that is
// less still; 0 if no table holds them within the shard's bytes.
func (s *shard) lengthFor(keys, cost int) int {
	n := len(s.entries)
	if maxLoadDen*keys <= maxLoadNum*n {
		if s.used()+cost > s.maxBytes {
			return 0
		}
		return n
	}
	n += n / 4
	if full := s.max*maxLoadDen/maxLoadNum + 1; n > full {
		n = max(full, len(s.entries)+1)
	}
	want := n
	for n > len(s.entries) && s.tableBytes(n)+s.bytes+cost > s.maxBytes {
		n -= max(1, (n-len(s.entries))/4)
	}
	if maxLoadDen*keys > maxLoadNum*n || n < want && n < len(s.entries)+len(s.entries)/minResize {
		// (A growth the bytes cut to a few slots is not worth a
		// resize: the shard evicts instead. Else, where evictions free
		// bytes a few at a time, as a long key's do, it would resize
		// for every insert.)
		return 0
	}
	return n
}

// minResize: a table the shard's bytes make grow, or shrink, changes by at
// least 1/minResize of its length, or not at all.
const minResize = 8

// resize makes the table n entries long; n holds the live keys at
// maxLoad.
func (s *shard) resize(n int) {
	old, oldExt, oldLong := s.entries, s.ext, s.long
	var ext []extState
	if oldExt != nil {
		ext = make([]extState, n)
	}
	var long []unsafe.Pointer
	if oldLong != nil {
		long = make([]unsafe.Pointer, n)
	}
	s.setEntries(make([]memEntry, n), ext, long)
	for i := range old {
		if !old[i].free() {
			j := s.free(tag(s.hashOf(&old[i])))
			s.entries[j] = old[i]
			if old[i].isWide() {
				s.ext[j] = oldExt[i]
			}
			if oldLong != nil {
				s.long[j] = oldLong[i]
			}
		}
	}
	s.hand = 0
}

// remove forgets the key at position i (live), with its ext if it has one
// (a sliding log's ring with it). Entries after i may move back into the
// hole, their ext with them.
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
	s.bytes -= keyCost(s.entries[i].keyLen())
	if s.ext != nil {
		s.bytes -= s.ext[i].log.bytes()
	}
	// Backward-shift deletion: pull later entries of the probe run into
	// the hole when the hole lies between their home and where they are,
	// so lookups never need tombstones.
	for j := next(pos); !s.entries[j].free(); j = next(j) {
		if dist(s.homeOf(j), j) >= dist(pos, j) {
			s.entries[pos] = s.entries[j]
			if s.ext != nil {
				s.ext[pos] = s.ext[j]
			}
			if s.long != nil {
				s.long[pos] = s.long[j]
			}
			pos = j
		}
	}
	s.entries[pos] = memEntry{}
	if s.ext != nil {
		s.ext[pos] = extState{}
	}
	if s.long != nil {
		s.long[pos] = nil
	}
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
		if e.free() {
			s.hand++
			continue
		}
		if keys++; s.expiry(s.hand) <= now {
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
func (s *shard) evict(now int64) { s.evictExcept(now, none) }

// evictExcept is evict passing over the entry at keep (none: no entry).
func (s *shard) evictExcept(now int64, keep int32) {
	n := int32(len(s.entries))
	for {
		if s.hand >= n {
			s.hand = 0
		}
		e := &s.entries[s.hand]
		switch {
		case e.free(), s.hand == keep:
		case s.expiry(s.hand) <= now:
			s.remove(s.hand)
			s.expired++
			return
		case e.m&metaUsed == 0:
			s.remove(s.hand)
			s.evictions++
			return
		default:
			e.m &^= metaUsed
		}
		s.hand++
	}
}
