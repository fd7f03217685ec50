package ratelimit_test

// Edge cases of Guava's RateLimiter (the corners of its arithmetic and its
// issue tracker: zero and infinite rates, a warm-up of 0, huge requests,
// clocks that step back) and this port's argument checks, through the
// public API. Where the project
// deliberately differs from Guava 31.1 the test checks this project's
// behaviour and a comment names Guava's. White-box versions of the numeric
// cases are in smooth/engine_test.go.

import (
	"context"
	"errors"
	"math"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"

	"github.com/smoothrate/ratelimit"
	"github.com/smoothrate/ratelimit/clocktest"
)

// ecLimiter builds a limiter on a fresh Fake clock in the given mode.
func ecLimiter(t *testing.T, tick time.Duration, warmup time.Duration, rate float64, opts ...ratelimit.Option) (*ratelimit.Limiter, *clocktest.Fake) {
	t.Helper()
	f := clocktest.NewFake()
	opts = append([]ratelimit.Option{ratelimit.WithClock(f), ratelimit.WithResolution(tick)}, opts...)
	var l *ratelimit.Limiter
	var err error
	if warmup < 0 {
		l, err = ratelimit.NewBursty(rate, opts...)
	} else {
		l, err = ratelimit.NewWarmingUp(rate, warmup, opts...)
	}
	if err != nil {
		t.Fatal(err)
	}
	return l, f
}

const ecBursty = -1 // warmup argument of ecLimiter for a bursty limiter

func ecAcquire(t *testing.T, l *ratelimit.Limiter, n int) time.Duration {
	t.Helper()
	d, err := l.Acquire(context.Background(), n)
	if err != nil {
		t.Fatalf("Acquire(%d): %v", n, err)
	}
	return d
}

func ecEvents(t *testing.T, f *clocktest.Fake, want string) {
	t.Helper()
	if got := f.TakeEvents(); got != want {
		t.Fatalf("events\ngot  %s\nwant %s", got, want)
	}
}

