package throttle

import (
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"math"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/smoothrate/ratelimit"
	"github.com/smoothrate/ratelimit/internal/ctxtest"
)

// manyChecks is n checks of lim on n/2 distinct keys, each key twice (the
// second check of a key apart from its first, as a caller sending
// duplicates would).
func manyChecks(lim *Limiter, n int) []Check {
	cs := make([]Check, n)
	for i := range cs {
		cs[i] = Check{lim, "k" + strconv.Itoa(i%(n/2)), 1}
	}
	return cs
}

// TestAllowAllWorkLinear: AllowAll's bookkeeping on a MemoryStore is
// linear in the number of checks. It finds each check's key among the
// keys before it (two checks of one key count against each other); a
// linear scan per check made 10 000 checks cost a third of a second of
// CPU, 80 000 about 22 s. The comparisons are counted, not timed.
func TestAllowAllWorkLinear(t *testing.T) {
	ctx := context.Background()
	s := memStore(WithStoreClock(newSetClock()))
	lim := mustNew(t, s, GCRA, PerSecond(10))
	for _, n := range []int{2, 4, 8, 1000, 20_000} {
		before := s.probes.Load()
		ds, err := AllowAll(ctx, manyChecks(lim, n)...)
		if err != nil {
			t.Fatal(err)
		}
		if len(ds) != n {
			t.Fatalf("%d checks: %d decisions", n, len(ds))
		}
		if probes := s.probes.Load() - before; probes > uint64(2*n) {
			t.Errorf("%d checks: %d key comparisons, want at most %d (linear)", n, probes, 2*n)
		}
	}
}

// TestAllowAllStopsWhenCancelled: a MemoryStore's AllowAll of many checks
// stops at the first look at its context after the context ends, and
// counts nothing; a context that has ended before the call stops it at
// once.
func TestAllowAllStopsWhenCancelled(t *testing.T) {
	s := memStore(WithStoreClock(newSetClock()))
	lim := mustNew(t, s, FixedWindow, PerHour(1_000_000))
	const n = 10 * checkEvery
	checks := manyChecks(lim, n)
	for _, at := range []int64{1, 2, 5} {
		ctx := ctxtest.NewCountdown(at)
		_, err := AllowAll(ctx, checks...)
		if !errors.Is(err, context.Canceled) || !errors.Is(err, ErrStore) {
			t.Fatalf("context done at look %d: err = %v, want context.Canceled and ErrStore", at, err)
		}
		if looks := ctx.Looks(); looks != at {
			t.Errorf("context done at look %d: looked %d times, want it to stop at once", at, looks)
		}
		if d := mustAllow(t, lim, "k0", 0); d.Remaining != 1_000_000 {
			t.Fatalf("a cancelled AllowAll counted: remaining %d", d.Remaining)
		}
	}
}

// TestCheckAllCountsNothing: CheckAll decides as AllowAll would and
// counts nothing, on every store.
func TestCheckAllCountsNothing(t *testing.T) {
	ctx := context.Background()
	forEachStore(t, func(t *testing.T, newStore func(clk ratelimit.Clock) Store) {
		s := newStore(newSetClock())
		for _, alg := range allAlgorithms {
			ip := mustNew(t, s, alg, PerMinute(3))
			route := mustNew(t, s, alg, PerMinute(1))
			checks := []Check{{ip, "{a}:ip", 1}, {route, "{a}:route", 1}, {route, "{a}:route", 1}}
			got, err := CheckAll(ctx, checks...)
			if err != nil {
				t.Fatal(err)
			}
			if got.Allowed() || !got[0].Allowed || !got[1].Allowed || got[2].Allowed {
				t.Fatalf("%v: CheckAll = %+v; want the second check of the route refused", alg, got)
			}
			if d := mustAllow(t, route, "{a}:route", 0); d.Remaining != 1 {
				t.Fatalf("%v: CheckAll counted: %+v", alg, d)
			}
			// Without the refused check: it would pass, and still
			// counts nothing; AllowAll then decides the same, and
			// CheckAll's Remaining was the keys' stored state.
			got, err = CheckAll(ctx, checks[:2]...)
			if err != nil || !got.Allowed() || got[0].Remaining != 3 || got[1].Remaining != 1 {
				t.Fatalf("%v: CheckAll = %+v, %v; want both fitting, their keys untouched", alg, got, err)
			}
			want, err := AllowAll(ctx, checks[:2]...)
			if err != nil || !want.Allowed() {
				t.Fatalf("%v: AllowAll after CheckAll = %+v, %v", alg, want, err)
			}
			for i := range want {
				if got[i].Allowed != want[i].Allowed || got[i].RetryAfter != want[i].RetryAfter || got[i].Limit != want[i].Limit {
					t.Errorf("%v: check %d: CheckAll %+v, AllowAll %+v", alg, i, got[i], want[i])
				}
			}
		}
	})
}

