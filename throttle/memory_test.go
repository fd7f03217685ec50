package throttle

import (
	"context"
	"errors"
	"fmt"
	"math"
	"math/bits"
	"math/rand/v2"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
	"unsafe"

	"github.com/smoothrate/ratelimit"
	"github.com/smoothrate/ratelimit/internal/testlong"
	"github.com/smoothrate/ratelimit/internal/tsc"
)

func TestMemoryAllowExistingKeyAllocatesNothing(t *testing.T) {
	clk := newSetClock()
	s := memStore(WithStoreClock(clk))
	ctx := context.Background()
	for _, alg := range allAlgorithms {
		lim := mustNew(t, s, alg, PerSecond(1_000_000))
		mustAllow(t, lim, "k", 1)
		allocs := testing.AllocsPerRun(1000, func() {
			clk.Add(time.Microsecond)
			if _, err := lim.Allow(ctx, "k"); err != nil {
				t.Fatal(err)
			}
		})
		if allocs != 0 {
			t.Errorf("%v: %v allocations per Allow on an existing key, want 0", alg, allocs)
		}
	}
}

func TestMemoryEvictsLeastRecentlyUsed(t *testing.T) {
	clk := newSetClock()
	s := memStore(WithStoreClock(clk), WithMaxKeys(1))
	lim := mustNew(t, s, FixedWindow, PerHour(1))
	mustAllow(t, lim, "a", 1)
	if d := mustAllow(t, lim, "a", 1); d.Allowed {
		t.Fatal("a allowed twice in an hour")
	}
	mustAllow(t, lim, "b", 1) // evicts a: the store holds one key
	if st := s.Stats(); st.Keys != 1 || st.Evictions != 1 {
		t.Fatalf("Stats = %+v, want 1 key, 1 eviction", st)
	}
	if d := mustAllow(t, lim, "a", 0); d.Remaining != 1 {
		t.Fatalf("a after eviction: %+v, want its full allowance", d)
	}

	// With room for several keys per shard, a key used since it was
	// written survives; one that was not goes (the CLOCK approximation of
	// least recently used): fill one shard, use its first key again,
	// insert one more.
	s = memStore(WithStoreClock(clk), WithMaxKeys(16*3))
	lim = mustNew(t, s, FixedWindow, PerHour(1))
	sh := s.shards[0]
	var keys []string
	for i := 0; len(keys) < sh.max+1; i++ {
		if k := strconv.Itoa(i); shardOf(s, FixedWindow, k) == sh {
			keys = append(keys, k)
		}
	}
	for _, k := range keys[:sh.max] {
		mustAllow(t, lim, k, 1)
	}
	mustAllow(t, lim, keys[0], 1) // refused, but used
	mustAllow(t, lim, keys[sh.max], 1)
	if d := mustAllow(t, lim, keys[0], 0); d.Remaining != 0 {
		t.Errorf("recently used key was evicted: %+v", d)
	}
	forgotten := 0
	for _, k := range keys[1 : sh.max+1] {
		if mustAllow(t, lim, k, 0).Remaining == 1 {
			forgotten++
		}
	}
	if forgotten != 1 || sh.evictions != 1 {
		t.Errorf("%d keys forgotten, %d evictions; want one of the unused keys evicted", forgotten, sh.evictions)
	}
}

func shardOf(s *MemoryStore, alg Algorithm, key string) *shard {
	_, sh, _ := s.heldKey(alg, key)
	return sh
}

func TestMemoryReclaimsExpiredKeysIncrementally(t *testing.T) {
	clk := newSetClock()
	s := memStore(WithStoreClock(clk), WithMaxKeys(1<<20))
	lim := mustNew(t, s, GCRA, PerSecond(10))
	const n = 10_000
	for i := range n {
		mustAllow(t, lim, "old"+strconv.Itoa(i), 1)
	}
	clk.Add(time.Second) // every old key is full again
	for i := range n {
		mustAllow(t, lim, "new"+strconv.Itoa(i), 1)
	}
	st := s.Stats()
	if st.Evictions != 0 || st.Expired < n*9/10 {
		t.Fatalf("Stats = %+v: want most of the %d expired keys reclaimed by %d inserts, no evictions", st, n, n)
	}
	// A key that has not expired is never reclaimed.
	for i := range n {
		if d := mustAllow(t, lim, "new"+strconv.Itoa(i), 0); d.Remaining != 9 {
			t.Fatalf("new%d lost its state: %+v", i, d)
		}
	}
	checkShards(t, s)
}

func TestMemoryReset(t *testing.T) {
	forEachStore(t, func(t *testing.T, newStore func(clk ratelimit.Clock) Store) {
		s := newStore(newSetClock())
		for _, alg := range allAlgorithms {
			lim := mustNew(t, s, alg, PerMinute(2))
			other := mustNew(t, s, alg, PerMinute(2))
			mustAllow(t, lim, "k", 2)
			mustAllow(t, lim, "other", 2)
			if err := lim.Reset(context.Background(), "k"); err != nil {
				t.Fatal(err)
			}
			if d := mustAllow(t, lim, "k", 2); !d.Allowed {
				t.Errorf("%v: after Reset: %+v", alg, d)
			}
			if d := mustAllow(t, other, "other", 1); d.Allowed {
				t.Errorf("%v: Reset of k changed other: %+v", alg, d)
			}
		}
	})
}