// TestEdgeConstructorValidation covers every argument check of NewBursty,
// NewWarmingUp and the options: each failure returns a nil limiter and an
// error that wraps the right sentinel and names the offending value.
func TestEdgeConstructorValidation(t *testing.T) {
	negZero := math.Copysign(0, -1)
	bad := func(rate float64) []float64 {
		return []float64{0, negZero, -1, -math.SmallestNonzeroFloat64, math.Inf(-1), math.NaN(), rate}
	}
	type tc struct {
		name   string
		make   func() (*ratelimit.Limiter, error)
		want   error
		detail string // must appear in the message
	}
	var cases []tc
	// NaN, 0, -0.0, negatives and -Inf are not rates (Guava: IAE "rate
	// must be positive"); +Inf, MaxFloat64 and MinValue are.
	for _, r := range bad(-1e300) {
		cases = append(cases,
			tc{"bursty rate", func() (*ratelimit.Limiter, error) { return ratelimit.NewBursty(r) }, ratelimit.ErrInvalidRate, ""},
			tc{"warmingup rate", func() (*ratelimit.Limiter, error) { return ratelimit.NewWarmingUp(r, time.Second) }, ratelimit.ErrInvalidRate, ""},
		)
	}
	cases = append(cases,
		tc{"rate NaN named", func() (*ratelimit.Limiter, error) { return ratelimit.NewBursty(math.NaN()) }, ratelimit.ErrInvalidRate, "NaN"},
		// Guava: IAE "warmupPeriod must not be negative: -1".
		tc{"warmup -1ns", func() (*ratelimit.Limiter, error) { return ratelimit.NewWarmingUp(1, -1) }, ratelimit.ErrInvalidWarmup, "-1ns"},
		tc{"warmup min", func() (*ratelimit.Limiter, error) { return ratelimit.NewWarmingUp(1, math.MinInt64) }, ratelimit.ErrInvalidWarmup, ""},
		// Guava's package-private factory accepts any cold factor
		// (below 1 the slope is negative and stored permits are cheaper
		// than fresh ones); here it must be finite and >= 1.
		tc{"cold 0.999", func() (*ratelimit.Limiter, error) {
			return ratelimit.NewWarmingUp(1, time.Second, ratelimit.WithColdFactor(0.999))
		}, ratelimit.ErrInvalidColdFactor, "0.999"},
		tc{"cold 0", func() (*ratelimit.Limiter, error) {
			return ratelimit.NewWarmingUp(1, time.Second, ratelimit.WithColdFactor(0))
		}, ratelimit.ErrInvalidColdFactor, ""},
		tc{"cold -3", func() (*ratelimit.Limiter, error) {
			return ratelimit.NewWarmingUp(1, time.Second, ratelimit.WithColdFactor(-3))
		}, ratelimit.ErrInvalidColdFactor, ""},
		tc{"cold NaN", func() (*ratelimit.Limiter, error) {
			return ratelimit.NewWarmingUp(1, time.Second, ratelimit.WithColdFactor(math.NaN()))
		}, ratelimit.ErrInvalidColdFactor, ""},
		tc{"cold +Inf", func() (*ratelimit.Limiter, error) {
			return ratelimit.NewWarmingUp(1, time.Second, ratelimit.WithColdFactor(math.Inf(1)))
		}, ratelimit.ErrInvalidColdFactor, ""},
		// Guava's package-private SmoothBursty takes any
		// maxBurstSeconds (+Inf: an unbounded bucket that survives every
		// setRate); here it must be finite and >= 0.
		tc{"burst -1", func() (*ratelimit.Limiter, error) {
			return ratelimit.NewBursty(1, ratelimit.WithMaxBurstSeconds(-1))
		}, ratelimit.ErrInvalidBurst, "-1"},
		tc{"burst -tiny", func() (*ratelimit.Limiter, error) {
			return ratelimit.NewBursty(1, ratelimit.WithMaxBurstSeconds(-math.SmallestNonzeroFloat64))
		}, ratelimit.ErrInvalidBurst, ""},
		tc{"burst +Inf", func() (*ratelimit.Limiter, error) {
			return ratelimit.NewBursty(1, ratelimit.WithMaxBurstSeconds(math.Inf(1)))
		}, ratelimit.ErrInvalidBurst, ""},
		tc{"burst NaN", func() (*ratelimit.Limiter, error) {
			return ratelimit.NewBursty(1, ratelimit.WithMaxBurstSeconds(math.NaN()))
		}, ratelimit.ErrInvalidBurst, ""},
		// Options that do not apply to the kind.
		tc{"cold on bursty", func() (*ratelimit.Limiter, error) {
			return ratelimit.NewBursty(1, ratelimit.WithColdFactor(3))
		}, ratelimit.ErrInvalidOption, ""},
		tc{"burst on warmingup", func() (*ratelimit.Limiter, error) {
			return ratelimit.NewWarmingUp(1, time.Second, ratelimit.WithMaxBurstSeconds(1))
		}, ratelimit.ErrInvalidOption, ""},
		tc{"full on warmingup", func() (*ratelimit.Limiter, error) {
			return ratelimit.NewWarmingUp(1, time.Second, ratelimit.WithInitiallyFull())
		}, ratelimit.ErrInvalidOption, ""},
		// testNulls: the only reference argument is the clock.
		tc{"nil clock bursty", func() (*ratelimit.Limiter, error) {
			return ratelimit.NewBursty(1, ratelimit.WithResolution(time.Microsecond), ratelimit.WithClock(nil))
		}, ratelimit.ErrInvalidClock, ""},
		tc{"nil clock warmingup", func() (*ratelimit.Limiter, error) {
			return ratelimit.NewWarmingUp(1, time.Second, ratelimit.WithClock(nil), ratelimit.WithColdFactor(2))
		}, ratelimit.ErrInvalidClock, ""},
		// The module's one option convention: a nil option is an error,
		// and a bad value matches ErrInvalidOption as well as its own
		// sentinel.
		tc{"nil option", func() (*ratelimit.Limiter, error) {
			return ratelimit.NewBursty(1, nil)
		}, ratelimit.ErrInvalidOption, "nil option"},
		tc{"bad value is an invalid option", func() (*ratelimit.Limiter, error) {
			return ratelimit.NewBursty(1, ratelimit.WithMaxBurstSeconds(-1))
		}, ratelimit.ErrInvalidOption, "max burst seconds"},
	)
	for _, d := range []time.Duration{0, -time.Nanosecond, 2 * time.Nanosecond, time.Millisecond, time.Second, 999 * time.Nanosecond} {
		cases = append(cases,
			tc{"resolution bursty", func() (*ratelimit.Limiter, error) {
				return ratelimit.NewBursty(1, ratelimit.WithResolution(d))
			}, ratelimit.ErrInvalidResolution, ""},
			tc{"resolution warmingup", func() (*ratelimit.Limiter, error) {
				return ratelimit.NewWarmingUp(1, time.Second, ratelimit.WithResolution(d))
			}, ratelimit.ErrInvalidResolution, ""})
	}
	for i, c := range cases {
		l, err := c.make()
		if assert.ErrorIs(t, err, c.want, "%d %s", i, c.name) {
			assert.Nil(t, l, "%d %s: a limiter came back with the error", i, c.name)
			assert.ErrorContains(t, err, c.detail, "%d %s", i, c.name)
		}
	}

	// The boundaries that are accepted.
	ok := []func() (*ratelimit.Limiter, error){
		func() (*ratelimit.Limiter, error) { return ratelimit.NewBursty(math.Inf(1)) },
		func() (*ratelimit.Limiter, error) { return ratelimit.NewBursty(math.MaxFloat64) },
		func() (*ratelimit.Limiter, error) { return ratelimit.NewBursty(math.SmallestNonzeroFloat64) },
		func() (*ratelimit.Limiter, error) { return ratelimit.NewBursty(1, ratelimit.WithMaxBurstSeconds(0)) },
		func() (*ratelimit.Limiter, error) { return ratelimit.NewBursty(1, ratelimit.WithInitiallyFull()) },
		func() (*ratelimit.Limiter, error) { return ratelimit.NewWarmingUp(1, 0) },
		func() (*ratelimit.Limiter, error) { return ratelimit.NewWarmingUp(math.Inf(1), time.Second) },
		func() (*ratelimit.Limiter, error) {
			return ratelimit.NewWarmingUp(1, time.Second, ratelimit.WithColdFactor(1))
		},
		func() (*ratelimit.Limiter, error) {
			return ratelimit.NewWarmingUp(1, math.MaxInt64, ratelimit.WithResolution(time.Microsecond))
		},
	}
	for i, f := range ok {
		l, err := f()
		assert.NoError(t, err, "accepted case %d", i)
		assert.NotNil(t, l, "accepted case %d", i)
	}
}

