package ratelimit_test

// FuzzLimiter drives the public API with operation sequences decoded from
// the fuzzer's bytes, on a clocktest.Fake that the sequence also moves
// (forwards and backwards), and checks after every step:
//
//   - nothing panics;
//   - no wait is negative (Acquire's result, Reservation.Delay, Snapshot);
//   - bad input is an error wrapping the right sentinel and changes nothing;
//   - a finite SetRate never leaves NaN stored permits behind;
//   - the admission bound (see admissionBound below).
//
// Run it with: go test -run=^$ -fuzz=FuzzLimiter -fuzztime=60s .
// The seed corpus is in testdata/fuzz/FuzzLimiter/.

import (
	"context"
	"errors"
	"math"
	"testing"
	"time"

	"github.com/smoothrate/ratelimit"
	"github.com/smoothrate/ratelimit/clocktest"
)

// fzBytes hands out the fuzzer's bytes; past the end it returns zeros, so
// every input decodes to some sequence.
type fzBytes struct {
	b []byte
	i int
}

func (r *fzBytes) more() bool { return r.i < len(r.b) }

func (r *fzBytes) byte() byte {
	if r.i >= len(r.b) {
		return 0
	}
	r.i++
	return r.b[r.i-1]
}

func (r *fzBytes) uint16() uint16 { return uint16(r.byte())<<8 | uint16(r.byte()) }

func (r *fzBytes) uint64() uint64 {
	var v uint64
	for range 8 {
		v = v<<8 | uint64(r.byte())
	}
	return v
}

// fzRate decodes a rate: mostly ordinary values, plus the edges (+Inf,
// tiny, huge, invalid) and any float64 bit pattern.
func (r *fzBytes) rate() float64 {
	table := [...]float64{
		1, 2, 5, 10, 0.5, 1000, 1e6, 1e9, 1e12, // ordinary and fast
		1e-3, 1e-9, 1e-300, math.SmallestNonzeroFloat64, // tiny
		1e300, math.MaxFloat64, math.Inf(1), // huge and unlimited
		0, -1, math.NaN(), math.Inf(-1), // invalid
	}
	b := r.byte()
	if int(b) < len(table)*12 {
		return table[int(b)%len(table)]
	}
	if b < 250 {
		return float64(r.uint16()%1000+1) / 10 // 0.1 … 100
	}
	return math.Float64frombits(r.uint64())
}

// fzDuration decodes a clock move or timeout of either sign, from 1 ns to
// hours.
func (r *fzBytes) duration() time.Duration {
	b := r.byte()
	units := [...]time.Duration{time.Nanosecond, time.Microsecond, time.Millisecond, 10 * time.Millisecond, time.Second, time.Hour}
	d := time.Duration(r.byte()) * units[int(b>>1)%len(units)]
	if b&1 == 1 {
		d = -d
	}
	return d
}

func (r *fzBytes) permits() int {
	b := r.byte()
	switch {
	case b < 200:
		return 1 + int(b%16)
	case b < 240:
		return 1 + int(r.uint16())
	case b < 245:
		return 0 // invalid
	case b < 250:
		return -1 - int(b%5) // invalid
	default:
		return math.MaxInt32 + int(b%3) // huge
	}
}

// deadlineCtx is a context whose deadline is on the Fake clock's time line
// (a real context.WithDeadline at year 2000 would be long expired) and which
// is never cancelled, so Acquire's deadline check is exercised in fake time.
type deadlineCtx struct {
	context.Context
	deadline time.Time
}

func (c deadlineCtx) Deadline() (time.Time, bool) { return c.deadline, true }

// fzState is the harness's view of the current limiter, for the bound.
type fzState struct {
	lim     *ratelimit.Limiter
	created time.Time     // on the fake clock
	tick    time.Duration // the limiter's resolution
	bursty  bool

	// Across the limiter's life, over the periods in which its rate, its
	// stable interval and its maxPermits were all finite ("finite
	// periods", see period):
	rMax     float64 // the largest rate
	mMax     float64 // the largest maxPermits (bursty only; see below)
	refills  int     // finite periods begun with a possibly full bucket
	admitted float64 // permits booked and not given back
	bookings int64   // number of such bookings
	kMax     float64 // the largest of them
	tMax     int64   // the latest start among them, in ticks; -1: none
	vacuous  bool    // a start overflowed: no bound can be checked

	finite bool // the current period is finite
	res    []fzReservation
}

