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
// the next cache line), with, for a short key, its bytes at the same
// position in kw, a parallel array (keyWords). The table holds the entries
// themselves, not an index of them, because every extra indirection is one
// more random memory reference per decision, and at this size each costs
// more than the decision's arithmetic. The decision asks for that entry's line (and the
// key's words') as soon as it has the hash, before the clock and the lock
// (homeLine, homeKeyLine, internal/prefetch), so that the waits overlap
// them and each other.
//
// An entry is half a cache line, not a whole one, because the wait for it
// is most of a decision, and the smaller the table the more of it the
// processor's caches hold. A GCRA, fixed-window or sliding-window state
// fits in the entry (packState). The buckets' states (three words and an
// expiry), a sliding log and the rare state too large to pack keep their
// first two words in the entry and the rest in ext, an array parallel to
// the table that a shard allocates only when it first holds such a state:
// ext[i] belongs to entries[i], at an address known from the hash as well,
// so its line is prefetched with the entry's and the two waits overlap. No
// pointer per key (but a key's own bytes when it is not short, and a
// sliding log's ring), so the garbage collector scans three slices per
// shard, not a million small objects.
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
	// first, extFirst, kwFirst and length are the addresses of the
	// table, of ext (0: none) and of kw and the table's length, read
	// without mu to prefetch a key's home entry before taking mu
	// (homeLine). A reading taken across a grow may point into the old
	// arrays, or past them: that only wastes the prefetch, which never
	// faults.
	first    atomic.Uintptr
	extFirst atomic.Uintptr
	kwFirst  atomic.Uintptr
	length   atomic.Int64
	seed     *hashSeed  // the store's
	entries  []memEntry // the table (setEntries); a nil key marks a free entry
	ext      []extState // nil, or as long as entries: the rest of wide states
	kw       []keyWords // as long as entries: the short keys' bytes
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
// 32-byte entry and its 16 bytes of words) at the least load a table has
// after it grows, half full. Such a key's bytes are in its slot; a key of
// another length costs its own allocation besides (its length rounded up
// to Go's size class). A shard that holds a wide state (the buckets', a
// sliding log's) has 24 bytes a slot more (ext), 48 a key at that load,
// and a sliding log its buffer and its ring. Stats().Bytes counts what
// the store holds, tables included, and that is what WithMaxBytes bounds.
const KeyOverhead = 96

// keyCost is what holding a key of n bytes costs besides its slot: the
// string the shard keeps (a short key's bytes are in kw). A string of
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

// slotBytes is what a slot of a table costs: its entry and its words, and
// its ext when wide is set.
func slotBytes(wide bool) int {
	n := int(unsafe.Sizeof(memEntry{}) + unsafe.Sizeof(keyWords{}))
	if wide {
		n += int(unsafe.Sizeof(extState{}))
	}
	return n
}

// tableBytes is what a shard with a table of n slots costs (with ext when
// wide is set), the shard itself included.
func tableBytes(n int, wide bool) int {
	b := allocSizePointers(n*int(unsafe.Sizeof(memEntry{}))) + allocSize(n*int(unsafe.Sizeof(keyWords{}))) + int(unsafe.Sizeof(shard{}))
	if wide {
		b += allocSizePointers(n * int(unsafe.Sizeof(extState{})))
	}
	return b
}

// used is what the shard holds: its table, its keys' own bytes and its
// logs. WithMaxBytes bounds it.
func (s *shard) used() int { return s.table + s.bytes }

// memEntry is one key, 32 bytes on a 64-bit processor: two to a cache line
// (a table of at least 32 KiB is page-aligned, and a smaller one's size
// class is a multiple of 32 bytes, so entries do not straddle lines).
//
// key points to the key's bytes (the caller's string, kept alive by the
// pointer), or, for a short key (minShortKey to maxShortKey bytes), to
// shortMark: a short key's bytes are the shard's kw at the same position
// (keyWords). nil marks a free entry, since keys are never empty
// (ErrEmptyKey).
// meta holds the rest of the key's identity and two flags:
//
//	bits 32–63  tag: the high half of the key's hash. Scaled to the
//	            table's length it is the key's home position, so the table
//	            can grow and delete without hashing keys again.
//	bits 8–31   the key's length (MaxKeyLen)
//	bits 4–7    the algorithm
//	bit 1       wide: the state continues in the shard's ext
//	bit 0       used: set by every decision and cleared by the clock hand,
//	            so that a key used since the hand last passed it gets a
//	            second chance before eviction
//
// so that one comparison of meta (flags masked) checks tag, length and
// algorithm, and only a key that passes it has its bytes (or words)
// compared. a and b hold the state: packed (packState), or a wide state's
// a and b.
type memEntry struct {
	key  unsafe.Pointer
	meta uint64
	a, b int64
}

const (
	metaUsed  = 1 << 0
	metaWide  = 1 << 1
	metaFlags = 0xf // the bits that are not identity: used, wide and two spare
)

// identity is the meta of key k of hash h, without flags.
func identity(h uint64, k memKey) uint64 {
	return h&^(1<<32-1) | uint64(len(k.key))<<8 | uint64(k.alg)<<4
}