// ecSame compares snapshots bit for bit (NaN stored permits occur).
func ecSame(a, b ratelimit.Snapshot) bool { return gvSameSnapshot(a, b) }

// TestEdgeRejectedCallsChangeNothing: every rejected Acquire, TryAcquire,
// SetRate and Reserve leaves the limiter exactly as it was (Snapshot) and
// does not touch the clock. The limiters are in an interesting state first:
// in debt, with stored permits (warming-up) or not (bursty).
func TestEdgeRejectedCallsChangeNothing(t *testing.T) {
	for _, tick := range []time.Duration{time.Microsecond, time.Nanosecond} {
		for _, warmup := range []time.Duration{ecBursty, 4 * time.Second} {
			l, f := ecLimiter(t, tick, warmup, 2)
			ecAcquire(t, l, 3)
			f.Advance(100 * time.Millisecond)
			ecAcquire(t, l, 1)
			f.ClearEvents()
			ctx := context.Background()
			canceled, cancel := context.WithCancel(ctx)
			cancel()

			rejected := map[string]func() error{
				"Acquire(0)":  func() error { _, err := l.Acquire(ctx, 0); return ecWant(err, ratelimit.ErrInvalidPermits) },
				"Acquire(-1)": func() error { _, err := l.Acquire(ctx, -1); return ecWant(err, ratelimit.ErrInvalidPermits) },
				"Acquire(MinInt)": func() error {
					_, err := l.Acquire(ctx, math.MinInt)
					return ecWant(err, ratelimit.ErrInvalidPermits)
				},
				"Acquire(canceled ctx)": func() error { _, err := l.Acquire(canceled, 1); return ecWant(err, context.Canceled) },
				"TryAcquire(0, 1h)":     func() error { return ecFalse(l.TryAcquire(0, time.Hour)) },
				"TryAcquire(-1, 1h)":    func() error { return ecFalse(l.TryAcquire(-1, time.Hour)) },
				"TryAcquire in debt":    func() error { return ecFalse(l.TryAcquire(1, 0)) },
				"TryAcquire(1, -1h)":    func() error { return ecFalse(l.TryAcquire(1, -time.Hour)) },
				"TryAcquire(1, MinDur)": func() error { return ecFalse(l.TryAcquire(1, math.MinInt64)) },
				"SetRate(0)":            func() error { return ecWant(l.SetRate(0), ratelimit.ErrInvalidRate) },
				"SetRate(-0)":           func() error { return ecWant(l.SetRate(math.Copysign(0, -1)), ratelimit.ErrInvalidRate) },
				"SetRate(-10)":          func() error { return ecWant(l.SetRate(-10), ratelimit.ErrInvalidRate) },
				"SetRate(NaN)":          func() error { return ecWant(l.SetRate(math.NaN()), ratelimit.ErrInvalidRate) },
				"SetRate(-Inf)":         func() error { return ecWant(l.SetRate(math.Inf(-1)), ratelimit.ErrInvalidRate) },
				"Reserve(0)":            func() error { return ecBadReservation(l.Reserve(0)) },
				"Reserve(-5)":           func() error { return ecBadReservation(l.Reserve(-5)) },
			}
			for name, call := range rejected {
				before := l.Snapshot()
				if err := call(); err != nil {
					t.Fatalf("tick %v warmup %v: %s: %v", tick, warmup, name, err)
				}
				if after := l.Snapshot(); !ecSame(before, after) {
					t.Fatalf("tick %v warmup %v: %s changed the state:\nbefore %+v\nafter  %+v", tick, warmup, name, before, after)
				}
				if ev := f.Events(); len(ev) != 0 {
					t.Fatalf("tick %v warmup %v: %s touched the clock: %v", tick, warmup, name, ev)
				}
			}
			if l.Rate() != 2 {
				t.Fatalf("rate %v after rejected SetRates", l.Rate())
			}
		}
	}
}