// TestHugeCostSafe: a request of any size, up to the largest int, is
// refused as one that can never fit (RetryAfter Never) and leaves the key
// as it was, on every store: the scripts compare it before any
// arithmetic, so nothing overflows and no later call fails.
func TestHugeCostSafe(t *testing.T) {
	ctx := context.Background()
	forEachStore(t, func(t *testing.T, newStore func(clk ratelimit.Clock) Store) {
		s := newStore(newSetClock())
		for _, alg := range allAlgorithms {
			lim := mustNew(t, s, alg, PerMinute(5))
			mustAllow(t, lim, "k", 2)
			for _, n := range []int{math.MaxInt32, int(min(1<<31, uint64(math.MaxInt))), int(min(1<<53+1, uint64(math.MaxInt))), math.MaxInt - 1, math.MaxInt} { // as large as int holds, on 386 too
				d := mustAllow(t, lim, "k", n)
				if d.Allowed || d.RetryAfter != Never || d.Remaining != 3 {
					t.Errorf("%v: AllowN(%d) = %+v; want refused, never, 3 remaining", alg, n, d)
				}
				ds, err := AllowAll(ctx, Check{lim, "k", 1}, Check{lim, "k", n})
				if err != nil || ds.Allowed() || !ds[0].Allowed || ds[1].RetryAfter != Never {
					t.Errorf("%v: AllowAll(1, %d) = %+v, %v; want the second never fitting", alg, n, ds, err)
				}
			}
			if d := mustAllow(t, lim, "k", 3); !d.Allowed || d.Remaining != 0 {
				t.Errorf("%v: after the huge requests, 3 more = %+v; want allowed, 0 remaining", alg, d)
			}
		}
	})
}

// BenchmarkAllowAllMany is AllowAll of n checks (n/2 keys, each twice) on
// a MemoryStore: its time per check should not grow with n.
//
//	go test ./throttle -run XXX -bench AllowAllMany -benchmem
func BenchmarkAllowAllMany(b *testing.B) {
	for _, n := range []int{1_000, 10_000, 80_000} {
		b.Run(fmt.Sprint(n), func(b *testing.B) {
			clk := newSetClock()
			s := memStore(WithStoreClock(clk))
			lim := mustNew(b, s, GCRA, Limit{Count: 1 << 20, Period: time.Hour})
			checks := manyChecks(lim, n)
			ctx := context.Background()
			b.ReportAllocs()
			for b.Loop() {
				clk.Add(time.Hour)
				if _, err := AllowAll(ctx, checks...); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*n), "ns/check")
		})
	}
}

// longKey returns a key of n bytes, distinct for each i.
func longKey(i, n int) string {
	p := strconv.Itoa(i) + ":"
	return p + strings.Repeat("v", n-len(p))
}

