package throttle

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/smoothrate/ratelimit"
)

// TestNewRejectsBadInput: New refuses each bad limit and algorithm with
// its sentinel, and Limit.Validate says the same without a store.
func TestNewRejectsBadInput(t *testing.T) {
	s := memStore()
	for _, c := range []struct {
		alg  Algorithm
		l    Limit
		want error
	}{
		{GCRA, Limit{Count: 0, Period: time.Second}, ErrInvalidLimit},
		{GCRA, Limit{Count: -1, Period: time.Second}, ErrInvalidLimit},
		{GCRA, Limit{Count: 1, Period: 0}, ErrInvalidLimit},
		{GCRA, Limit{Count: 1, Period: -time.Second}, ErrInvalidLimit},
		{GCRA, Limit{Count: 1, Period: 1500 * time.Nanosecond}, ErrInvalidLimit}, // not whole µs
		{GCRA, Limit{Count: 1, Period: time.Second, Burst: -1}, ErrInvalidLimit},
		{FixedWindow, Limit{Count: 5, Period: time.Second, Burst: 6}, ErrInvalidLimit},
		{SlidingWindow, Limit{Count: 5, Period: time.Second, Burst: 1}, ErrInvalidLimit},
		{SlidingLog, Limit{Count: MaxLogCount + 1, Period: time.Second}, ErrInvalidLimit},
		{0, PerSecond(1), ErrInvalidAlgorithm},
		{SlidingLog + 1, PerSecond(1), ErrInvalidAlgorithm},
	} {
		if _, err := New(s, c.alg, c.l); !errors.Is(err, c.want) {
			t.Errorf("New(%v, %+v) = %v, want %v", c.alg, c.l, err, c.want)
		}
		if err := c.l.Validate(c.alg); !errors.Is(err, c.want) {
			t.Errorf("%+v.Validate(%v) = %v, want %v", c.l, c.alg, err, c.want)
		}
	}
	if _, err := New(nil, GCRA, PerSecond(1)); !errors.Is(err, ErrNilStore) {
		t.Errorf("New(nil store) = %v", err)
	}
	t.Run("past 2^52", func(t *testing.T) {
		for _, l := range []Limit{
			{Count: bigInt(t, 1<<53), Period: time.Second},
			{Count: 3, Period: 1<<52 - 1, Burst: bigInt(t, 1<<40)}, // burst × emission past 2^52
			// burst × emission 2.4e15, past 2^51: a bucket the debt's cap
			// (maxDebt) would count as less than full, admitting more
			// than the burst at once.
			{Count: 999_983, Period: time.Minute, Burst: 40_000_000},
		} {
			if _, err := New(s, GCRA, l); !errors.Is(err, ErrInvalidLimit) {
				t.Errorf("New(GCRA, %+v) = %v, want ErrInvalidLimit", l, err)
			}
		}
	})
	for _, ok := range []struct {
		alg Algorithm
		l   Limit
	}{
		{SlidingLog, Limit{Count: MaxLogCount, Period: time.Hour}},
		{FixedWindow, Limit{Count: 5, Period: time.Second, Burst: 5}},
		{GCRA, Limit{Count: 7, Period: 3 * time.Microsecond, Burst: 100}},
	} {
		if _, err := New(s, ok.alg, ok.l); err != nil {
			t.Errorf("New(%v, %+v): %v", ok.alg, ok.l, err)
		}
		if err := ok.l.Validate(ok.alg); err != nil {
			t.Errorf("%+v.Validate(%v): %v", ok.l, ok.alg, err)
		}
	}
}

func TestLimiterRejectsBadCalls(t *testing.T) {
	ctx := context.Background()
	lim := mustNew(t, memStore(), GCRA, PerSecond(1))
	if _, err := lim.AllowN(ctx, "k", -1); !errors.Is(err, ErrInvalidCost) {
		t.Errorf("n = -1: %v", err)
	}
	if _, err := lim.Allow(ctx, ""); !errors.Is(err, ErrEmptyKey) {
		t.Errorf("empty key: %v", err)
	}
	if err := lim.Reset(ctx, ""); !errors.Is(err, ErrEmptyKey) {
		t.Errorf("Reset empty key: %v", err)
	}
	// The longest key is taken, one byte more is refused (by Allow,
	// AllowAll and Reset alike: the Redis store's check is the same code,
	// Limiter.request).
	long := strings.Repeat("k", MaxKeyLen)
	if d, err := lim.Allow(ctx, long); err != nil || !d.Allowed {
		t.Errorf("key of MaxKeyLen bytes: %+v, %v", d, err)
	}
	if d, err := lim.Allow(ctx, long+"k"); !errors.Is(err, ErrKeyTooLong) || d.Allowed {
		t.Errorf("key of MaxKeyLen+1 bytes: %+v, %v", d, err)
	}
	if _, err := AllowAll(ctx, Check{lim, "k", 1}, Check{lim, long + "k", 1}); !errors.Is(err, ErrKeyTooLong) {
		t.Errorf("AllowAll with a key of MaxKeyLen+1 bytes: %v", err)
	}
	if err := lim.Reset(ctx, long+"k"); !errors.Is(err, ErrKeyTooLong) {
		t.Errorf("Reset a key of MaxKeyLen+1 bytes: %v", err)
	}
	var zero Limiter
	if d, err := zero.Allow(ctx, "k"); !errors.Is(err, ErrNilStore) || d.Allowed {
		t.Errorf("zero Limiter: %+v, %v", d, err)
	}
	var nilLim *Limiter
	if err := nilLim.Reset(ctx, "k"); !errors.Is(err, ErrNilStore) {
		t.Errorf("nil Limiter Reset: %v", err)
	}
	// A rejected call changes nothing.
	if d := mustAllow(t, lim, "k", 0); d.Remaining != 1 {
		t.Errorf("after rejected calls: %+v", d)
	}
}