func ecWant(err, want error) error {
	if !errors.Is(err, want) {
		return errors.New("got error " + errString(err) + ", want " + want.Error())
	}
	return nil
}

func errString(err error) string {
	if err == nil {
		return "nil"
	}
	return err.Error()
}

func ecFalse(ok bool) error {
	if ok {
		return errors.New("granted")
	}
	return nil
}

func ecBadReservation(r ratelimit.Reservation) error {
	if r.OK() || r.Delay() != 0 || r.Cancel() {
		return errors.New("an invalid reservation looks valid")
	}
	return nil
}

// TestEdgeAcquireContextRejections uses the default clock inside a synctest
// bubble, where context deadlines and the limiter share the same fake time:
// an Acquire whose wait cannot meet its deadline fails at once and books
// nothing, and one cancelled during its sleep gives its reservation
// back.
func TestEdgeAcquireContextRejections(t *testing.T) {
	for _, tick := range []time.Duration{time.Microsecond, time.Nanosecond} {
		synctest.Test(t, func(t *testing.T) {
			l, err := ratelimit.NewBursty(1, ratelimit.WithResolution(tick))
			if err != nil {
				t.Fatal(err)
			}
			if d, err := l.Acquire(context.Background(), 100); err != nil || d != 0 {
				t.Fatalf("first Acquire: %v %v", d, err)
			}
			before := l.Snapshot() // 100 s of debt
			ctx, cancel := context.WithTimeout(context.Background(), 99*time.Second)
			defer cancel()
			start := time.Now()
			d, err := l.Acquire(ctx, 1)
			if !errors.Is(err, context.DeadlineExceeded) || d != 0 {
				t.Fatalf("Acquire with a short deadline: %v, %v", d, err)
			}
			if time.Since(start) != 0 {
				t.Fatalf("it slept %v before failing", time.Since(start))
			}
			if after := l.Snapshot(); !ecSame(before, after) {
				t.Fatalf("deadline rejection changed the state:\n%+v\n%+v", before, after)
			}

			// Cancelled while sleeping: the reservation is given back.
			ctx2, cancel2 := context.WithCancel(context.Background())
			done := make(chan error)
			go func() {
				_, err := l.Acquire(ctx2, 5)
				done <- err
			}()
			synctest.Wait() // asleep on its timer, reservation booked
			if l.Snapshot().NextFree != 105*time.Second {
				t.Fatalf("booked: %+v", l.Snapshot())
			}
			cancel2()
			if err := <-done; !errors.Is(err, context.Canceled) {
				t.Fatalf("cancelled Acquire: %v", err)
			}
			if after := l.Snapshot(); !ecSame(before, after) {
				t.Fatalf("a cancelled Acquire left its booking:\n%+v\n%+v", before, after)
			}
		})
	}
}