type fzReservation struct {
	r       ratelimit.Reservation
	permits int
	counted bool // booked in a finite period, so counted in admitted
}

// admissionBound is the limiter's central promise, checked here on every
// fuzzed sequence and in race_test.go under concurrency:
//
//	admitted ≤ rMax·T + mMax·refills + kMax + slack
//
// where admitted counts the permits of every booking made in a finite period
// and not given back (granted Acquire and TryAcquire, Reserve not
// cancelled), T is the latest start time of those bookings on the limiter's
// time line (the engine moment at which the caller may proceed, never
// negative), and kMax the largest of them. T is the largest time the
// admissions reached, not the clock's: with a clock that steps back the
// latest reading may be older than a booking made before it.
//
// Why it holds. Write I for the stable interval (ticks per permit), S for
// the stored permits and nft for nextFreeTicket, and let Q = nft - S·I. A
// request starts at nft (after the resync that brings nft up to now), so
// Q ≤ start ≤ T while it is booked. Resync raises nft by Δ and S by at most
// Δ/I, so Q never falls; a clock reading in the past resyncs nothing. A
// booking of k permits spends s stored and k-s fresh ones: nft grows by
// (k-s)·I, truncated to a whole tick, and S falls by s, so Q grows by at
// least k·I - 1 tick. A bursty SetRate between finite rates keeps Q, since
// maxPermits = maxBurstSeconds·R scales S with the rate and S·I is
// unchanged. A cancelled reservation restores the state exactly. So within
// a finite period the bookings before the last one add up to at most
// (T - Q₀ + one tick each) / I_min permits, I_min being 1/rMax in ticks.
// Q₀ ≥ nft - maxPermits·I: a bucket starts at most full (WithInitiallyFull,
// or a rate coming down from a maxPermits of +Inf, which Guava refills; and
// SetRate never leaves more than maxPermits stored, a property this fuzzer
// had to restore).
// nft never falls, so each later finite period starts at or above where the
// previous one ended, minus one more full bucket: hence mMax·refills.
//
// A warming-up limiter never gives stored permits away (each costs at least
// I, more above the threshold), so there Q = nft alone and the mMax term
// drops; its price has up to three truncated products, hence 3 ticks of
// slack a booking. Bookings at an infinite rate cost nothing and are not
// counted; at a finite rate whose maxPermits overflowed to +Inf neither.
func (s *fzState) admissionBound() float64 {
	if s.vacuous {
		return math.Inf(1)
	}
	tps := float64(time.Second / s.tick)
	slackTicks := float64(s.bookings)
	stored := s.mMax * float64(s.refills)
	if !s.bursty {
		slackTicks *= 3
		stored = 0
	}
	bound := s.rMax*(float64(max(s.tMax, 0))+slackTicks)/tps + stored + s.kMax
	// Floating-point rounding of the rescaled stored permits and of R·T.
	return bound*(1+1e-9) + 1e-6
}

// period records the rate (as given: Rate() reads 0 when the interval
// overflows to +Inf) and capacity now in force. A finite period needs a
// finite rate, interval and maxPermits: at an interval of +Inf, S·I is no
// measure of anything, and the rescale out of a subnormal maxPermits (a rate
// below about 1e-299/s) is imprecise. A finite period that follows a
// non-finite one (or the creation) may start full.
func (s *fzState) period(rate, prevMax float64) {
	snap := s.lim.Snapshot()
	interval := float64(time.Second/s.tick) / rate // ticks per permit
	finite := !math.IsInf(rate, 1) && !math.IsInf(interval, 1) && !math.IsInf(snap.MaxPermits, 0)
	if finite {
		s.rMax = max(s.rMax, rate)
		if s.bursty {
			s.mMax = max(s.mMax, snap.MaxPermits)
		}
		if !s.finite || math.IsInf(prevMax, 1) {
			s.refills++
		}
	}
	s.finite = finite
}