func (e *memEntry) tag() uint32    { return uint32(e.meta >> 32) }
func (e *memEntry) alg() Algorithm { return Algorithm(e.meta >> 4 & 0xf) }
func (e *memEntry) isWide() bool   { return e.meta&metaWide != 0 }

// keyAt is the key of the live entry at i.
func (s *shard) keyAt(i int) string {
	e := &s.entries[i]
	n := int(e.meta >> 8 & MaxKeyLen)
	if isShort(n) {
		return s.kw[i].key(n)
	}
	return unsafe.String((*byte)(e.key), n)
}

// isShort reports whether a key of n bytes is short: held in kw, read as
// a shortKey.
func isShort(n int) bool { return uint(n)-minShortKey <= maxShortKey-minShortKey }

// keyWords is a short key's two words (shortKey: its length is in its
// entry's meta), kept in the shard's kw, an array parallel to the table,
// rather than as the caller's string: a lookup compares the words in kw,
// whose line it asked for with the entry's (homeKeyLine), instead of
// following the entry's pointer to the key's bytes, an allocation of its
// own elsewhere in memory: one dependent memory reference fewer per
// decision on a key that is not the very string the store keeps (a
// server's request builds its key anew), and no caller's string kept
// alive.
type keyWords struct{ a, b uint64 }

// shortMark is what the key of a short key's entry points to.
var shortMark byte

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

// extState is the rest of a wide state, one that does not fit in its
// entry: the token and leaky buckets' third word (c), a GCRA or sliding
// window state's when its numbers are too large to pack, and the sliding
// log's ring; and, since only a packed state's is known from the state
// itself, the expiry: the time (µs) from which the state is
// indistinguishable from an absent key (the key is back to its full
// allowance), when the key may be reclaimed.
type extState struct {
	c, expires int64
	log        *ring // SlidingLog only
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
// So such a key needs nothing in ext.
func packState(alg Algorithm, st state, expires int64) (a, b int64, ok bool) {
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
		return state{a: e.a, b: e.b, c: x.c}, x.expires
	}
	switch e.alg() {
	case GCRA:
		// TAT, rounded up to the next whole µs: the time at which the
		// debt is 0 (decideGCRA's ResetAfter).
		st := state{a: e.a, b: e.b & (1<<32 - 1), c: int64(uint64(e.b) >> 32)} // den is unsigned: up to 2^32 - 1
		if st.b != 0 {
			return st, st.a + 1
		}
		return st, st.a
	case SlidingWindow:
		b := uint64(e.b)
		return state{a: e.a, b: int64(b & (1<<24 - 1)), c: int64(b >> 24 & (1<<24 - 1))}, e.a + periodOf(b>>48)
	}
	// A fixed window's count is 0 at its end (decideFixedWindow).
	return state{a: e.a, b: e.b}, e.a
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
			e.meta &^= metaWide
		}
		e.a, e.b = a, b
		return false
	}
	allocated = s.ext == nil
	x := s.extOf(i)
	e.a, e.b = st.a, st.b
	x.c, x.expires = st.c, expires
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
		if n := s.shorterFit(); n > 0 {
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
// that holds its keys at maxLoad and brings the shard within its bytes,
// or 0 if there is none.
func (s *shard) shorterFit() int {
	lo := max(minTable, (maxLoadDen*s.live+maxLoadNum-1)/maxLoadNum)
	fits := func(n int) bool { return tableBytes(n, s.ext != nil)+s.bytes <= s.maxBytes }
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
		s.table = tableBytes(len(s.entries), true)
	}
	s.entries[i].meta |= metaWide
	return &s.ext[i]
}

// maxLoad is the fraction of a table's entries that may be in use before
// it grows (maxLoadNum / maxLoadDen): at most three quarters full, a
// lookup of a present key reads 2.5 entries at worst on average with
// linear probing, all on one page but for the rare run that crosses one.
// A table grows by half until it is as large as its shard's max keys need
// at that load, or its bytes allow, and no larger (and shrinks when the
// shard's first wide state does not fit in its bytes otherwise): its length need not be a power of two (a key's
// home is its tag scaled to the length, not masked), so a full store
// costs 48 / maxLoad bytes per key (72 / maxLoad in a shard with an ext),
// and a growing one is at least half full (a doubling table sinks to
// three eighths: more pages for the same keys, each one more entry for the
// processor's TLB to miss).
const maxLoadNum, maxLoadDen = 3, 4

// reclaimPerInsert is how many entries an insert inspects for expired
// keys: memory is reclaimed a little at a time, by the writers that need
// it, and never by a sweep that holds the lock over the whole shard.
const reclaimPerInsert = 2

func newShard(seed *hashSeed, max int) *shard {
	s := &shard{shardTable: shardTable{seed: seed}, shardLocked: shardLocked{max: max, maxBytes: math.MaxInt}}
	s.setEntries(make([]memEntry, minTable), nil, make([]keyWords, minTable))
	return s
}

