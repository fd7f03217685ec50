package throttle

import (
	"context"
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/smoothrate/ratelimit/internal/testlong"
)

// TestRedisDifferential runs long random sequences through a MemoryStore
// and a RedisStore under the same clock and requires every field of every
// Decision to be equal: many keys, several limits sharing each key, time
// jumps forward and back, n from 0 to beyond the limit, Reset and AllowAll
// (with a key checked twice).
//
// Both stores forget a key's state once its writer's Decision said it is
// back to full (the MemoryStore reclaims it, Redis expires it by TTL), and
// Redis does so by its own clock, not the test's. So here the limits that
// share a key agree on when a state stops mattering (one period; for the
// token bucket, whose state is room rather than debt, one limit), and the
// clock never steps back behind a write or a forgotten state.
// TestRedisMatchesDefinition lifts both restrictions against a store that
// never forgets.
func TestRedisDifferential(t *testing.T) {
	f := redisFor(t)
	for _, alg := range allAlgorithms {
		for seed := range diffSeeds() {
			t.Run(fmt.Sprintf("%v/seed%d", alg, seed), func(t *testing.T) {
				clk := newSetClock()
				mem := memStore(WithStoreClock(clk))
				rs := fakeTimeStore(f.client, WithStoreClock(clk), WithKeyPrefix(fmt.Sprintf("diff%d:", redisPrefix.Add(1))))
				runDifferential(t, rand.New(rand.NewPCG(uint64(seed), uint64(alg))), alg, clk, mem, rs, false)
			})
		}
	}
}

// TestRedisMatchesDefinition is the differential test against refStore,
// which applies algorithms.go to a map and never forgets: limits of any
// periods share keys, and the clock steps back anywhere.
func TestRedisMatchesDefinition(t *testing.T) {
	f := redisFor(t)
	for _, alg := range allAlgorithms {
		for seed := range diffSeeds() {
			t.Run(fmt.Sprintf("%v/seed%d", alg, seed), func(t *testing.T) {
				clk := newSetClock()
				ref := &refStore{clock: clk, keys: map[cacheKey]*refEntry{}}
				rs := fakeTimeStore(f.client, WithStoreClock(clk), WithKeyPrefix(fmt.Sprintf("def%d:", redisPrefix.Add(1))))
				runDifferential(t, rand.New(rand.NewPCG(uint64(seed)+100, uint64(alg))), alg, clk, ref, rs, true)
			})
		}
	}
}

// diffSeeds is how many random sequences each algorithm of a differential
// test runs: 3 in scripts/test, 6 in scripts/test-more (testlong).
func diffSeeds() int {
	if testing.Short() {
		return 2
	}
	return testlong.Pick(3, 6)
}

// runDifferential runs one random sequence through a and b. With free,
// limits of any periods share keys and the clock steps back anywhere.
func runDifferential(t *testing.T, r *rand.Rand, alg Algorithm, clk *setClock, a, b Store, free bool) {
	ops := testlong.Pick(800, 1500)
	if testing.Short() {
		ops = 400
	}
	ctx := context.Background()
	// Several limits share each key, all with one period: a state expires
	// (TTL, reclaim) when its writer's limit says it is back to full,
	// which for a limit with a longer period can be before it stops
	// counting it; both stores then forget it, but Redis by its own clock,
	// so a fake clock cannot compare them there.
	limits := []Limit{randomLimit(r, alg)}
	for range 2 {
		l := randomLimit(r, alg)
		switch {
		case free:
		case alg == TokenBucket:
			l = limits[0]
		default:
			l.Period = limits[0].Period
		}
		limits = append(limits, l)
	}
	var la, lb []*Limiter
	var longest int64
	for _, l := range limits {
		la = append(la, mustNew(t, a, alg, l))
		lb = append(lb, mustNew(t, b, alg, l))
		longest = max(longest, int64(l.Period/time.Microsecond))
	}
	keys := []string{"a", "b", "c", "{x}d", "{x}e", "f", "g", "h"}
	start := clk.Now().UnixMicro()
	now, latest := start, start
	expiry := map[string]int64{} // key → when its last write said it is full again
	lastWrite := start
	// floor is the earliest time the clock may step back to.
	floor := func() int64 {
		if free {
			return start
		}
		f := lastWrite
		for _, e := range expiry {
			if e <= latest {
				f = max(f, e)
			}
		}
		return f
	}
	check := func(i int, what string, da, db Decision, ea, eb error) {
		t.Helper()
		if ea != nil || eb != nil {
			t.Fatalf("op %d %s: errors %v / %v", i, what, ea, eb)
		}
		if da != db {
			t.Fatalf("op %d at %d µs %s:\n memory %+v\n redis  %+v", i, now, what, da, db)
		}
	}
	wrote := func(key string, d Decision, n int) {
		if d.Allowed && n > 0 {
			expiry[key] = max(expiry[key], now+int64(d.ResetAfter/time.Microsecond))
			lastWrite = max(lastWrite, now)
		}
	}
	for i := range ops {
		switch x := r.IntN(40); {
		case x == 0:
			now += r.Int64N(4 * longest)
		case x < 4:
			now = max(floor(), now-r.Int64N(longest/2+1))
			if free && r.IntN(4) == 0 {
				now = max(start, now-r.Int64N(4*longest))
			}
		case x < 12:
			// same instant
		default:
			now += r.Int64N(longest/8 + 1)
		}
		latest = max(latest, now)
		clk.Set(time.UnixMicro(now))
		j := r.IntN(len(limits))
		key := keys[r.IntN(len(keys))]
		limit := la[j].Limit().Burst
		n := 1
		switch x := r.IntN(10); {
		case x == 0:
			n = 0
		case x < 3:
			n = r.IntN(limit + 3)
		}
		switch x := r.IntN(20); {
		case x == 0:
			ea, eb := la[j].Reset(ctx, key), lb[j].Reset(ctx, key)
			if ea != nil || eb != nil {
				t.Fatalf("op %d reset: %v / %v", i, ea, eb)
			}
			// Another limiter's write may have set a later expiry; a
			// reset key is absent in both stores, whatever the clock.
			delete(expiry, key)
		case x < 4:
			var ca, cb []Check
			for range 2 + r.IntN(5) { // past 4: AllowAll keeps up to 4 checks on the stack
				k := keys[r.IntN(len(keys))]
				if r.IntN(4) == 0 {
					k = key // the same key twice
				}
				m := r.IntN(3)
				j := r.IntN(len(limits))
				ca = append(ca, Check{Limiter: la[j], Key: k, N: m})
				cb = append(cb, Check{Limiter: lb[j], Key: k, N: m})
			}
			da, ea := AllowAll(ctx, ca...)
			db, eb := AllowAll(ctx, cb...)
			if ea != nil || eb != nil || len(da) != len(db) {
				t.Fatalf("op %d AllowAll: %v / %v", i, ea, eb)
			}
			for c := range da {
				check(i, fmt.Sprintf("AllowAll check %d %q n=%d", c, ca[c].Key, ca[c].N), da[c], db[c], nil, nil)
				if da.Allowed() {
					wrote(ca[c].Key, da[c], ca[c].N)
				}
			}
		default:
			da, ea := la[j].AllowN(ctx, key, n)
			db, eb := lb[j].AllowN(ctx, key, n)
			check(i, fmt.Sprintf("AllowN(%q, %d) under %v", key, n, limits[j]), da, db, ea, eb)
			wrote(key, da, n)
		}
	}
}