// A warm-up of 0 (and, in Guava mode, anything below
// 1 µs, which truncates to 0) is a warm limiter at the stable rate that
// stores nothing. Guava 31.1 computes coolDown = 0/0 = NaN and after the
// first idle moment stops limiting altogether: R0.00 R1.00 R1.00, idle,
// then R0.00 R0.00 R0.00 R0.00 (Guava issues 2730, 6475).
func TestEdgeZeroWarmupStillLimits(t *testing.T) {
	const want = "[R0.00, R1.00, R1.00, U10.00, R0.00, R1.00, R1.00, R1.00]"
	for _, tick := range []time.Duration{time.Microsecond, time.Nanosecond} {
		for _, warmup := range []time.Duration{0, time.Nanosecond, 999 * time.Nanosecond} {
			for _, cold := range []float64{3, 1} { // Cold factor 1 (Guava's slope 0/0)
				l, f := ecLimiter(t, tick, warmup, 1, ratelimit.WithColdFactor(cold))
				for range 3 {
					ecAcquire(t, l, 1)
				}
				f.Advance(10 * time.Second)
				if s := l.Snapshot(); warmup < tick && (s.StoredPermits != 0 || s.MaxPermits != 0) {
					t.Fatalf("tick %v warmup %v: stores %v of %v permits", tick, warmup, s.StoredPermits, s.MaxPermits)
				}
				for range 4 {
					ecAcquire(t, l, 1)
				}
				if got := f.TakeEvents(); got != want {
					t.Fatalf("tick %v warmup %v cold %v:\ngot  %s\nwant %s", tick, warmup, cold, got, want)
				}
			}
		}
	}
}

// 1 qps, acquire(Integer.MAX_VALUE) books 2147483647 s; tryAcquire
// succeeds exactly when the timeout reaches it (<=) and then sleeps that
// long.
func TestEdgeTryAcquireHugeDebt(t *testing.T) {
	for _, tick := range []time.Duration{time.Microsecond, time.Nanosecond} {
		l, f := ecLimiter(t, tick, ecBursty, 1)
		ecAcquire(t, l, math.MaxInt32)
		debt := 2147483647 * time.Second
		if l.TryAcquire(1, debt-tick) {
			t.Fatalf("tick %v: a timeout one tick short was granted", tick)
		}
		if !l.TryAcquire(1, debt) {
			t.Fatalf("tick %v: the exact timeout was refused", tick)
		}
		ecEvents(t, f, "[R0.00, R2147483647.00]")
	}
}

// 1e-10 qps: acquire(Integer.MAX_VALUE) saturates the next free ticket
// at the end of time; nothing is granted after it, whatever the timeout.
func TestEdgeSaturatedDebt(t *testing.T) {
	for _, tick := range []time.Duration{time.Microsecond, time.Nanosecond} {
		l, f := ecLimiter(t, tick, ecBursty, 1e-10)
		ecAcquire(t, l, math.MaxInt32)
		f.Advance(1000 * time.Hour)
		if l.TryAcquire(1, 0) || l.TryAcquire(1, 100000*time.Hour) {
			t.Fatalf("tick %v: granted after a saturated booking", tick)
		}
		if nf := l.Snapshot().NextFree; nf < 290*365*24*time.Hour {
			t.Fatalf("tick %v: next free in %v, want about the largest Duration", tick, nf)
		}
	}
}

