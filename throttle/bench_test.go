package throttle

import (
	"context"
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"
	"time"
)

// The store's own benchmarks; the comparison with other libraries is in
// the bench module (bench/keyed).

// benchKeys are 100 000 keys in a random order.
var benchKeys = func() []string {
	ks := make([]string, 100_000)
	for i := range ks {
		ks[i] = fmt.Sprintf("client:%d", i)
	}
	rand.New(rand.NewPCG(1, 2)).Shuffle(len(ks), func(i, j int) { ks[i], ks[j] = ks[j], ks[i] })
	return ks
}()

// dayLimit never refuses a benchmark and keeps every key's state live
// between two visits.
var dayLimit = Limit{Count: 1_000_000, Period: 1000 * time.Hour}

// BenchmarkDecide: one algorithm's arithmetic alone (algorithms.go), on an
// existing state of a limit of 1 000 000 per day, time moving 100 ms per
// call (more than a request's 86.4 ms weight, so nothing is ever refused).
func BenchmarkDecide(b *testing.B) {
	for _, alg := range allAlgorithms {
		b.Run(alg.String(), func(b *testing.B) {
			m, err := newModel(alg, Limit{Count: 1_000_000, Period: 24 * time.Hour})
			if err != nil {
				b.Fatal(err)
			}
			now := clocktestEpochMicros
			for b.Loop() {
				if !m.decide(now, 1).Allowed {
					b.Fatal("refused")
				}
				now += 100_000
				if alg == SlidingLog && m.log.Len() > 1000 {
					m.log.drop(1000) // keep the log small: the arithmetic is measured here
				}
			}
		})
	}
}

// BenchmarkMemoryAllow: Allow on existing keys of a MemoryStore holding
// 100 000 keys, on the wall clock, serial and parallel, for the algorithms
// whose state an entry packs (GCRA and the windows) and for the buckets,
// whose state continues in ext.
func BenchmarkMemoryAllow(b *testing.B) {
	ctx := context.Background()
	for _, alg := range []Algorithm{GCRA, FixedWindow, SlidingWindow, TokenBucket, LeakyBucket} {
		lim := mustNew(b, memStore(), alg, dayLimit)
		for _, k := range benchKeys {
			mustAllow(b, lim, k, 1)
		}
		b.Run(alg.String(), func(b *testing.B) { allowInTurn(b, lim, benchKeys) })
		b.Run(alg.String()+"/parallel", func(b *testing.B) {
			b.ReportAllocs()
			b.RunParallel(func(pb *testing.PB) {
				i := rand.IntN(len(benchKeys))
				for pb.Next() {
					if d, err := lim.Allow(ctx, benchKeys[i]); err != nil || !d.Allowed {
						b.Error(d, err)
						return
					}
					if i++; i == len(benchKeys) {
						i = 0
					}
				}
			})
		})
	}
}

// BenchmarkMemoryAllowAll: AllowAll of two checks, "per IP and per
// route", on a MemoryStore holding 100 000 keys of each limiter, every
// pair allowed.
func BenchmarkMemoryAllowAll(b *testing.B) {
	ctx := context.Background()
	s := memStore()
	ip := mustNew(b, s, GCRA, dayLimit)
	route := mustNew(b, s, FixedWindow, dayLimit)
	routes := slices.Clone(benchKeys)
	rand.New(rand.NewPCG(3, 4)).Shuffle(len(routes), func(i, j int) { routes[i], routes[j] = routes[j], routes[i] })
	for i := range benchKeys {
		mustAllow(b, ip, benchKeys[i], 1)
		mustAllow(b, route, routes[i], 1)
	}
	b.ReportAllocs()
	i := 0
	for b.Loop() {
		ds, err := AllowAll(ctx, Check{Limiter: ip, Key: benchKeys[i], N: 1}, Check{Limiter: route, Key: routes[i], N: 1})
		if err != nil || !ds.Allowed() {
			b.Fatal(ds, err)
		}
		if i++; i == len(benchKeys) {
			i = 0
		}
	}
}

// BenchmarkMemoryAllowFewKeys: GCRA's Allow on 1 000 existing keys, all
// in cache: what a decision costs when memory does not, the part of
// BenchmarkMemoryAllow's time that is instructions.
func BenchmarkMemoryAllowFewKeys(b *testing.B) {
	keys := benchKeys[:1000]
	lim := mustNew(b, memStore(), GCRA, dayLimit)
	for _, k := range keys {
		mustAllow(b, lim, k, 1)
	}
	allowInTurn(b, lim, keys)
}

// BenchmarkMemoryAllowParts takes a decision on one of 100 000 keys
// apart: "lookup" hashes the key, locks its shard, finds its entry and
// marks it used (the decision's memory references, without the clock or
// the arithmetic); "clock+lookup" reads the store's clock first; "Allow"
// is the whole GCRA decision. The difference between the first two is what
// the clock read costs when keys are many. Read through the vDSO, which
// orders its TSC read after everything before it (lfence or rdtscp), it
// kept one decision's memory references from overlapping the next one's
// and cost more than the lookup itself; the store now counts the TSC
// unordered where it can (internal/tsc), and reads the clock after the key's
// hash.
func BenchmarkMemoryAllowParts(b *testing.B) {
	s := memStore()
	lim := mustNew(b, s, GCRA, dayLimit)
	for _, k := range benchKeys {
		mustAllow(b, lim, k, 1)
	}
	lookup := func(key string, now int64) {
		h := keyHash(s.seed, GCRA, key)
		sh := s.shards[h&s.mask]
		sh.mu.Lock()
		i := sh.lookup(h, memKey{key: key, alg: GCRA})
		if i == none || now < 0 {
			sh.mu.Unlock()
			b.Fatal("key not found")
		}
		sh.entries[i].m |= metaUsed
		sh.mu.Unlock()
	}
	b.Run("lookup", func(b *testing.B) {
		i := 0
		for b.Loop() {
			lookup(benchKeys[i], 0)
			if i++; i == len(benchKeys) {
				i = 0
			}
		}
	})
	b.Run("clock+lookup", func(b *testing.B) {
		i := 0
		for b.Loop() {
			now, err := s.now()
			if err != nil {
				b.Fatal(err)
			}
			lookup(benchKeys[i], now)
			if i++; i == len(benchKeys) {
				i = 0
			}
		}
	})
	b.Run("Allow", func(b *testing.B) { allowInTurn(b, lim, benchKeys) })
}

// allowInTurn measures lim.Allow on keys, one after the other, each
// decision required to allow.
func allowInTurn(b *testing.B, lim *Limiter, keys []string) {
	ctx := context.Background()
	b.ReportAllocs()
	i := 0
	for b.Loop() {
		if d, err := lim.Allow(ctx, keys[i]); err != nil || !d.Allowed {
			b.Fatal(d, err)
		}
		if i++; i == len(keys) {
			i = 0
		}
	}
}

var sinkMicros int64

// BenchmarkClockRead: the MemoryStore's default clock (a wall reading
// extrapolated by the monotonic clock) against time.Now.
func BenchmarkClockRead(b *testing.B) {
	b.Run("time.Now", func(b *testing.B) {
		for b.Loop() {
			sinkMicros += time.Now().UnixMicro()
		}
	})
	b.Run("store", func(b *testing.B) {
		s := memStore()
		for b.Loop() {
			us, _ := s.now()
			sinkMicros += us
		}
	})
}