func TestMemoryOptionErrors(t *testing.T) {
	for _, opt := range []StoreOption{WithMaxKeys(0), WithMaxBytes(MinMaxBytes - 1), WithStoreClock(nil), nil, WithKeyPrefix("x:"), WithKeyPrefix("{x}"), WithRefusalCache(10)} {
		if s, err := NewMemoryStore(opt); !errors.Is(err, ErrInvalidOption) || s != nil {
			t.Errorf("NewMemoryStore with a bad option: %v, %v, want nil, ErrInvalidOption", s, err)
		}
	}
	var nilStore *MemoryStore
	if _, err := New(nilStore, GCRA, PerSecond(1)); !errors.Is(err, ErrNilStore) {
		t.Errorf("New(nil *MemoryStore): %v", err)
	}
	if st := nilStore.Stats(); st != (MemoryStats{}) {
		t.Errorf("nil Stats = %+v", st)
	}
}

func TestMemoryClockOutOfRange(t *testing.T) {
	clk := newSetClock()
	lim := mustNew(t, memStore(WithStoreClock(clk)), GCRA, PerSecond(1))
	clk.Set(time.Unix(-1, 0))
	if _, err := lim.Allow(context.Background(), "k"); !errors.Is(err, ErrInvalidTime) {
		t.Fatalf("before the epoch: %v, want ErrInvalidTime", err)
	}
}

func TestShardCount(t *testing.T) {
	for _, c := range []struct{ keys, procs, want int }{
		{1, 8, 1}, {5, 8, 1}, {100, 8, 1}, {2047, 2, 1}, {2048, 2, 2}, {100_000, 2, 64},
		{1 << 20, 1, 64}, {1 << 20, 2, 128}, {1 << 20, 3, 256}, {1 << 20, 16, 1024}, {1 << 20, 1000, 1024},
	} {
		if got := shardCount(c.keys, c.procs); got != c.want {
			t.Errorf("shardCount(%d, %d) = %d, want %d", c.keys, c.procs, got, c.want)
		}
	}
	// Every shard holds minShardKeys keys, or the store has one shard.
	for _, procs := range []int{1, 2, 3, 8, 64} {
		for keys := 1; keys < 1<<22; keys = keys*3/2 + 1 {
			if n := shardCount(keys, procs); n > 1 && keys/n < minShardKeys {
				t.Errorf("shardCount(%d, %d) = %d: %d keys a shard", keys, procs, n, keys/n)
			}
		}
	}
	s := memStore(WithMaxKeys(1000))
	total := 0
	for _, sh := range s.shards {
		total += sh.max
	}
	if total != 1000 {
		t.Errorf("shards hold %d keys together, want 1000", total)
	}
}

// TestMemoryNoEvictionBelowShardSize: a shard evicts when it is full, not
// when the store is, so a store must never evict while it holds fewer keys
// than its smallest shard (CI caught a store of 64 keys in 64 shards
// admitting everything on two keys that shared a shard); and a large store
// of shards of 1024 keys first evicts when nearly full, not at a fraction.
func TestMemoryNoEvictionBelowShardSize(t *testing.T) {
	clk := newSetClock()
	for _, c := range []struct{ maxKeys, keys int }{{1, 1}, {64, 64}, {2047, 1024}, {100_000, minShardKeys}, {DefaultMaxKeys, minShardKeys}} {
		s := memStore(WithStoreClock(clk), WithMaxKeys(c.maxKeys))
		lim := mustNew(t, s, FixedWindow, PerHour(1))
		for i := range c.keys {
			mustAllow(t, lim, strconv.Itoa(i), 1)
		}
		for i := range c.keys {
			if d := mustAllow(t, lim, strconv.Itoa(i), 1); d.Allowed {
				t.Fatalf("WithMaxKeys(%d): key %d of %d was forgotten (%d shards, Stats %+v)", c.maxKeys, i, c.keys, len(s.shards), s.Stats())
			}
		}
	}

	// Inserting fresh keys into a store of 2^17: the first eviction comes
	// past 80% full. (The fullest of n shards with a mean of m keys holds
	// about m + sqrt(2 m ln n): with 128 shards of 1024 keys, 91% full;
	// 80% would be 7 standard deviations early.)
	const maxKeys = 1 << 17
	s := memStore(WithStoreClock(clk), WithMaxKeys(maxKeys))
	lim := mustNew(t, s, FixedWindow, PerHour(1))
	// Stats visits every shard: read it once at 80% full, then after
	// every key until the first eviction.
	i := 0
	for ; i < maxKeys*8/10; i++ {
		mustAllow(t, lim, strconv.Itoa(i), 1)
	}
	if ev := s.Stats().Evictions; ev != 0 {
		t.Fatalf("%d evictions after %d keys of %d (%d shards): not past 80%% full", ev, i, maxKeys, len(s.shards))
	}
	for ; s.Stats().Evictions == 0; i++ {
		mustAllow(t, lim, strconv.Itoa(i), 1)
	}
	if full := float64(i-1) / maxKeys; full < 0.8 {
		t.Errorf("first eviction at %d keys of %d (%.2f full, %d shards)", i-1, maxKeys, full, len(s.shards))
	} else {
		t.Logf("first eviction at %.3f full (%d shards)", full, len(s.shards))
	}
}