// The deadline check must not overflow when the deadline and the clock's
// reading are both far from the limiter's origin on opposite sides: a
// deadline 290 years ahead with the clock stepped back an hour before the
// origin is still a deadline the 1 h wait can meet, and one 290 years behind
// with the clock an hour ahead can never be met. Computed as
// (deadline − origin) − elapsed, the first overflowed to a negative time
// left (a spurious DeadlineExceeded) and the second to a huge one.
func TestEdgeAcquireDeadlineFarFromOrigin(t *testing.T) {
	for _, tick := range []time.Duration{time.Microsecond, time.Nanosecond} {
		l, f := ecLimiter(t, tick, ecBursty, 1)
		origin := f.Now()
		f.Jump(-time.Hour) // before the origin: the first request waits 1 h
		far := deadlineCtx{context.Background(), origin.Add(math.MaxInt64)}
		if d, err := l.Acquire(far, 1); err != nil || d != time.Hour {
			t.Fatalf("tick %v: Acquire with a deadline 292 years ahead = %v, %v; want 1h, nil", tick, d, err)
		}

		l, f = ecLimiter(t, tick, ecBursty, 1)
		ecAcquire(t, l, 1) // 1 s of debt
		f.Jump(time.Hour - time.Second)
		ecAcquire(t, l, 3600) // 3600 s of debt, due at the 1 h mark
		before := l.Snapshot()
		past := deadlineCtx{context.Background(), origin.Add(math.MinInt64)}
		if d, err := l.Acquire(past, 1); !errors.Is(err, context.DeadlineExceeded) || d != 0 {
			t.Fatalf("tick %v: Acquire with a deadline 292 years past = %v, %v; want DeadlineExceeded", tick, d, err)
		}
		if after := l.Snapshot(); !ecSame(before, after) {
			t.Fatalf("tick %v: the rejection changed the state:\n%+v\n%+v", tick, before, after)
		}
	}
}

// A clock that steps back (Fake.Jump) makes the next wait longer and
// creates no permits. Guava 31.1: back 3 s -> waits 4 s.
// A negative reading right after creation: the first request waits
// until the origin.
func TestEdgeClockSteps(t *testing.T) {
	for _, tick := range []time.Duration{time.Microsecond, time.Nanosecond} {
		l, f := ecLimiter(t, tick, ecBursty, 1)
		ecAcquire(t, l, 1)
		f.Jump(-3 * time.Second)
		if d := ecAcquire(t, l, 1); d != 4*time.Second {
			t.Fatalf("tick %v: waited %v after the clock stepped back, want 4s", tick, d)
		}
		ecEvents(t, f, "[R0.00, R4.00]")

		l, f = ecLimiter(t, tick, 4*time.Second, 2)
		f.Jump(-2 * time.Second)
		if d := ecAcquire(t, l, 1); d != 2*time.Second {
			t.Fatalf("tick %v: first wait %v at -2s, want 2s", tick, d)
		}
		ecEvents(t, f, "[R2.00]")
	}
}

// WithMaxBurstSeconds(0) is a metronome; 2.5 s at 2 qps stores a
// burst of 5.
func TestEdgeMaxBurst(t *testing.T) {
	for _, tick := range []time.Duration{time.Microsecond, time.Nanosecond} {
		l, f := ecLimiter(t, tick, ecBursty, 2, ratelimit.WithMaxBurstSeconds(0))
		f.Advance(10 * time.Second)
		for range 3 {
			ecAcquire(t, l, 1)
		}
		ecEvents(t, f, "[U10.00, R0.00, R0.50, R0.50]")

		l, f = ecLimiter(t, tick, ecBursty, 2, ratelimit.WithMaxBurstSeconds(2.5))
		f.Advance(10 * time.Second)
		for range 8 {
			ecAcquire(t, l, 1)
		}
		ecEvents(t, f, "[U10.00, R0.00, R0.00, R0.00, R0.00, R0.00, R0.00, R0.50, R0.50]")

		// WithInitiallyFull (Guava issue 8420): the burst is there from the start.
		l, f = ecLimiter(t, tick, ecBursty, 2, ratelimit.WithMaxBurstSeconds(2.5), ratelimit.WithInitiallyFull())
		for range 7 {
			ecAcquire(t, l, 1)
		}
		ecEvents(t, f, "[R0.00, R0.00, R0.00, R0.00, R0.00, R0.00, R0.50]")
	}
}

