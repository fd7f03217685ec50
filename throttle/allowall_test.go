package throttle

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/smoothrate/ratelimit"
)

func TestAllowAllAllOrNothing(t *testing.T) {
	ctx := context.Background()
	forEachStore(t, func(t *testing.T, newStore func(clk ratelimit.Clock) Store) {
		s := newStore(newSetClock())
		for _, alg := range allAlgorithms {
			ip := mustNew(t, s, alg, PerMinute(3))
			route := mustNew(t, s, alg, PerMinute(1))
			ds, err := AllowAll(ctx, Check{ip, "{1.2.3.4}:ip", 1}, Check{route, "{1.2.3.4}:route", 1})
			if err != nil || !ds.Allowed() {
				t.Fatalf("%v: first AllowAll = %+v, %v", alg, ds, err)
			}
			// The route is exhausted: nothing is counted, and each decision
			// describes its check alone.
			ds, err = AllowAll(ctx, Check{ip, "{1.2.3.4}:ip", 1}, Check{route, "{1.2.3.4}:route", 1})
			if err != nil || ds.Allowed() || !ds[0].Allowed || ds[1].Allowed || ds[0].Remaining != 2 {
				t.Fatalf("%v: second AllowAll = %+v, %v; want ip alone allowed with 2 remaining, route refused", alg, ds, err)
			}
			if got := ds.Strictest(); got != ds[1] {
				t.Errorf("%v: Strictest = %+v, want the route's refusal", alg, got)
			}
			if d := mustAllow(t, ip, "{1.2.3.4}:ip", 0); d.Remaining != 2 {
				t.Errorf("%v: the refused AllowAll counted the ip: %+v", alg, d)
			}
		}
	})
}

// TestAllowAllSameKeyTwice: two checks of one key count against each
// other, as two calls in a row would.
func TestAllowAllSameKeyTwice(t *testing.T) {
	ctx := context.Background()
	forEachStore(t, func(t *testing.T, newStore func(clk ratelimit.Clock) Store) {
		s := newStore(newSetClock())
		for _, alg := range allAlgorithms {
			one := mustNew(t, s, alg, PerHour(1))
			ds, err := AllowAll(ctx, Check{one, "k", 1}, Check{one, "k", 1})
			if err != nil {
				t.Fatal(err)
			}
			if ds.Allowed() {
				t.Fatalf("%v: two requests of a 1-per-hour key allowed in one AllowAll: %+v", alg, ds)
			}
			if !ds[0].Allowed || ds[1].Allowed || ds[0].Remaining != 1 {
				t.Errorf("%v: want the first check fitted and the second refused: %+v", alg, ds)
			}
			if d := mustAllow(t, one, "k", 1); !d.Allowed {
				t.Errorf("%v: the refused AllowAll counted something: %+v", alg, d)
			}

			two := mustNew(t, s, alg, PerHour(2))
			ds, err = AllowAll(ctx, Check{two, "j", 1}, Check{two, "j", 1})
			if err != nil || !ds.Allowed() || ds[0].Remaining != 1 || ds[1].Remaining != 0 {
				t.Fatalf("%v: two of a 2-per-hour key = %+v, %v; want both allowed, remaining 1 then 0", alg, ds, err)
			}
			if d := mustAllow(t, two, "j", 1); d.Allowed {
				t.Errorf("%v: the AllowAll counted less than 2: %+v", alg, d)
			}
		}
	})
}

func TestAllowAllErrors(t *testing.T) {
	ctx := context.Background()
	a := mustNew(t, memStore(), GCRA, PerSecond(1))
	b := mustNew(t, memStore(), GCRA, PerSecond(1))
	if _, err := AllowAll(ctx, Check{a, "k", 1}, Check{b, "k", 1}); !errors.Is(err, ErrMixedStores) {
		t.Errorf("mixed stores: %v", err)
	}
	if _, err := AllowAll(ctx, Check{a, "k", 1}, Check{a, "", 1}); !errors.Is(err, ErrEmptyKey) {
		t.Errorf("empty key: %v", err)
	}
	if _, err := AllowAll(ctx, Check{a, "k", -1}); !errors.Is(err, ErrInvalidCost) {
		t.Errorf("negative n: %v", err)
	}
	if ds, err := AllowAll(ctx); ds != nil || err != nil {
		t.Errorf("no checks: %v, %v", ds, err)
	}
}

// TestAllowAllConcurrentNoDeadlock runs AllowAll over the same keys in
// opposite orders from several goroutines (shards are locked in one fixed
// order, so this must finish), and checks that each key admitted exactly
// its limit in total.
func TestAllowAllConcurrentNoDeadlock(t *testing.T) {
	ctx := context.Background()
	s := memStore(WithStoreClock(newSetClock()))
	lim := mustNew(t, s, SlidingLog, PerHour(50))
	keys := make([]string, 8)
	for i := range keys {
		keys[i] = fmt.Sprint("key", i)
	}
	var wg sync.WaitGroup
	for g := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range 100 {
				a, b := keys[(g+i)%8], keys[(g+i+3)%8]
				if g%2 == 1 {
					a, b = b, a
				}
				if _, err := AllowAll(ctx, Check{lim, a, 1}, Check{lim, b, 1}); err != nil {
					t.Error(err)
					return
				}
			}
		}()
	}
	wg.Wait()
	for _, k := range keys {
		if d := mustAllow(t, lim, k, 0); d.Remaining < 0 || d.Remaining > 50 {
			t.Errorf("%s: remaining %d outside [0, 50]", k, d.Remaining)
		}
	}
	total := 0
	for _, k := range keys {
		total += 50 - mustAllow(t, lim, k, 0).Remaining
	}
	if total%2 != 0 || total > 8*50 {
		t.Errorf("%d units counted: AllowAll counts pairs, within 8 keys × 50", total)
	}
}

// TestAllowAllAllocatesOnlyItsAnswer: with a MemoryStore, AllowAll of a
// few checks on existing keys allocates the Decisions it returns and
// nothing else (its bookkeeping, up to four checks, lives on the stack;
// it made four allocations before). The sliding log is left out: its
// checks copy the key's log.
func TestAllowAllAllocatesOnlyItsAnswer(t *testing.T) {
	clk := newSetClock()
	s := memStore(WithStoreClock(clk))
	ctx := context.Background()
	ip := mustNew(t, s, GCRA, PerSecond(1_000_000))
	route := mustNew(t, s, FixedWindow, PerSecond(1_000_000))
	user := mustNew(t, s, TokenBucket, PerSecond(1_000_000))
	for _, checks := range [][]Check{
		{{ip, "1.2.3.4", 1}, {route, "/x", 1}},
		{{ip, "1.2.3.4", 1}, {route, "/x", 1}, {user, "u", 1}, {ip, "1.2.3.4", 1}},
	} {
		if _, err := AllowAll(ctx, checks...); err != nil {
			t.Fatal(err)
		}
		allocs := testing.AllocsPerRun(1000, func() {
			clk.Add(time.Microsecond)
			if ds, err := AllowAll(ctx, checks...); err != nil || !ds.Allowed() {
				t.Fatal(ds, err)
			}
		})
		if allocs != 1 {
			t.Errorf("%d checks: %v allocations per AllowAll, want 1 (the Decisions)", len(checks), allocs)
		}
	}
}