// TestMemoryBytesBounded: a MemoryStore holds at most WithMaxBytes of keys
// and states, whatever the keys' length: values of 60 KiB (the most Envoy
// puts in a header) and of 1 MB. A key longer than maxHeldKey is held by
// its digest, and still limited as its own key.
func TestMemoryBytesBounded(t *testing.T) {
	ctx := context.Background()
	for _, size := range []int{60 << 10, 1 << 20} {
		t.Run(strconv.Itoa(size), func(t *testing.T) {
			const budget = 1 << 20
			s := memStore(WithStoreClock(newSetClock()), WithMaxBytes(budget))
			lim := mustNew(t, s, GCRA, PerHour(2))
			for i := range 200 {
				mustAllow(t, lim, longKey(i, size), 1)
				if st := s.Stats(); st.Bytes > budget {
					t.Fatalf("after %d keys of %d bytes: %d bytes held, budget %d", i+1, size, st.Bytes, budget)
				}
			}
			if st := s.Stats(); st.Keys != 200 || st.Bytes != tables(s)+200*keyCost(32) {
				t.Errorf("200 long keys: %+v, tables %d; want each held by its 32-byte digest (%d bytes each)", st, tables(s), keyCost(32))
			}
			// A long key is limited on its own: 2 an hour.
			k := longKey(0, size)
			if d := mustAllow(t, lim, k, 1); !d.Allowed || d.Remaining != 0 {
				t.Errorf("second hit of a long key: %+v", d)
			}
			if d := mustAllow(t, lim, k, 1); d.Allowed {
				t.Errorf("third hit of a long key allowed: %+v", d)
			}
			ds, err := AllowAll(ctx, Check{lim, k, 0}, Check{lim, longKey(1, size), 1})
			if err != nil || !ds.Allowed() || ds[0].Remaining != 0 || ds[1].Remaining != 0 {
				t.Errorf("AllowAll of long keys = %+v, %v", ds, err)
			}
			// Its digest, as a key of its own, is another key.
			sum := sha256.Sum256([]byte(k))
			if d := mustAllow(t, lim, string(sum[:]), 1); !d.Allowed || d.Remaining != 1 {
				t.Errorf("the digest of a held key as a key: %+v; want a fresh key", d)
			}
			if err := lim.Reset(ctx, k); err != nil {
				t.Fatal(err)
			}
			if d := mustAllow(t, lim, k, 0); d.Remaining != 2 {
				t.Errorf("a long key after Reset: %+v", d)
			}
		})
	}
	// Keys of maxHeldKey bytes, held as they are, fill the budget: the
	// store evicts, and stays within it, table included, with less than
	// a key's bytes and its slots' to spare, and an eighth of its tables
	// (which grow by an eighth at least: minResize).
	const budget = MinMaxBytes
	s := memStore(WithStoreClock(newSetClock()), WithMaxBytes(budget))
	lim := mustNew(t, s, FixedWindow, PerHour(2))
	for i := range 1000 {
		mustAllow(t, lim, longKey(i, maxHeldKey), 1)
	}
	if st := s.Stats(); st.Bytes > budget || st.Evictions == 0 || budget-st.Bytes >= keyCost(maxHeldKey)+2*slotBytes(false, true)+tables(s)/minResize {
		t.Errorf("1000 keys of %d bytes in %d bytes: %+v, tables %d", maxHeldKey, budget, st, tables(s))
	}
}

// tables is what the tables of s take (shard.table).
func tables(s *MemoryStore) int {
	n := 0
	for _, sh := range s.shards {
		sh.mu.Lock()
		n += sh.table
		sh.mu.Unlock()
	}
	return n
}

// TestMemoryHeapWithinMaxBytes: what WithMaxBytes bounds is the heap the
// store holds, tables, keys and logs: a store flooded with three times the
// keys it can hold, of every algorithm and of keys held in the table (8
// bytes) or as strings (3, 24 and 100 bytes), holds no more live heap than
// its bytes (but for the store's own struct), counts what it holds
// (Stats().Bytes) to within a few KiB (or over, for tiny keys), and uses
// most of its bytes.
func TestMemoryHeapWithinMaxBytes(t *testing.T) {
	const budget = 512 << 10 // 8 shards
	ctx := context.Background()
	for _, alg := range allAlgorithms {
		for _, n := range []int{3, 8, 24, 100} {
			var before, after runtime.MemStats
			runtime.GC()
			runtime.ReadMemStats(&before)
			s := memStore(WithStoreClock(newSetClock()), WithMaxBytes(budget), WithMaxKeys(1<<24))
			lim := mustNew(t, s, alg, PerMinute(10))
			buf := make([]byte, 0, n)
			for i := range 3 * budget / 64 {
				buf = strconv.AppendInt(buf[:0], int64(i%46656), 36) // distinct in 3 bytes
				for len(buf) < n {
					buf = append(buf, '_')
				}
				if _, err := lim.Allow(ctx, string(buf)); err != nil {
					t.Fatal(err)
				}
			}
			runtime.GC()
			runtime.ReadMemStats(&after)
			st := s.Stats()
			runtime.KeepAlive(s)
			heap := int(after.HeapAlloc) - int(before.HeapAlloc)
			// The store's own struct and its slice of shards are not
			// counted, nor the limiter: a few hundred bytes; and a
			// collection leaves a few KiB of the runtime's own now and
			// then.
			own := 8<<10 + 8*len(s.shards)
			// A key of fewer than 16 bytes is counted as the 16-byte
			// block of tiny objects it may keep alive alone (keyCost);
			// most share theirs.
			tiny := 0
			if n < 16 {
				tiny = 16 * st.Keys
			}
			if heap > budget+own || st.Bytes > budget || st.Bytes < budget*8/10 || heap < st.Bytes-own-tiny || heap > st.Bytes+own {
				t.Errorf("%v, keys of %d bytes, %d bytes: %d keys, %d bytes counted, %d of live heap", alg, n, budget, st.Keys, st.Bytes, heap)
			}
		}
	}
}