// TestMemoryConcurrentExact runs goroutines against a few keys: every key
// admits exactly its limit, whatever the interleaving (run with -race).
func TestMemoryConcurrentExact(t *testing.T) {
	clk := newSetClock()
	s := memStore(WithStoreClock(clk), WithMaxKeys(64))
	for _, alg := range allAlgorithms {
		lim := mustNew(t, s, alg, PerHour(100))
		var wg sync.WaitGroup
		var mu sync.Mutex
		admitted := map[string]int{}
		for g := range 8 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for i := range 200 {
					k := fmt.Sprint("k", (g+i)%4)
					d, err := lim.Allow(context.Background(), k)
					if err != nil {
						t.Error(err)
						return
					}
					if d.Allowed {
						mu.Lock()
						admitted[k]++
						mu.Unlock()
					}
				}
			}()
		}
		wg.Wait()
		for k, n := range admitted {
			if n != 100 {
				t.Errorf("%v: %s admitted %d of 400, want 100", alg, k, n)
			}
		}
		if len(admitted) != 4 {
			t.Errorf("%v: %d keys admitted anything, want 4", alg, len(admitted))
		}
	}
}

// TestMemoryFloodHeapBounded sends 10 times a store's WithMaxKeys in
// distinct keys through it (500 000 through 50 000 in scripts/test, 2
// million through 200 000 in scripts/test-more; the benchmark
// BenchmarkMemoryFlood does 10 million through 1 million and reports bytes
// per key): the live heap after the flood must be what the kept keys need,
// not ten times as many.
func TestMemoryFloodHeapBounded(t *testing.T) {
	if testing.Short() {
		t.Skip("allocates ~100 MB")
	}
	maxKeys := testlong.Pick(50_000, 200_000)
	flood := 10 * maxKeys
	perKey := floodHeapPerKey(t, maxKeys, flood)
	// A key costs about 100 bytes (docs/throttle.md: 95 after 10 million
	// keys through 1 million); 10× as many keys kept would cost about 1000.
	t.Logf("%.0f bytes of live heap per kept key", perKey)
	if perKey > 400 {
		t.Fatalf("%.0f bytes of live heap per kept key after %d keys through WithMaxKeys(%d): not bounded", perKey, flood, maxKeys)
	}
}

// floodHeapPerKey sends flood distinct keys (GCRA) through a store of
// maxKeys and returns the live heap the store holds per kept key, measured
// after a GC. The keys are short strings made on the fly, counted in.
func floodHeapPerKey(tb testing.TB, maxKeys, flood int) float64 {
	tb.Helper()
	clk := newSetClock()
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	s := memStore(WithStoreClock(clk), WithMaxKeys(maxKeys))
	lim := mustNew(tb, s, GCRA, PerMinute(10))
	ctx := context.Background()
	buf := make([]byte, 0, 16)
	for i := range flood {
		buf = strconv.AppendInt(buf[:0], int64(i), 36)
		if _, err := lim.Allow(ctx, string(buf)); err != nil {
			tb.Fatal(err)
		}
	}
	runtime.GC()
	runtime.ReadMemStats(&after)
	st := s.Stats()
	if st.Keys != maxKeys || st.Evictions != uint64(flood-maxKeys) {
		tb.Fatalf("Stats = %+v, want %d keys and %d evictions", st, maxKeys, flood-maxKeys)
	}
	runtime.KeepAlive(s)
	return float64(after.HeapAlloc-before.HeapAlloc) / float64(maxKeys)
}

// BenchmarkMemoryFlood: 10 million distinct keys through
// WithMaxKeys(1_000_000); reports the live heap per kept key.
func BenchmarkMemoryFlood(b *testing.B) {
	for range b.N {
		b.ReportMetric(floodHeapPerKey(b, 1_000_000, 10_000_000), "heap-B/key")
	}
}