// SetRate keeps the stored fraction of the bucket.
func TestEdgeSetRateRescales(t *testing.T) {
	for _, tick := range []time.Duration{time.Microsecond, time.Nanosecond} {
		l, f := ecLimiter(t, tick, ecBursty, 1)
		f.Advance(time.Second) // 1 of 1 stored
		for _, c := range []struct{ rate, stored float64 }{{4, 4}, {2, 2}} {
			if err := l.SetRate(c.rate); err != nil {
				t.Fatal(err)
			}
			if s := l.Snapshot(); s.StoredPermits != c.stored || s.MaxPermits != c.rate {
				t.Fatalf("tick %v bursty at %v qps: %v of %v stored, want %v", tick, c.rate, s.StoredPermits, s.MaxPermits, c.stored)
			}
		}
		w, _ := ecLimiter(t, tick, 4*time.Second, 2) // cold: 8 of 8
		for _, c := range []struct{ rate, stored float64 }{{4, 16}, {1, 4}} {
			if err := w.SetRate(c.rate); err != nil {
				t.Fatal(err)
			}
			if s := w.Snapshot(); s.StoredPermits != c.stored || s.MaxPermits != c.stored {
				t.Fatalf("tick %v warming-up at %v qps: %v of %v stored, want full %v", tick, c.rate, s.StoredPermits, s.MaxPermits, c.stored)
			}
		}
	}
}

// Debt and idle time on the fake clock.
func TestEdgeDebtSchedules(t *testing.T) {
	for _, tick := range []time.Duration{time.Microsecond, time.Nanosecond} {
		// From cold, acquire(100) is free; the next one pays 52 s.
		l, f := ecLimiter(t, tick, 4*time.Second, 2)
		ecAcquire(t, l, 100)
		ecAcquire(t, l, 1)
		ecEvents(t, f, "[R0.00, R52.00]")

		// An idle gap shorter than the debt refills nothing.
		l, f = ecLimiter(t, tick, 4*time.Second, 2)
		ecAcquire(t, l, 10) // books 4 + 2 + 1 s
		f.Advance(2300 * time.Millisecond)
		for range 3 {
			ecAcquire(t, l, 1)
		}
		ecEvents(t, f, "[R0.00, U2.30, R4.70, R0.50, R0.50]")

		// SetRate while in debt: the old-rate debt, then the new rate.
		l, f = ecLimiter(t, tick, ecBursty, 0.1)
		ecAcquire(t, l, 1)
		if err := l.SetRate(100); err != nil {
			t.Fatal(err)
		}
		ecAcquire(t, l, 1)
		ecAcquire(t, l, 1)
		ecEvents(t, f, "[R0.00, R10.00, R0.01]")
	}
}

// Guava issue 7130: tryAcquire looks only at when the next request may
// start: on an idle 1 qps limiter tryAcquire(1000) succeeds and pushes the
// next request 1000 s out.
func TestEdgeTryAcquirePaysLater(t *testing.T) {
	for _, tick := range []time.Duration{time.Microsecond, time.Nanosecond} {
		l, f := ecLimiter(t, tick, ecBursty, 1)
		if !l.TryAcquire(1000, 0) {
			t.Fatal("tryAcquire(1000) on an idle limiter refused")
		}
		if l.TryAcquire(1, 999*time.Second) {
			t.Fatal("granted inside the 1000 s debt")
		}
		if !l.TryAcquire(1, 1000*time.Second) {
			t.Fatal("refused with a timeout covering the debt")
		}
		ecEvents(t, f, "[R0.00, R1000.00]")
	}
}

// Guava issue 5290: at 80 000 qps a permit costs 12.5 µs. Guava mode books
// 12 µs per acquire(1), as Guava does; the default ns mode books 12.5 µs.
func TestEdgeTruncationAt80kQPS(t *testing.T) {
	for _, c := range []struct {
		tick time.Duration
		want time.Duration
	}{
		{time.Microsecond, 12 * time.Microsecond},
		{time.Nanosecond, 12500 * time.Nanosecond},
	} {
		l, f := ecLimiter(t, c.tick, ecBursty, 80000)
		ecAcquire(t, l, 1)
		for i := range 1000 {
			if d := ecAcquire(t, l, 1); d != c.want {
				t.Fatalf("tick %v: acquire %d waited %v, want %v", c.tick, i, d, c.want)
			}
		}
		if got := f.Elapsed(); got != 1000*c.want {
			t.Fatalf("tick %v: 1001 permits took %v", c.tick, got)
		}
	}
}