// refStore is the definition as a Store: algorithms.go over a map, with
// AllowAll as the MemoryStore does it, and no expiry.
type refStore struct {
	clock *setClock
	keys  map[cacheKey]*refEntry
}

type refEntry struct {
	st  state
	ok  bool
	log *ring
}

func (s *refStore) err() error { return nil }

func (s *refStore) entry(alg Algorithm, key string) refEntry {
	e := s.keys[cacheKey{alg, key}]
	if e == nil {
		return refEntry{log: &ring{}}
	}
	return refEntry{st: e.st, ok: e.ok, log: e.log.clone()}
}

// apply decides r against e and updates e if allowed.
func (e *refEntry) apply(r *request, now int64) Decision {
	if r.p.alg == SlidingLog {
		d, expired, at, write := decideSlidingLog(r.p, e.log, now, r.n)
		if write {
			e.log.drop(expired)
			e.log.push(at, int(r.n))
		}
		return d
	}
	d, next, write := decideState(r.p, e.st, e.ok, now, r.n)
	if write {
		e.st, e.ok = next, true
	}
	return d
}

func (s *refStore) decide(_ context.Context, r request) (Decision, error) {
	out := make([]Decision, 1)
	err := s.decideAll(context.Background(), []request{r}, out, true)
	return out[0], err
}

func (s *refStore) decideAll(_ context.Context, rs []request, out []Decision, commit bool) error {
	now, err := micros(s.clock.Now())
	if err != nil {
		return err
	}
	copies := map[cacheKey]*refEntry{}
	all := true
	for i := range rs {
		k := cacheKey{rs[i].p.alg, rs[i].key}
		if copies[k] == nil {
			e := s.entry(k.alg, k.key)
			copies[k] = &e
		}
		out[i] = copies[k].apply(&rs[i], now)
		all = all && out[i].Allowed
	}
	if all && commit {
		for k, e := range copies {
			s.keys[k] = e
		}
		return nil
	}
	for i := range rs {
		e := s.entry(rs[i].p.alg, rs[i].key)
		peek := e.apply(&request{p: rs[i].p, key: rs[i].key}, now)
		out[i].Remaining, out[i].ResetAfter = peek.Remaining, peek.ResetAfter
	}
	return nil
}

func (s *refStore) reset(_ context.Context, alg Algorithm, key string) error {
	delete(s.keys, cacheKey{alg, key})
	return nil
}

// FuzzRedisMatchesDefinition is TestRedisMatchesDefinition from fuzzed
// seeds: random limits sharing keys, the clock stepping anywhere, every
// field of every Decision of the Redis store against the definition.
//
//	go test ./throttle -run XXX -fuzz FuzzRedisMatchesDefinition -fuzztime 2m
func FuzzRedisMatchesDefinition(f *testing.F) {
	f.Add(uint64(1), uint8(0))
	f.Add(uint64(7), uint8(4))
	fx := redisFor(f)
	f.Fuzz(func(t *testing.T, seed uint64, a uint8) {
		alg := allAlgorithms[int(a)%len(allAlgorithms)]
		clk := newSetClock()
		ref := &refStore{clock: clk, keys: map[cacheKey]*refEntry{}}
		rs := fakeTimeStore(fx.client, WithStoreClock(clk), WithKeyPrefix(fmt.Sprintf("fuzz%d:", redisPrefix.Add(1))))
		runDifferential(t, rand.New(rand.NewPCG(seed, uint64(alg))), alg, clk, ref, rs, true)
	})
}