// TestShardTableAgainstMap inserts and removes keys at random in one shard
// whose hashes are forced into a few home positions (long probe runs,
// equal tags, runs that wrap around the table's end), and checks every
// lookup against a map: the backward-shift deletion and the growth must
// never lose or misplace a key, nor the prefetch its aim. It runs once with a table that grows
// freely and once with a shard whose max keys cap its table.
func TestShardTableAgainstMap(t *testing.T) {
	for _, max := range []int{1 << 20, 300} {
		r := rand.New(rand.NewPCG(1, uint64(max)))
		sh := newShard(testSeed(), max)
		hashes := map[string]uint64{}
		sh.testHash = func(k string) uint64 { return hashes[k] }
		present := map[string]bool{}
		states := map[string]state{}
		for step := range 20_000 {
			k := tableKey(r.IntN(300))
			h, ok := hashes[k]
			if !ok {
				// 64 tags for 300 keys, spread over the table, and one in
				// eight keys at the table's last entry, so that runs wrap.
				h = uint64(r.IntN(64)) << 58
				if r.IntN(8) == 0 {
					h = math.MaxUint32 << 32
				}
				hashes[k] = h
			}
			mk := memKey{key: k, alg: GCRA}
			got := sh.lookup(h, mk)
			if (got != none) != present[k] || got != none && sh.keyAt(int(got)) != k {
				t.Fatalf("max %d, step %d: lookup(%s) = %d, present %v", max, step, k, got, present[k])
			}
			if got != none {
				if st, _ := sh.state(got); st != states[k] {
					t.Fatalf("max %d, step %d: %s holds %+v, want %+v", max, step, k, st, states[k])
				}
			}
			// A present key is removed one time in sixteen: about 280
			// of the 300 keys live, enough to grow the capped table to
			// its cap.
			if present[k] && r.IntN(16) == 0 {
				sh.remove(got)
				delete(present, k)
			} else if !present[k] {
				i := sh.insert(h, mk, -1) // now = -1: nothing has expired
				if sh.keyAt(int(i)) != k {
					t.Fatalf("max %d, step %d: insert(%s) returned %d, holding %q", max, step, k, i, sh.keyAt(int(i)))
				}
				st := state{}
				if step > 60 && r.IntN(2) == 0 {
					// Wide states (a denominator above 2^32) once the
					// table has grown some, so that ext is made
					// mid-way and then moves and grows with the table.
					st = state{a: int64(step), b: 7, c: 1<<32 + int64(step)}
					sh.setState(i, st, int64(step))
				}
				states[k] = st
				present[k] = true
			}
			if sh.live != len(present) {
				t.Fatalf("max %d, step %d: %d live, want %d", max, step, sh.live, len(present))
			}
			// The prefetch must aim at the key's home in the table of
			// now, also after the table grew.
			if got, want := sh.homeLine(h), uintptr(unsafe.Pointer(&sh.entries[home(tag(h), len(sh.entries))])); got != want {
				t.Fatalf("max %d, step %d: homeLine(%s) = %#x, want %#x (table of %d at %p)", max, step, k, got, want, len(sh.entries), sh.entries)
			}
			want := uintptr(0)
			if sh.ext != nil {
				want = uintptr(unsafe.Pointer(&sh.ext[home(tag(h), len(sh.entries))]))
			}
			if got := sh.homeExtLine(h); got != want {
				t.Fatalf("max %d, step %d: homeExtLine(%s) = %#x, want %#x", max, step, k, got, want)
			}
			want = 0
			if sh.long != nil {
				want = uintptr(unsafe.Pointer(&sh.long[home(tag(h), len(sh.entries))]))
			}
			if got := sh.homeLongLine(h); got != want {
				t.Fatalf("max %d, step %d: homeLongLine(%s) = %#x, want %#x", max, step, k, got, want)
			}
		}
		if sh.ext == nil {
			t.Errorf("max %d: no ext was made", max)
		}
		checkShard(t, 0, sh, func(_ *memEntry, k string) uint64 { return hashes[k] })
		if want := max*maxLoadDen/maxLoadNum + 1; max == 300 && len(sh.entries) != want {
			t.Errorf("max %d: table of %d entries, want %d (what max keys need at maxLoad)", max, len(sh.entries), want)
		}
	}
}

// tableKey is the shard tests' key for v: v's digits and v%18 dots, so
// that the keys are of 1 to 20 bytes, shorter than, as long as and longer
// than a short key (isShort).
func tableKey(v int) string { return strconv.Itoa(v) + strings.Repeat(".", v%18) }

// tableKeyNumber is tableKey's inverse.
func tableKeyNumber(k string) int {
	v, _ := strconv.Atoi(strings.TrimRight(k, "."))
	return v
}

// TestMemoryWallClock: without WithStoreClock the store reads the wall clock
// (through a monotonic extrapolation that is refreshed every second).
func TestMemoryWallClock(t *testing.T) {
	s := memStore()
	before := time.Now().UnixMicro()
	got, err := s.now()
	after := time.Now().UnixMicro()
	if err != nil || got < before || got > after {
		t.Fatalf("now() = %d, %v; want within [%d, %d]", got, err, before, after)
	}
	// An anchor older than wallRefresh is replaced by a fresh reading.
	s.wall.Store(&wallAnchor{t: time.Now().Add(-2 * wallRefresh), micros: 5})
	if got, _ := s.now(); got < before {
		t.Fatalf("stale anchor used: now() = %d", got)
	}
	// Within wallRefresh, the anchor is extrapolated.
	s.wall.Store(&wallAnchor{t: time.Now(), micros: 1_000_000})
	if got, _ := s.now(); got < 1_000_000 || got > 1_000_000+int64(wallRefresh/time.Microsecond) {
		t.Fatalf("fresh anchor not used: now() = %d", got)
	}
}