// ticks is the limiter's reading of an elapsed time (truncated, like Guava's
// readMicros).
func (s *fzState) ticks(el time.Duration) int64 { return int64(el / s.tick) }

// booked records an admitted booking of k permits that starts wait after
// the reading el.
func (s *fzState) booked(k int, el, wait time.Duration) bool {
	if !s.finite {
		return false
	}
	start := s.ticks(el) + int64(wait/s.tick)
	if wait == math.MaxInt64 || start < s.ticks(el) || start == math.MaxInt64 {
		// The start is at the end of the time line (~292 years): the
		// engine's nextFreeTicket saturates there, and saturation absorbs
		// the price of every later booking, so no bound can hold.
		s.vacuous = true
	}
	s.tMax = max(s.tMax, start)
	s.admitted += float64(k)
	s.bookings++
	s.kMax = max(s.kMax, float64(k))
	return true
}

func snapEqual(a, b ratelimit.Snapshot) bool {
	same := func(x, y float64) bool { return x == y || (x != x && y != y) }
	return a.Kind == b.Kind && same(a.Rate, b.Rate) && same(a.StoredPermits, b.StoredPermits) &&
		same(a.MaxPermits, b.MaxPermits) && a.StableInterval == b.StableInterval &&
		a.NextFree == b.NextFree && a.Elapsed == b.Elapsed
}