// TestMemoryLogBytesBounded: a sliding log's entries count in its shard's
// bytes (8 each, as its buffer grows), and a shard over its bytes evicts
// other keys.
func TestMemoryLogBytesBounded(t *testing.T) {
	const budget = MinMaxBytes
	s := memStore(WithStoreClock(newSetClock()), WithMaxBytes(budget))
	lim := mustNew(t, s, SlidingLog, PerHour(4096))
	for i := range 20 {
		mustAllow(t, lim, "k"+strconv.Itoa(i), 1024)
		if st := s.Stats(); st.Bytes > budget {
			t.Fatalf("after %d logs of 1024 entries: %+v, budget %d", i+1, st, budget)
		}
	}
	st := s.Stats()
	if want := 8*1024 + keyCost(2); st.Keys >= 20 || st.Bytes < 2*want {
		t.Errorf("20 logs of 1024 entries in %d bytes: %+v", budget, st)
	}
	// A log that alone outgrows the shard is kept, alone.
	big := mustNew(t, s, SlidingLog, PerHour(10_000))
	mustAllow(t, big, "big", 10_000)
	if st := s.Stats(); st.Keys != 1 || st.Bytes != tables(s)+ringBytes+8*16384+keyCost(3) {
		t.Errorf("a log of 10 000 entries in %d bytes: %+v; want it alone", budget, s.Stats())
	}
}

// fullOfShortKeys is a store of MinMaxBytes (one shard) and its GCRA
// limiter, given short keys until the shard evicted one: full by its
// bytes, its table's.
func fullOfShortKeys(t *testing.T) (*MemoryStore, *Limiter) {
	s := memStore(WithStoreClock(newSetClock()), WithMaxBytes(MinMaxBytes))
	gcra := mustNew(t, s, GCRA, PerHour(10))
	for i := 0; s.Stats().Evictions == 0; i++ {
		mustAllow(t, gcra, fmt.Sprintf("key%05d", i), 1)
	}
	return s, gcra
}

// TestMemoryFirstWideStateFits: a shard full, by its bytes, of packed
// states (GCRA) that then holds its first wide one (a token bucket's)
// allocates the ext of its whole table, which does not fit: it evicts
// keys until they fit in a shorter table that, with its ext, does, and
// keeps the new key and its state.
func TestMemoryFirstWideStateFits(t *testing.T) {
	const budget = MinMaxBytes
	s, _ := fullOfShortKeys(t)
	before := s.Stats()
	sh := s.shards[0]
	length := len(sh.entries)
	if len(s.shards) != 1 || sh.ext != nil || before.Bytes > budget || before.Bytes < budget*3/4 {
		t.Fatalf("%d shards, ext %v, %+v: want one shard full of packed states", len(s.shards), sh.ext != nil, before)
	}
	bucket := mustNew(t, s, TokenBucket, PerHour(10))
	mustAllow(t, bucket, "wide", 3)
	st := s.Stats()
	if sh.ext == nil || st.Bytes > budget || st.Keys >= before.Keys || len(sh.entries) >= length {
		t.Errorf("after the first wide state: %+v (before %+v), table %d (before %d), ext %v", st, before, len(sh.entries), length, sh.ext != nil)
	}
	if d := mustAllow(t, bucket, "wide", 1); d.Remaining != 6 {
		t.Errorf("the wide key after the shard shrank: %+v; want 6 remaining", d)
	}
	checkShards(t, s)
}