// TestMemoryWallAnchorExpiresByTimer: a scaled anchor lives a second of
// the counter or of the monotonic clock, whichever ends first: readWall
// sets a timer for wallRefresh that swaps the anchor, if it still is the
// anchor, for its expired copy, which no counter reading extrapolates;
// the next reading anchors again.
func TestMemoryWallAnchorExpiresByTimer(t *testing.T) {
	if !tsc.Usable() || tsc.FakeTime() {
		t.Skip("no invariant counter: the store reads time.Now")
	}
	s := memStore()
	var timers []func()
	s.after = func(d time.Duration, f func()) {
		if d != wallRefresh {
			t.Errorf("timer for %v, want %v", d, wallRefresh)
		}
		timers = append(timers, f)
	}
	s.tsc.Store(true)
	// A previous anchor 200 ms of the monotonic clock and of the
	// counter (at 1 GHz, near enough) ago, not scaled: readWall scales.
	now := time.Now()
	s.wall.Store(&wallAnchor{Anchor: tsc.Anchor{Mono: tsc.Since(now) - int64(200*time.Millisecond), TSC: tsc.Read() - 200e6}, t: now})
	if _, err := s.readWall(); err != nil {
		t.Fatal(err)
	}
	a := s.wall.Load()
	if a.usPerTick <= 0 || len(timers) != 1 {
		t.Fatalf("anchor %+v, %d timers: want a scaled anchor and its timer", a, len(timers))
	}
	if _, ok := a.at(tsc.Read()); !ok {
		t.Fatal("a fresh anchor does not extrapolate")
	}
	timers[0]()
	x := s.wall.Load()
	if x == a || x.MaxTicks != 0 || x.usPerTick != a.usPerTick || x.micros != a.micros {
		t.Fatalf("after its timer: anchor %+v, want %+v expired", x, a)
	}
	if _, ok := x.at(tsc.Read()); ok {
		t.Fatal("an expired anchor still extrapolates")
	}
	if got, err := s.now(); err != nil || s.wall.Load() == x || got < a.micros {
		t.Fatalf("now() = %d, %v after the expiry, anchor %+v", got, err, s.wall.Load())
	}
	// An old anchor's timer leaves a newer anchor be.
	b := s.wall.Load()
	s.expireWall(a)
	if s.wall.Load() != b {
		t.Fatal("an old anchor's timer replaced the anchor")
	}
}

// checkShards verifies every shard's invariants (checkShard).
func checkShards(t *testing.T, s *MemoryStore) {
	t.Helper()
	for n, sh := range s.shards {
		sh.mu.Lock()
		checkShard(t, n, sh, func(e *memEntry, k string) uint64 { return keyHash(sh.seed, e.alg(), k) })
		sh.mu.Unlock()
	}
}

// checkShard verifies shard n's table (hashOf gives an entry's hash):
// live counts the entries in use, each is found by lookup at its own
// position, its hash is the one the table reads for it (hashAt), with no
// free entry between its home and it, a short key is held in its entry
// and another in long, the table is no fuller than maxLoad, and the shard
// holds no more than its share. A free entry, its long and the ext of an
// entry that is not wide are zero, and so is the packed state of one that
// is (so that nothing stale is read, nor a ring or a key kept alive).
func checkShard(tb testing.TB, n int, sh *shard, hashOf func(e *memEntry, key string) uint64) {
	tb.Helper()
	inUse, bytes := 0, 0
	for i := range sh.entries {
		e := &sh.entries[i]
		if e.free() {
			if *e != (memEntry{}) || sh.ext != nil && sh.ext[i] != (extState{}) || sh.long != nil && sh.long[i] != nil {
				tb.Errorf("shard %d: free entry %d not cleared: %+v", n, i, *e)
			}
			continue
		}
		inUse++
		k := sh.keyAt(i)
		h := hashOf(e, k)
		short := e.kind() != kindLong
		if short != isShort(len(k)) || short && sh.long != nil && sh.long[i] != nil || !short && (sh.long[i] == nil || e.w != keyWords{h, uint64(len(k))}) {
			tb.Errorf("shard %d: entry %d (%q) held as short %v: %+v", n, i, k, short, *e)
		}
		bytes += keyCost(len(k))
		if e.isWide() {
			bytes += sh.ext[i].log.bytes()
		}
		if got := sh.lookup(h, memKey{key: k, alg: e.alg()}); got != int32(i) || sh.hashAt(i) != h {
			tb.Errorf("shard %d: entry %d (%q, hash %x) found at %d", n, i, k, sh.hashAt(i), got)
		}
		for j := home(tag(h), len(sh.entries)); j != i; j = (j + 1) % len(sh.entries) {
			if sh.entries[j].free() {
				tb.Errorf("shard %d: entry %d (%q): free entry %d in its probe run", n, i, k, j)
				break
			}
		}
		if !e.isWide() && sh.ext != nil && sh.ext[i] != (extState{}) {
			tb.Errorf("shard %d: entry %d (%q) is not wide but has ext %+v", n, i, k, sh.ext[i])
		}
		if e.isWide() && (e.a() != 0 || e.b != 0) {
			tb.Errorf("shard %d: entry %d (%q) is wide but packs %d, %d", n, i, k, e.a(), e.b)
		}
		if e.isWide() && len(sh.ext) != len(sh.entries) {
			tb.Errorf("shard %d: entry %d (%q) is wide, ext of %d for a table of %d", n, i, k, len(sh.ext), len(sh.entries))
		}
	}
	if inUse != sh.live || sh.live > sh.max || maxLoadDen*sh.live > maxLoadNum*len(sh.entries) {
		tb.Errorf("shard %d: live %d, entries in use %d, table %d, max %d", n, sh.live, inUse, len(sh.entries), sh.max)
	}
	if bytes != sh.bytes || sh.live > 1 && sh.used() > sh.maxBytes || sh.table != tableBytes(len(sh.entries), sh.ext != nil, sh.long != nil) {
		tb.Errorf("shard %d: %d bytes of keys counted, %d held, %d with the table, at most %d", n, sh.bytes, bytes, sh.used(), sh.maxBytes)
	}
}