// setEntries makes es the table, ext, if not nil, its ext, and kw (as
// long) its kw.
func (s *shard) setEntries(es []memEntry, ext []extState, kw []keyWords) {
	s.entries, s.ext, s.kw = es, ext, kw
	s.table = tableBytes(len(es), ext != nil)
	s.kwFirst.Store(uintptr(unsafe.Pointer(unsafe.SliceData(kw))))
	s.first.Store(uintptr(unsafe.Pointer(unsafe.SliceData(es))))
	s.extFirst.Store(uintptr(unsafe.Pointer(unsafe.SliceData(ext))))
	s.length.Store(int64(len(es)))
}

// homeLine is the address of the home entry of the key of hash h, for a
// prefetch: safe without mu, and only a hint (see first).
func (s *shard) homeLine(h uint64) uintptr {
	return s.first.Load() + uintptr(home(tag(h), int(s.length.Load())))*unsafe.Sizeof(memEntry{})
}

// homeKeyLine is homeLine's counterpart in kw.
func (s *shard) homeKeyLine(h uint64) uintptr {
	return s.kwFirst.Load() + uintptr(home(tag(h), int(s.length.Load())))*unsafe.Sizeof(keyWords{})
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

// lookup returns the key's position, or none. h is the key's hash. It
// computes the key's identity itself and is therefore not inlined into
// allow: inlining it (with the identity computed by the caller) makes a
// decision run more instructions, not fewer (bench/keyed/instructions.sh).
func (s *shard) lookup(h uint64, k memKey) int32 {
	id := identity(h, k)
	short := isShort(len(k.key))
	var w keyWords
	if short {
		w = wordsOf(k.key)
	}
	for pos := home(uint32(h>>32), len(s.entries)); ; pos++ {
		if pos == len(s.entries) {
			pos = 0
		}
		e := &s.entries[pos]
		if e.meta&^metaFlags == id && (short && s.kw[pos] == w || !short && unsafe.String((*byte)(e.key), len(k.key)) == k.key) {
			return int32(pos)
		}
		if e.key == nil {
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
	cost := keyCost(len(k.key))
	n := len(s.entries)
	for s.live > 0 {
		if s.live < s.max {
			if n = s.lengthFor(s.live+1, cost); n > 0 {
				break
			}
		}
		s.evict(now)
		n = len(s.entries)
	}
	s.bytes += cost
	if n > len(s.entries) {
		s.resize(n)
	}
	pos := s.free(tag(h))
	if isShort(len(k.key)) {
		s.entries[pos] = memEntry{key: unsafe.Pointer(&shortMark), meta: identity(h, k)}
		s.kw[pos] = wordsOf(k.key)
	} else {
		s.entries[pos] = memEntry{key: unsafe.Pointer(unsafe.StringData(k.key)), meta: identity(h, k)}
	}
	s.live++
	return int32(pos)
}

// free returns the first free entry from tag t's home on.
func (s *shard) free(t uint32) int {
	pos := home(t, len(s.entries))
	for s.entries[pos].key != nil {
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
	n += n / 2
	if full := s.max*maxLoadDen/maxLoadNum + 1; n > full {
		n = max(full, len(s.entries)+1)
	}
	for n > len(s.entries) && tableBytes(n, s.ext != nil)+s.bytes+cost > s.maxBytes {
		n -= max(1, (n-len(s.entries))/4)
	}
	if maxLoadDen*keys > maxLoadNum*n {
		return 0
	}
	return n
}

// resize makes the table n entries long; n holds the live keys at
// maxLoad.
func (s *shard) resize(n int) {
	old, oldExt, oldKw := s.entries, s.ext, s.kw
	var ext []extState
	if oldExt != nil {
		ext = make([]extState, n)
	}
	s.setEntries(make([]memEntry, n), ext, make([]keyWords, n))
	for i := range old {
		if old[i].key != nil {
			j := s.free(old[i].tag())
			s.entries[j], s.kw[j] = old[i], oldKw[i]
			if old[i].isWide() {
				s.ext[j] = oldExt[i]
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
	s.bytes -= keyCost(int(s.entries[i].meta >> 8 & MaxKeyLen))
	if s.ext != nil {
		s.bytes -= s.ext[i].log.bytes()
	}
	// Backward-shift deletion: pull later entries of the probe run into
	// the hole when the hole lies between their home and where they are,
	// so lookups never need tombstones.
	for j := next(pos); s.entries[j].key != nil; j = next(j) {
		if dist(home(s.entries[j].tag(), n), j) >= dist(pos, j) {
			s.entries[pos], s.kw[pos] = s.entries[j], s.kw[j]
			if s.ext != nil {
				s.ext[pos] = s.ext[j]
			}
			pos = j
		}
	}
	s.entries[pos], s.kw[pos] = memEntry{}, keyWords{}
	if s.ext != nil {
		s.ext[pos] = extState{}
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
		if e.key == nil {
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
		case e.key == nil, s.hand == keep:
		case s.expiry(s.hand) <= now:
			s.remove(s.hand)
			s.expired++
			return
		case e.meta&metaUsed == 0:
			s.remove(s.hand)
			s.evictions++
			return
		default:
			e.meta &^= metaUsed
		}
		s.hand++
	}
}
