package throttle

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"testing"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"

	"github.com/smoothrate/ratelimit/internal/testlong"
)

// miniredisFor starts an in-process miniredis driven by clk: its TIME
// (which the scripts read without WithClock) follows SetTime, and with
// ClockTTL its TTLs run on the same time, so keys expire when clk says,
// not when the wall clock does.
func miniredisFor(t testing.TB) (*miniredis.Miniredis, *redis.Client) {
	t.Helper()
	mr := miniredis.RunT(t)
	mr.ClockTTL(true)
	c := redis.NewClient(&redis.Options{Addr: mr.Addr(), MaxRetries: -1})
	t.Cleanup(func() { _ = c.Close() })
	return mr, c
}

// miniStore is a RedisStore on miniredis that moves miniredis's clock to
// the test's before every call: the way a user drives miniredis's TIME
// (SetTime; ClockTTL for the TTLs) from the fake clock their other code
// reads.
type miniStore struct {
	*RedisStore
	mr  *miniredis.Miniredis
	clk *setClock
}

func (s *miniStore) sync() { s.mr.SetTime(s.clk.Now()) }

func (s *miniStore) decide(ctx context.Context, r request) (Decision, error) {
	s.sync()
	return s.RedisStore.decide(ctx, r)
}

func (s *miniStore) decideAll(ctx context.Context, rs []request, out []Decision, commit bool) error {
	s.sync()
	return s.RedisStore.decideAll(ctx, rs, out, commit)
}

func (s *miniStore) reset(ctx context.Context, alg Algorithm, key string) error {
	s.sync()
	return s.RedisStore.reset(ctx, alg, key)
}

// TestMiniredisMatchesMemory: on miniredis, which has no Lua struct
// library (the scripts use redisscript's pure-Lua packing there), every
// algorithm decides exactly as the MemoryStore under one fake clock, with
// the scripts reading miniredis's TIME and its TTLs expiring keys by the
// same clock: the differential test of TestRedisDifferential.
func TestMiniredisMatchesMemory(t *testing.T) {
	for _, alg := range allAlgorithms {
		// miniredis runs in the test's process, under the race detector:
		// one sequence per algorithm in scripts/test, two in test-more.
		for seed := range testlong.Pick(1, 2) {
			t.Run(fmt.Sprintf("%v/seed%d", alg, seed), func(t *testing.T) {
				mr, c := miniredisFor(t)
				clk := newSetClock()
				mr.SetTime(clk.Now())
				mem := memStore(WithStoreClock(clk))
				ms := &miniStore{RedisStore: redisStore(c), mr: mr, clk: clk}
				runDifferential(t, rand.New(rand.NewPCG(uint64(seed)+200, uint64(alg))), alg, clk, mem, ms, false)
			})
		}
	}
}

// TestMiniredisMatchesDefinition is TestRedisMatchesDefinition on
// miniredis, with the time passed in (WithClock) and keys that outlive the
// test (fakeTimeStore): limits of any periods share keys and the clock
// steps back anywhere.
func TestMiniredisMatchesDefinition(t *testing.T) {
	for _, alg := range allAlgorithms {
		t.Run(alg.String(), func(t *testing.T) {
			_, c := miniredisFor(t)
			clk := newSetClock()
			ref := &refStore{clock: clk, keys: map[cacheKey]*refEntry{}}
			rs := fakeTimeStore(c, WithStoreClock(clk))
			runDifferential(t, rand.New(rand.NewPCG(300, uint64(alg))), alg, clk, ref, rs, true)
		})
	}
}

// TestMiniredisErrors: on miniredis too, a key of another type is a
// misconfiguration and a server that says it is loading is an outage.
func TestMiniredisErrors(t *testing.T) {
	mr, c := miniredisFor(t)
	ctx := context.Background()
	for _, alg := range allAlgorithms {
		lim := mustNew(t, redisStore(c), alg, PerMinute(5))
		mr.Set(DefaultKeyPrefix+algTags[alg]+":str", "not a state")
		_, err := lim.Allow(ctx, "str")
		if !errors.Is(err, ErrWrongType) || !errors.Is(err, ErrMisconfigured) || errors.Is(err, ErrUnavailable) {
			t.Errorf("%v on a string: %v, want ErrWrongType and ErrMisconfigured", alg, err)
		}
		mr.SetError("LOADING Redis is loading the dataset in memory")
		_, err = lim.Allow(ctx, "k")
		mr.SetError("")
		if !errors.Is(err, ErrUnavailable) || errors.Is(err, ErrMisconfigured) {
			t.Errorf("%v while loading: %v, want ErrUnavailable", alg, err)
		}
		if d, err := lim.Allow(ctx, "k"); err != nil || !d.Allowed {
			t.Errorf("%v after loading: %+v, %v", alg, d, err)
		}
	}
}