// FuzzShardTable drives one shard with the fuzzer's operations (four
// bytes each: what, which of 64 keys, the time, how long an inserted key
// stays unexpired) on hashes forced into a few
// homes (long runs, runs that wrap past the table's end), with a small max
// and expiry times so that inserts reclaim and evict. After every
// operation the table's invariants hold (checkShard), and a key the model
// holds is missing only if the shard counted it as evicted or expired.
func FuzzShardTable(f *testing.F) {
	f.Add(uint8(5), []byte{0, 1, 0, 9, 0, 2, 0, 0, 0, 3, 9, 1, 1, 2, 0, 0, 0, 4, 0, 5})
	f.Add(uint8(39), []byte{0, 63, 255, 1, 0, 62, 255, 1, 0, 0, 1, 1, 1, 63, 0, 0, 2, 0, 0, 0})
	f.Add(uint8(203), []byte{0, 1, 0, 9, 0, 12, 0, 9, 0, 2, 0, 0, 0, 13, 9, 1, 2, 1, 0, 0, 0, 4, 0, 5, 0, 14, 0, 9})
	f.Fuzz(func(t *testing.T, size uint8, ops []byte) {
		sh := newShard(testSeed(), 1+int(size)%40)
		if size >= 200 {
			// Bounded by bytes rather than keys: the table's first
			// slots and a few more, or a few keys of more than 16 bytes
			// (tableKey: 1 to 20 bytes).
			sh.maxBytes = sh.used() + 40*(int(size)%16)
		}
		hashOf := func(key string) uint64 {
			i := tableKeyNumber(key)
			if i%4 == 3 {
				return math.MaxUint32 << 32 // the table's last entry
			}
			return uint64(i%16) << 60
		}
		sh.testHash = hashOf
		check := func(_ *memEntry, k string) uint64 { return hashOf(k) }
		held := map[string]bool{}
		for ; len(ops) >= 4; ops = ops[4:] {
			what, k, at, ttl := ops[0]%4, tableKey(int(ops[1]%64)), int64(ops[2]), int64(ops[3])
			h := hashOf(k)
			i := sh.lookup(h, memKey{key: k, alg: GCRA})
			if (i != none) != held[k] {
				t.Fatalf("lookup(%s) = %d, held %v", k, i, held[k])
			}
			gone := sh.evictions + sh.expired
			switch {
			case what == 0 && i == none:
				i = sh.insert(h, memKey{key: k, alg: GCRA}, at)
				if sh.keyAt(int(i)) != k {
					t.Fatalf("insert(%s) returned %d, holding %q", k, i, sh.keyAt(int(i)))
				}
				// A GCRA state whose TAT is its expiry: packed in the
				// entry, or, for an odd ttl, wide (a denominator of
				// 2^32), so that every path that moves or removes keys
				// moves and clears ext too.
				st := state{a: at + ttl, c: 1}
				if ttl%2 == 1 {
					st.c = 1 << 32
				}
				allocated := sh.setState(i, st, at+ttl)
				if sh.entries[i].isWide() != (ttl%2 == 1) || sh.expiry(i) != at+ttl {
					t.Fatalf("setState(%+v): wide %v, expires %d", st, sh.entries[i].isWide(), sh.expiry(i))
				}
				if allocated {
					// As the store does: the ext may not fit.
					sh.fitBytes(at, h, memKey{key: k, alg: GCRA})
					if i = sh.lookup(h, memKey{key: k, alg: GCRA}); i == none || sh.expiry(i) != at+ttl {
						t.Fatalf("fitBytes lost the key it keeps, or its state: %d", i)
					}
				}
				held[k] = true
			case what == 1 && i != none:
				sh.remove(i)
				delete(held, k)
			case what == 2 && i != none:
				sh.entries[i].m |= metaUsed
			}
			checkShard(t, 0, sh, check)
			lost := 0
			for key := range held {
				if sh.lookup(hashOf(key), memKey{key: key, alg: GCRA}) == none {
					delete(held, key)
					lost++
				}
			}
			if uint64(lost) != sh.evictions+sh.expired-gone || len(held) != sh.live {
				t.Fatalf("%d keys lost, %d counted evicted or expired; %d held, %d live", lost, sh.evictions+sh.expired-gone, len(held), sh.live)
			}
		}
	})
}