// TestMemoryLongKeyIntoShardFullOfShortKeys: a shard full, by its bytes,
// of short keys (whose bytes are their slots) gets its first key of
// another length, then more of 512 bytes. Each makes room by evicting
// keys until a shorter table fits (a first long key also needs its long,
// 8 bytes a slot), not by evicting every key: evicting a short key frees
// no bytes by itself. The shard stays within its bytes, and keeps most of
// its keys.
func TestMemoryLongKeyIntoShardFullOfShortKeys(t *testing.T) {
	const budget = MinMaxBytes
	s, gcra := fullOfShortKeys(t)
	before := s.Stats()
	mustAllow(t, gcra, "a-key-of-17-bytes", 1)
	if st := s.Stats(); st.Bytes > budget || st.Keys < before.Keys*3/4 {
		t.Errorf("after the first long key: %+v (before %+v); want within %d bytes, most keys kept", st, before, budget)
	}
	for i := range 20 {
		mustAllow(t, gcra, longKey(i, maxHeldKey), 1)
	}
	if st := s.Stats(); st.Bytes > budget || st.Keys < before.Keys/2 {
		t.Errorf("after 20 keys of %d bytes: %+v (before %+v); want within %d bytes, most keys kept", maxHeldKey, st, before, budget)
	}
	for i := range 100 {
		mustAllow(t, gcra, fmt.Sprintf("new%05d", i), 1)
	}
	if st := s.Stats(); st.Keys < before.Keys/2 || st.Bytes > budget {
		t.Errorf("100 short keys later: %+v; want most held, within %d bytes", st, budget)
	}
	t.Logf("before %+v, after %+v", before, s.Stats())
	checkShards(t, s)
}

// BenchmarkMemoryByteBoundMixedFlood: new keys into a store bound by its
// bytes (4 MiB), one in two of 512 bytes, the others short: inserts that
// evict, and tables that grow and shrink as long keys come and go.
func BenchmarkMemoryByteBoundMixedFlood(b *testing.B) {
	s := memStore(WithStoreClock(newSetClock()), WithMaxBytes(4<<20))
	lim := mustNew(b, s, GCRA, PerHour(10))
	ctx := context.Background()
	pad := strings.Repeat("x", maxHeldKey-12)
	for i := range 200_000 {
		if _, err := lim.Allow(ctx, "k"+strconv.Itoa(i)); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportAllocs()
	i := 0
	for b.Loop() {
		k := "n" + strconv.Itoa(i)
		if i%2 == 0 {
			k = pad + k
		}
		if _, err := lim.Allow(ctx, k); err != nil {
			b.Fatal(err)
		}
		i++
	}
	b.ReportMetric(float64(s.Stats().Keys), "keys")
}

// TestMemoryByteBoundResizesRarely: in a shard bound by its bytes, where
// keys of 512 bytes come and go among short ones, each long key's bytes
// freed or needed would let the table grow, or make it shrink, by a few
// slots, and the shard resize at almost every insert; a table changes by
// an eighth of its length at least (minResize), or not at all.
func TestMemoryByteBoundResizesRarely(t *testing.T) {
	s := memStore(WithStoreClock(newSetClock()), WithMaxBytes(MinMaxBytes))
	lim := mustNew(t, s, GCRA, PerHour(10))
	pad := strings.Repeat("x", maxHeldKey-12)
	sh := s.shards[0]
	const n = 20_000
	resizes := 0
	for i := range n {
		k := "n" + strconv.Itoa(i)
		if i%2 == 0 {
			k = pad + k
		}
		before := len(sh.entries)
		mustAllow(t, lim, k, 1)
		if after := len(sh.entries); after != before {
			resizes++
			if d := after - before; d < before/8 && -d < before/8 {
				t.Fatalf("insert %d: table of %d resized to %d", i, before, after)
			}
		}
	}
	if st := s.Stats(); st.Bytes > MinMaxBytes {
		t.Errorf("%+v", st)
	}
	t.Logf("%d resizes in %d inserts, %+v", resizes, n, s.Stats())
	checkShards(t, s)
}