// Guava issue 3552: 10 qps, 500 ms warm-up, tryAcquire() every 120 ms. The
// refill during each wait equals what a success consumes, so the limiter
// never warms up: true once every 3 calls, and 4.0 permits stored after
// each success, for as long as the cadence lasts.
func TestEdgeWarmupNeverWarmsAtSteadyCadence(t *testing.T) {
	for _, tick := range []time.Duration{time.Microsecond, time.Nanosecond} {
		l, f := ecLimiter(t, tick, 500*time.Millisecond, 10)
		for i := range 60 {
			got := l.TryAcquire(1, 0)
			if want := i%3 == 0; got != want {
				t.Fatalf("tick %v: call %d at %v: %v, want %v", tick, i, f.Elapsed(), got, want)
			}
			if got {
				if s := l.Snapshot().StoredPermits; s != 4.0 {
					t.Fatalf("tick %v: call %d: %v stored, want 4.0", tick, i, s)
				}
			}
			f.Advance(120 * time.Millisecond)
		}
	}
}

// Rate() is computed back from the stable interval, like Guava's
// getRate: 7.0 reads 6.999999999999999 in Guava mode. Nanosecond ticks
// round differently (7.0 survives, 0.35 does not).
func TestEdgeRateReadsBack(t *testing.T) {
	cases := []struct{ rate, us, ns float64 }{
		{7, 6.999999999999999, 7},
		{3, 3, 3},
		{0.1, 0.1, 0.1},
		{0.3, 0.3, 0.3},
		{1e-7, 1e-7, 1e-7},
		{0.35, 0.35, 0.3499999999999999},
		{math.SmallestNonzeroFloat64, 0, 0},
		{math.Inf(1), math.Inf(1), math.Inf(1)},
		{math.MaxFloat64, math.MaxFloat64, math.MaxFloat64},
	}
	for _, c := range cases {
		for _, tick := range []time.Duration{time.Microsecond, time.Nanosecond} {
			want := c.us
			if tick == time.Nanosecond {
				want = c.ns
			}
			l, _ := ecLimiter(t, tick, ecBursty, 1)
			if err := l.SetRate(c.rate); err != nil {
				t.Fatal(err)
			}
			if got := l.Rate(); got != want {
				t.Errorf("tick %v: SetRate(%v) reads back %v, want %v", tick, c.rate, got, want)
			}
		}
	}
}

// String has Guava's toString shape, and rounds like Java's %.1f
// (half-up on the shortest decimal form), not like Go's %.1f (half-even on
// the binary value, which prints 0.25 as "0.2").
func TestEdgeString(t *testing.T) {
	cases := []struct {
		rate float64
		tick time.Duration
		want string
	}{
		{5, time.Microsecond, "5.0"},
		{0.25, time.Microsecond, "0.3"},
		{0.25, time.Nanosecond, "0.3"},
		{0.15, time.Microsecond, "0.2"},
		{2.25, time.Microsecond, "2.3"},
		{0.35, time.Microsecond, "0.4"},
		// In ns mode 0.35 reads back as 0.3499999999999999 (see
		// TestEdgeRateReadsBack), so it prints 0.3.
		{0.35, time.Nanosecond, "0.3"},
		{7, time.Microsecond, "7.0"}, // 6.999999999999999
		{9.95, time.Microsecond, "10.0"},
		{1e-7, time.Microsecond, "0.0"},
		{math.SmallestNonzeroFloat64, time.Microsecond, "0.0"},
		{math.Inf(1), time.Microsecond, "Infinity"},
		{math.Inf(1), time.Nanosecond, "Infinity"},
		// Past 1e16 the exponent form, not Java's 309 digits.
		{math.MaxFloat64, time.Microsecond, "1.7976931348623157e+308"},
		{1e308, time.Nanosecond, "1e+308"},
		{1e16, time.Nanosecond, "1e+16"},
		{9999999999999998, time.Nanosecond, "9999999999999998.0"},
	}
	for _, c := range cases {
		l, _ := ecLimiter(t, c.tick, ecBursty, c.rate)
		if got, want := l.String(), "RateLimiter[stableRate="+c.want+"qps]"; got != want {
			t.Errorf("rate %v tick %v: %s, want %s", c.rate, c.tick, got, want)
		}
	}
}