// TestMemoryChurnKeepsInvariants: goroutines decide, reset and AllowAll
// over 5000 keys of every algorithm through a store of 200 while the clock
// moves (so keys expire, are reclaimed and evicted); afterwards every
// shard's index and entries must agree (run with -race).
func TestMemoryChurnKeepsInvariants(t *testing.T) {
	clk := newSetClock()
	s := memStore(WithStoreClock(clk), WithMaxKeys(200))
	ctx := context.Background()
	var lims []*Limiter
	for _, alg := range allAlgorithms {
		lims = append(lims, mustNew(t, s, alg, Limit{Count: 3, Period: 50 * time.Millisecond}))
	}
	var wg sync.WaitGroup
	for g := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			r := rand.New(rand.NewPCG(uint64(g), 1))
			for range 5000 {
				lim := lims[r.IntN(len(lims))]
				k := strconv.Itoa(r.IntN(5000))
				var err error
				switch x := r.IntN(20); {
				case x == 0:
					err = lim.Reset(ctx, k)
				case x == 1:
					_, err = AllowAll(ctx, Check{lim, k, 1}, Check{lims[0], strconv.Itoa(r.IntN(5000)), 1})
				case x == 2:
					// About 0.06 ms a decision: some 800 decisions
					// (more keys than the store holds, so it evicts)
					// a period, and 24 periods (so keys expire).
					clk.Add(time.Duration(r.IntN(20)) * time.Millisecond / 8)
				default:
					_, err = lim.AllowN(ctx, k, r.IntN(4))
				}
				if err != nil {
					t.Error(err)
					return
				}
			}
		}()
	}
	wg.Wait()
	checkShards(t, s)
	st := s.Stats()
	t.Logf("Stats = %+v", st)
	if st.Keys > 200 || st.Evictions == 0 || st.Expired == 0 {
		t.Errorf("Stats = %+v: want at most 200 keys, some evicted, some reclaimed", st)
	}
}

func testSeed() *hashSeed {
	s := newHashSeed()
	return &s
}

// TestShardLayout: the fields a decision reads before it locks (the
// table's address and length) share no cache line with the lock and the
// counters that decisions write, and a shard is a whole number of lines
// (its size class then aligns it), so that neighbouring shards share none
// either.
func TestShardLayout(t *testing.T) {
	var s shard
	readEnd := unsafe.Sizeof(s.shardTable)
	if mu := unsafe.Offsetof(s.shardLocked); mu%64 != 0 || mu < readEnd || unsafe.Sizeof(s)%64 != 0 {
		t.Fatalf("read-mostly fields end at %d, mu at %d, shard of %d bytes", readEnd, mu, unsafe.Sizeof(s))
	}
}

// TestPeriodCode: the sliding window's packed period is never below the
// true one (a key is never reclaimed before it is full again), at most
// 2^-9 of it above, and exact where ten significant bits hold it.
func TestPeriodCode(t *testing.T) {
	r := rand.New(rand.NewPCG(5, 6))
	ds := []int64{1, 2, 1023, 1024, 1025, 2047, 2048, 1_000_000, 60_000_000, 3_600_000_000, 86_400_000_000, maxMicros - 1}
	for range 10_000 {
		ds = append(ds, 1+r.Int64N(int64(1)<<(1+r.IntN(52))))
	}
	for _, d := range ds {
		code, ok := periodCode(d)
		got := periodOf(code)
		if !ok || code >= 1<<16 || got < d || got-d > d>>9 {
			t.Fatalf("periodCode(%d) = %#x (%v): decodes to %d", d, code, ok, got)
		}
		if exact := d>>max(0, bits.Len64(uint64(d))-10)<<max(0, bits.Len64(uint64(d))-10) == d; exact && got != d {
			t.Fatalf("periodCode(%d) decodes to %d, not exact", d, got)
		}
	}
	for _, d := range []int64{0, -1} {
		if _, ok := periodCode(d); ok {
			t.Fatalf("periodCode(%d) accepted", d)
		}
	}
}