func TestAlgorithmNames(t *testing.T) {
	for _, alg := range allAlgorithms {
		got, err := ParseAlgorithm(alg.String())
		if err != nil || got != alg {
			t.Errorf("ParseAlgorithm(%q) = %v, %v", alg.String(), got, err)
		}
	}
	if _, err := ParseAlgorithm("gcra2"); !errors.Is(err, ErrInvalidAlgorithm) {
		t.Errorf("ParseAlgorithm(gcra2) = %v", err)
	}
	if s := Algorithm(9).String(); s != "Algorithm(9)" {
		t.Errorf("Algorithm(9).String() = %q", s)
	}
}

func TestLimitHelpers(t *testing.T) {
	for _, c := range []struct {
		l    Limit
		want string
	}{
		{PerSecond(10), "10/1s (burst 10)"},
		{PerMinute(5), "5/1m0s (burst 5)"},
		{PerHour(2), "2/1h0m0s (burst 2)"},
		{Limit{Count: 30, Period: time.Minute, Burst: 16}, "30/1m0s (burst 16)"},
	} {
		if got := c.l.String(); got != c.want {
			t.Errorf("%+v.String() = %q, want %q", c.l, got, c.want)
		}
	}
	lim := mustNew(t, memStore(), TokenBucket, PerMinute(5))
	if got := lim.Limit(); got != (Limit{Count: 5, Period: time.Minute, Burst: 5}) || lim.Algorithm() != TokenBucket {
		t.Errorf("Limit() = %+v, Algorithm() = %v", got, lim.Algorithm())
	}
}

// TestNilContext: a nil context is an error on every store, not a panic
// (the Redis client would dereference it), and changes nothing.
func TestNilContext(t *testing.T) {
	forEachStore(t, func(t *testing.T, newStore func(clk ratelimit.Clock) Store) {
		lim := mustNew(t, newStore(newSetClock()), GCRA, PerSecond(1))
		//lint:ignore SA1012 testing the nil check
		if d, err := lim.Allow(nil, "k"); !errors.Is(err, ErrNilContext) || d.Allowed { //nolint:staticcheck
			t.Errorf("Allow(nil): %+v, %v", d, err)
		}
		//lint:ignore SA1012 testing the nil check
		if _, err := AllowAll(nil, Check{lim, "k", 1}); !errors.Is(err, ErrNilContext) { //nolint:staticcheck
			t.Errorf("AllowAll(nil): %v", err)
		}
		//lint:ignore SA1012 testing the nil check
		if err := lim.Reset(nil, "k"); !errors.Is(err, ErrNilContext) { //nolint:staticcheck
			t.Errorf("Reset(nil): %v", err)
		}
		if d := mustAllow(t, lim, "k", 0); d.Remaining != 1 {
			t.Errorf("after rejected calls: %+v", d)
		}
	})
}

// TestLargestBurstHeld: at the largest burst a meter takes (burst ×
// emission just below 2^51 units, the debt it counts at most), a full
// burst at one instant is allowed and the next request refused, on both
// stores.
func TestLargestBurstHeld(t *testing.T) {
	l := Limit{Count: 999_983, Period: time.Minute}
	p, err := newParams(GCRA, Limit{Count: l.Count, Period: l.Period, Burst: 1})
	if err != nil {
		t.Fatal(err)
	}
	l.Burst = int(maxDebt / p.emission)
	forEachStore(t, func(t *testing.T, newStore func(clk ratelimit.Clock) Store) {
		for _, alg := range []Algorithm{GCRA, TokenBucket, LeakyBucket} {
			t.Run(alg.String(), func(t *testing.T) {
				lim := mustNew(t, newStore(newSetClock()), alg, l)
				if d := mustAllow(t, lim, "k", l.Burst); !d.Allowed || d.Remaining != 0 {
					t.Fatalf("the whole burst: %+v", d)
				}
				if d := mustAllow(t, lim, "k", 1); d.Allowed {
					t.Errorf("one more at the same instant: %+v", d)
				}
			})
		}
	})
}