func FuzzLimiter(f *testing.F) {
	// A few hand-made sequences; testdata/fuzz/FuzzLimiter holds more.
	f.Add([]byte{0, 0, 2, 10, 0, 0, 0, 1, 0, 1, 0, 1, 0, 2, 1, 3, 2, 5, 0})
	f.Add([]byte{0, 1, 3, 100, 20, 3, 0, 1, 5, 1, 5, 5, 9, 200, 1, 7, 4, 8, 50})
	f.Fuzz(func(t *testing.T, data []byte) {
		in := &fzBytes{b: data}
		clock := clocktest.NewFake()
		var s *fzState

		create := func() {
			bursty := in.byte()%2 == 0
			rate := in.rate()
			cfg := in.byte()
			var opts []ratelimit.Option
			opts = append(opts, ratelimit.WithClock(clock))
			tick := time.Nanosecond
			if cfg&1 == 1 {
				tick = time.Microsecond
				opts = append(opts, ratelimit.WithResolution(tick))
			}
			var (
				lim     *ratelimit.Limiter
				err     error
				wantErr error
			)
			if !(rate > 0) {
				wantErr = ratelimit.ErrInvalidRate
			}
			if bursty {
				burst := float64(in.byte()) / 4 // 0 … 63.75 s
				if cfg&2 == 2 {
					burst = -burst - 1
				}
				opts = append(opts, ratelimit.WithMaxBurstSeconds(burst))
				if burst < 0 && wantErr == nil {
					wantErr = ratelimit.ErrInvalidBurst
				}
				if cfg&4 == 4 {
					opts = append(opts, ratelimit.WithInitiallyFull())
				}
				lim, err = ratelimit.NewBursty(rate, opts...)
			} else {
				warmup := time.Duration(in.byte()) * 100 * time.Millisecond // 0 … 25.5 s
				if cfg&2 == 2 {
					warmup = -warmup - 1
					wantErr = ratelimit.ErrInvalidWarmup // checked first
				}
				cold := 1 + float64(in.byte())/16 // 1 … 16.9
				if cfg&8 == 8 {
					cold = 1 - cold // below 1: invalid
				}
				opts = append(opts, ratelimit.WithColdFactor(cold))
				if cold < 1 && wantErr == nil {
					wantErr = ratelimit.ErrInvalidColdFactor
				}
				lim, err = ratelimit.NewWarmingUp(rate, warmup, opts...)
			}
			if wantErr != nil {
				if err == nil || lim != nil || !errors.Is(err, wantErr) {
					t.Fatalf("create(bursty %v, rate %v, cfg %#x) = %v, %v; want an error wrapping %v", bursty, rate, cfg, lim, err, wantErr)
				}
				return
			}
			if err != nil || lim == nil {
				t.Fatalf("create(bursty %v, rate %v, cfg %#x) = %v, %v; want a limiter", bursty, rate, cfg, lim, err)
			}
			s = &fzState{lim: lim, created: clock.Now(), tick: tick, bursty: bursty, tMax: -1}
			s.period(rate, 0)
		}

		check := func(op string) {
			snap := s.lim.Snapshot()
			if snap.NextFree < 0 || snap.StableInterval < 0 {
				t.Fatalf("after %s: negative duration in %+v", op, snap)
			}
			if s.finite && snap.StoredPermits != snap.StoredPermits {
				t.Fatalf("after %s: NaN stored permits at the finite rate %v: %+v", op, snap.Rate, snap)
			}
			if b := s.admissionBound(); s.admitted > b {
				t.Fatalf("after %s: admitted %v permits (latest start %d ticks of %v, largest %v) over %d bookings; bound %v (rMax %v, mMax %v × %d)",
					op, s.admitted, s.tMax, s.tick, s.kMax, s.bookings, b, s.rMax, s.mMax, s.refills)
			}
		}
		elapsed := func() time.Duration { return clock.Now().Sub(s.created) }

		for steps := 0; in.more() && steps < 500; steps++ {
			op := in.byte() % 10
			if s == nil || op == 0 {
				create()
				if s != nil {
					check("create")
				}
				continue
			}
			before := s.lim.Snapshot()
			switch op {
			case 1, 2: // Acquire, sometimes with a deadline in fake time
				k := in.permits()
				var ctx context.Context = context.Background()
				withDeadline := in.byte()%3 == 0
				var left time.Duration // until the deadline
				if withDeadline {
					left = in.duration()
					ctx = deadlineCtx{ctx, clock.Now().Add(left)}
				}
				el := elapsed()
				w, err := s.lim.Acquire(ctx, k)
				switch {
				case k <= 0:
					if !errors.Is(err, ratelimit.ErrInvalidPermits) || w != 0 {
						t.Fatalf("Acquire(%d) = %v, %v; want ErrInvalidPermits", k, w, err)
					}
				case err != nil:
					if !withDeadline || !errors.Is(err, context.DeadlineExceeded) || w != 0 {
						t.Fatalf("Acquire(%d) = %v, %v", k, w, err)
					}
				case w < 0:
					t.Fatalf("Acquire(%d) waited %v < 0", k, w)
				case withDeadline && w > 0 && w > left:
					t.Fatalf("Acquire(%d) waited %v past its deadline %v away", k, w, left)
				default:
					s.booked(k, el, w)
				}
				if err != nil && !snapEqual(before, s.lim.Snapshot()) {
					t.Fatalf("a refused Acquire(%d) changed the limiter: %+v → %+v", k, before, s.lim.Snapshot())
				}
			case 3: // TryAcquire
				k := in.permits()
				timeout := in.duration()
				el := elapsed()
				fakeBefore := clock.Elapsed()
				ok := s.lim.TryAcquire(k, timeout)
				slept := clock.Elapsed() - fakeBefore
				if ok && k <= 0 {
					t.Fatalf("TryAcquire(%d) succeeded", k)
				}
				if ok && slept > max(timeout, 0) {
					t.Fatalf("TryAcquire(%d, %v) slept %v, longer than its timeout", k, timeout, slept)
				}
				if ok {
					if slept == math.MaxInt64-fakeBefore {
						s.vacuous = true // the Fake saturated
					}
					s.booked(k, el, slept)
				} else if !snapEqual(before, s.lim.Snapshot()) || slept != 0 {
					t.Fatalf("a refused TryAcquire(%d, %v) changed something (slept %v): %+v → %+v", k, timeout, slept, before, s.lim.Snapshot())
				}
			case 4, 5: // Reserve
				k := in.permits()
				el := elapsed()
				r := s.lim.Reserve(k)
				if k <= 0 {
					if r.OK() || !snapEqual(before, s.lim.Snapshot()) {
						t.Fatalf("Reserve(%d) was accepted or changed the limiter", k)
					}
					break
				}
				if !r.OK() || r.Delay() < 0 {
					t.Fatalf("Reserve(%d) = ok %v, delay %v", k, r.OK(), r.Delay())
				}
				counted := s.booked(k, el, r.Delay())
				s.res = append(s.res, fzReservation{r, k, counted})
				if len(s.res) > 8 {
					s.res = s.res[1:]
				}
			case 6: // Cancel one of the recent reservations
				if len(s.res) == 0 {
					break
				}
				i := int(in.byte()) % len(s.res)
				fr := s.res[i]
				if fr.r.Cancel() {
					if fr.counted {
						s.admitted -= float64(fr.permits)
					}
				} else if !snapEqual(before, s.lim.Snapshot()) {
					t.Fatal("a refused Cancel changed the limiter")
				}
				s.res = append(s.res[:i], s.res[i+1:]...)
			case 7: // SetRate
				rate := in.rate()
				err := s.lim.SetRate(rate)
				if !(rate > 0) {
					if !errors.Is(err, ratelimit.ErrInvalidRate) || !snapEqual(before, s.lim.Snapshot()) {
						t.Fatalf("SetRate(%v) = %v, or it changed the limiter", rate, err)
					}
					break
				}
				if err != nil {
					t.Fatalf("SetRate(%v) = %v", rate, err)
				}
				s.period(rate, before.MaxPermits)
				if after := s.lim.Snapshot(); !math.IsInf(rate, 1) && after.StoredPermits != after.StoredPermits {
					t.Fatalf("SetRate(%v) left NaN stored permits: %+v → %+v", rate, before, after)
				}
			case 8: // the test lets time pass
				clock.Advance(in.duration())
			case 9: // the clock steps, maybe backwards
				clock.Jump(in.duration())
			}
			check([]string{"", "Acquire", "Acquire", "TryAcquire", "Reserve", "Reserve", "Cancel", "SetRate", "Advance", "Jump"}[op])
		}
	})
}