// TestMemoryStatesPackOrGoWide holds the MemoryStore to the definition
// (decideState) on limits whose numbers do not all fit in an entry: a
// sliding window of 2^25 per second (its counts pass 2^24), a GCRA limit
// whose denominator passes 2^32 (bigDenCount), and the buckets (always wide), sharing
// one key with small limits, so that its state is packed and unpacked,
// goes wide and comes back. Every Decision and every stored state must be
// the definition's, and the expiry read back never earlier than the one
// the decision gave (and, packed, no later than a thousandth of the
// period after it).
func TestMemoryStatesPackOrGoWide(t *testing.T) {
	limits := map[Algorithm][]Limit{
		SlidingWindow: {{Count: 1 << 25, Period: time.Second}, {Count: 10, Period: time.Minute}, {Count: 1000, Period: 7 * time.Millisecond}},
		GCRA:          {{Count: bigDenCount, Period: 2 * time.Microsecond, Burst: 1 << 24}, {Count: 10, Period: time.Second}},
		TokenBucket:   {{Count: 5, Period: time.Second, Burst: 10}, {Count: 1 << 20, Period: time.Hour}},
		LeakyBucket:   {{Count: 3, Period: time.Second}, {Count: 1 << 20, Period: time.Minute, Burst: 1 << 10}},
	}
	for alg, ls := range limits {
		r := rand.New(rand.NewPCG(7, uint64(alg)))
		clk := newSetClock()
		s := memStore(WithStoreClock(clk))
		var lims []*Limiter
		for _, l := range ls {
			lims = append(lims, mustNew(t, s, alg, l))
		}
		var st state
		var ok bool
		wide, packed := 0, 0
		now := clocktestEpochMicros
		for i := range 3000 {
			lim := lims[r.IntN(len(lims))]
			now += r.Int64N(lim.p.period/2 + 1)
			n := r.Int64N(lim.p.limit + 2)
			if r.IntN(3) == 0 {
				n = r.Int64N(3)
			}
			want, write, sh, j := definitionStep(t, s, clk, lim, uint64(alg), i, now, n, &st, &ok)
			if (j != none) != ok {
				t.Fatalf("%v op %d: found %v, want %v", alg, i, j != none, ok)
			}
			if !ok {
				continue
			}
			stored, expires := sh.state(j)
			if stored != st {
				t.Fatalf("%v op %d: stored %+v, want %+v", alg, i, stored, st)
			}
			if sh.entries[j].isWide() {
				wide++
			} else {
				packed++
			}
			if write {
				exact := now + int64(want.ResetAfter/time.Microsecond)
				if expires < exact || !sh.entries[j].isWide() && expires-exact > lim.p.period>>9 {
					t.Fatalf("%v op %d: expires at %d, the decision says %d", alg, i, expires, exact)
				}
			}
		}
		alwaysWide := alg == TokenBucket || alg == LeakyBucket
		neverWide := alg == GCRA && int64(bigDenCount) < 1<<32 // on 386
		if wide == 0 && !neverWide || packed == 0 && !alwaysWide || packed > 0 && alwaysWide {
			t.Fatalf("%v: %d decisions left the state wide, %d packed", alg, wide, packed)
		}
	}
}

// TestMemoryFarFromEpoch: an entry packs a state's first number (a time)
// in 54 bits (fitsState); a store whose clock reads near the end of its
// range (2^52 µs, in 2112) under a limit of 60 years packs its states as
// one of today does, and decides every request as that one does the same
// requests at the same intervals.
func TestMemoryFarFromEpoch(t *testing.T) {
	ctx := context.Background()
	for _, alg := range allAlgorithms {
		l := Limit{Count: 2, Period: 60 * 365 * 24 * time.Hour}
		near, far := newSetClock(), newSetClock()
		// Whole periods later, so that the windows, aligned to 1970,
		// start as far into them.
		periods := (1<<52 - 100e6 - near.Now().UnixMicro()) / l.Period.Microseconds()
		far.Set(near.Now().Add(time.Duration(periods) * l.Period))
		ln, lf := mustNew(t, memStore(WithStoreClock(near)), alg, l), mustNew(t, memStore(WithStoreClock(far)), alg, l)
		r := rand.New(rand.NewPCG(7, uint64(alg)))
		for i := range 300 {
			k, n := fmt.Sprintf("key%d", r.IntN(5)), r.IntN(3)
			dn, err1 := ln.AllowN(ctx, k, n)
			df, err2 := lf.AllowN(ctx, k, n)
			if err1 != nil || err2 != nil || dn != df {
				t.Fatalf("%v, request %d (%s, %d): near %+v %v, far %+v %v", alg, i, k, n, dn, err1, df, err2)
			}
			d := time.Duration(r.IntN(300)) * time.Millisecond
			near.Add(d)
			far.Add(d)
		}
		s := lf.Store().(*MemoryStore)
		checkShards(t, s)
		for _, sh := range s.shards {
			for i := range sh.entries {
				if e := &sh.entries[i]; !e.free() && e.isWide() && (alg == GCRA || alg == FixedWindow || alg == SlidingWindow) {
					t.Errorf("%v: %q held wide", alg, sh.keyAt(i))
				}
			}
		}
	}
}

// TestPackedStateRange: a state whose first number is outside the 54 bits
// an entry packs it in is held wide, and read back the same either way.
func TestPackedStateRange(t *testing.T) {
	sh := newShard(testSeed(), 100)
	for _, a := range []int64{0, 1<<53 - 1, -1 << 53, 1 << 53, -1<<53 - 1, math.MaxInt64 - 1, math.MinInt64 + 1} {
		k := memKey{key: "key1", alg: FixedWindow}
		h := keyHash(sh.seed, k.alg, k.key)
		i := sh.lookup(h, k)
		if i == none {
			i = sh.insert(h, k, 0)
		}
		sh.setState(i, state{a: a, b: 7}, a)
		st, exp := sh.state(i)
		if wide := sh.entries[i].isWide(); st != (state{a: a, b: 7}) || exp != a || wide != !fitsState(a) || wide != (a >= 1<<53 || a < -1<<53) {
			t.Errorf("state at %d: %+v expiring %d, wide %v", a, st, exp, wide)
		}
		checkShard(t, 0, sh, func(e *memEntry, k string) uint64 { return keyHash(sh.seed, e.alg(), k) })
	}
}