// TestWaitSaturatesWhenTheClockStepsBackBeforeTheOrigin is FuzzLimiter's
// first find (testdata/fuzz/FuzzLimiter/764080795259afe5): at a vanishing
// rate the first request pushes nextFreeTicket to the end of the time line
// (math.MaxInt64 ticks); with the clock stepped back before the limiter's
// origin, now < 0 and nextFreeTicket - now overflowed to a negative number,
// so the next request was told to wait 0 instead of (practically) forever.
func TestWaitSaturatesWhenTheClockStepsBackBeforeTheOrigin(t *testing.T) {
	for _, res := range []time.Duration{time.Nanosecond, time.Microsecond} {
		clock := clocktest.NewFake()
		lim, err := ratelimit.NewBursty(math.SmallestNonzeroFloat64, ratelimit.WithClock(clock), ratelimit.WithResolution(res))
		if err != nil {
			t.Fatal(err)
		}
		clock.Jump(-48 * time.Microsecond)
		if r := lim.Reserve(1); r.Delay() != 48*time.Microsecond {
			t.Fatalf("%v: first Reserve delay = %v, want 48µs (back to the origin)", res, r.Delay())
		}
		if r := lim.Reserve(1); r.Delay() != math.MaxInt64 {
			t.Fatalf("%v: second Reserve delay = %v, want the saturated maximum", res, r.Delay())
		}
		if s := lim.Snapshot(); s.NextFree != math.MaxInt64 {
			t.Fatalf("%v: Snapshot().NextFree = %v, want the saturated maximum", res, s.NextFree)
		}
		if lim.TryAcquire(1, time.Hour) {
			t.Fatalf("%v: TryAcquire(1, 1h) succeeded at the end of the time line", res)
		}
		ctx := deadlineCtx{context.Background(), clock.Now().Add(time.Hour)}
		if _, err := lim.Acquire(ctx, 1); !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("%v: Acquire with a 1h deadline = %v, want DeadlineExceeded", res, err)
		}
	}
}
