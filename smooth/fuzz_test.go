package smooth

// FuzzEngine is the white-box twin of the root package's FuzzLimiter: it
// drives the engine directly with explicit times (forwards and backwards),
// so it sees the exact state, and checks after every step that
//
//   - a finite SetRate never leaves NaN (or +Inf, unless maxPermits is +Inf)
//     stored permits: such a value would make every later wait (long)NaN = 0;
//   - at a finite rate the stored permits stay within [0, maxPermits];
//   - a booking never starts before now, and ReserveWait is never negative;
//   - nextFreeTicket never moves back, except that a successful Cancel
//     restores exactly the state before the cancelled booking;
//   - the admission bound of FuzzLimiter (its admissionBound comment has
//     the argument), here in exact ticks.
//
// Run it with: go test -run=^$ -fuzz=FuzzEngine -fuzztime=60s ./smooth/
// The seed corpus is in testdata/fuzz/FuzzEngine/.

import (
	"math"
	"testing"
)

type fzIn struct {
	b []byte
	i int
}

func (r *fzIn) more() bool { return r.i < len(r.b) }

func (r *fzIn) byte() byte {
	if r.i >= len(r.b) {
		return 0
	}
	r.i++
	return r.b[r.i-1]
}

func (r *fzIn) uint64() uint64 {
	var v uint64
	for range 8 {
		v = v<<8 | uint64(r.byte())
	}
	return v
}

// rate decodes only valid rates (the engine's callers validate): ordinary,
// tiny, huge, +Inf, and any positive float64 bit pattern.
func (r *fzIn) rate() float64 {
	table := [...]float64{
		1, 2, 5, 10, 0.5, 1000, 1e6, 1e9, 1e12,
		1e-3, 1e-9, 1e-300, math.SmallestNonzeroFloat64,
		1e300, math.MaxFloat64, math.Inf(1),
	}
	b := r.byte()
	if int(b) < len(table)*14 {
		return table[int(b)%len(table)]
	}
	if b < 250 {
		return float64(int(r.byte())+1) / 8
	}
	x := math.Abs(math.Float64frombits(r.uint64()))
	if !(x > 0) {
		return 1
	}
	return x
}

// move decodes a step of the time line, in either direction, from 1 tick
// to about 10¹³ ticks.
func (r *fzIn) move() int64 {
	b := r.byte()
	scale := [...]int64{1, 1e3, 1e6, 1e8, 1e10, 1e11}
	d := int64(r.byte()) * scale[int(b>>1)%len(scale)]
	if b&1 == 1 {
		d = -d
	}
	return d
}

func (r *fzIn) permits() int {
	b := r.byte()
	switch {
	case b < 220:
		return 1 + int(b%16)
	case b < 250:
		return 1 + int(b)*1000
	default:
		return math.MaxInt32
	}
}

type fzBooking struct {
	undo    Undo
	moment  int64
	stored  float64 // before the booking
	permits int
	counted bool
}

func FuzzEngine(f *testing.F) {
	f.Add([]byte{0, 2, 4, 8, 1, 3, 1, 5, 2, 1, 2, 1, 5, 3, 0, 7, 4})
	f.Add([]byte{1, 6, 9, 40, 3, 1, 9, 1, 9, 4, 15, 1, 2, 2, 0, 5, 4, 7})
	f.Fuzz(func(t *testing.T, data []byte) {
		in := &fzIn{b: data}
		tps := float64(Nanosecond)
		if in.byte()%2 == 1 {
			tps = Microsecond
		}
		bursty := in.byte()%2 == 0
		rate := in.rate()
		var l Engine
		if bursty {
			l = NewBursty(tps, float64(in.byte())/4, rate, 0)
			if in.byte()%2 == 1 {
				l.Fill()
			}
		} else {
			l = NewWarmingUp(tps, int64(in.byte())*int64(tps/10), 1+float64(in.byte())/16, rate, 0)
		}

		var (
			now      int64 // ticks; may go negative
			bookings []fzBooking
			// The admission bound's bookkeeping, as in FuzzLimiter.
			finite   bool
			rMax     float64
			mMax     float64
			refills  int
			admitted float64
			counted  int64
			kMax     float64
			tMax     int64
			vacuous  bool
		)
		period := func(rate, prevMax float64) {
			// As in FuzzLimiter: a finite period needs a finite rate,
			// interval and maxPermits.
			fin := !math.IsInf(rate, 1) && !math.IsInf(tps/rate, 1) && !math.IsInf(l.MaxPermits(), 0)
			if fin {
				rMax = max(rMax, rate)
				if bursty {
					mMax = max(mMax, l.MaxPermits())
				}
				if !finite || math.IsInf(prevMax, 1) {
					refills++
				}
			}
			finite = fin
		}
		period(rate, 0)
		checkStored := func(op string) {
			s := l.StoredPermits()
			if !finite {
				return
			}
			if s != s || s < 0 || s > l.MaxPermits() {
				t.Fatalf("after %s at a finite rate: stored %v outside [0, %v]", op, s, l.MaxPermits())
			}
		}
		checkStored("create")

		for steps := 0; in.more() && steps < 1000; steps++ {
			nftBefore := l.NextFreeTicket()
			restored := false
			switch op := in.byte() % 8; op {
			case 0, 1: // Reserve
				k := in.permits()
				storedBefore := l.StoredPermitsAt(now)
				moment, undo := l.Reserve(k, now)
				if moment < now {
					t.Fatalf("Reserve(%d, %d) starts at %d, before now", k, now, moment)
				}
				if moment < nftBefore {
					t.Fatalf("Reserve(%d, %d) starts at %d, before nextFreeTicket %d", k, now, moment, nftBefore)
				}
				b := fzBooking{undo: undo, moment: moment, stored: storedBefore, permits: k, counted: finite}
				if finite {
					if moment == math.MaxInt64 {
						vacuous = true // the end of the time line absorbs every later price
					}
					tMax = max(tMax, moment)
					admitted += float64(k)
					counted++
					kMax = max(kMax, float64(k))
				}
				bookings = append(bookings, b)
				if len(bookings) > 8 {
					bookings = bookings[1:]
				}
			case 2: // ReserveWait
				k := in.permits()
				if w := l.ReserveWait(k, now); w < 0 {
					t.Fatalf("ReserveWait(%d, %d) = %d < 0", k, now, w)
				} else if finite {
					start := now + w
					if w == math.MaxInt64 || start < now || start == math.MaxInt64 {
						vacuous = true
					}
					tMax = max(tMax, start)
					admitted += float64(k)
					counted++
					kMax = max(kMax, float64(k))
				}
			case 3: // Cancel a recent booking
				if len(bookings) == 0 {
					break
				}
				i := int(in.byte()) % len(bookings)
				b := bookings[i]
				if l.Cancel(b.undo) {
					if l.NextFreeTicket() != b.moment || !same(l.StoredPermits(), b.stored) {
						t.Fatalf("Cancel restored nextFreeTicket %d and stored %v, want %d and %v",
							l.NextFreeTicket(), l.StoredPermits(), b.moment, b.stored)
					}
					if b.counted {
						admitted -= float64(b.permits)
					}
					restored = true // the one operation allowed to move nextFreeTicket back
				} else if l.NextFreeTicket() != nftBefore {
					t.Fatal("a refused Cancel moved nextFreeTicket")
				}
				bookings = append(bookings[:i], bookings[i+1:]...)
			case 4: // SetRate
				prevMax := l.MaxPermits()
				rate := in.rate()
				l.SetRate(rate, now)
				period(rate, prevMax)
				s := l.StoredPermits()
				if !math.IsInf(rate, 1) && (s != s || (math.IsInf(s, 1) && !math.IsInf(l.MaxPermits(), 1))) {
					t.Fatalf("SetRate(%v) left stored permits %v (maxPermits %v)", rate, s, l.MaxPermits())
				}
			case 5: // CanAcquire is a pure query
				l2 := l
				_ = l.CanAcquire(now, in.move())
				if !sameEngine(l, l2) {
					t.Fatal("CanAcquire changed the engine")
				}
			default: // time moves, maybe backwards
				now += in.move()
			}
			if !restored && l.NextFreeTicket() < nftBefore {
				t.Fatalf("nextFreeTicket moved back from %d to %d", nftBefore, l.NextFreeTicket())
			}
			checkStored("a step")
			if vacuous {
				continue
			}
			slack := float64(counted)
			stored := mMax * float64(refills)
			if !bursty {
				slack *= 3
				stored = 0
			}
			bound := rMax*(float64(max(tMax, 0))+slack)/tps + stored + kMax
			if bound = bound*(1+1e-9) + 1e-6; admitted > bound {
				t.Fatalf("admitted %v permits (latest start %d ticks, largest %v) over %d bookings; bound %v (rMax %v, mMax %v × %d)",
					admitted, tMax, kMax, counted, bound, rMax, mMax, refills)
			}
		}
	})
}

// sameEngine compares two engines field by field, NaN equal to NaN.
func sameEngine(a, b Engine) bool {
	return same(a.storedPermits, b.storedPermits) && a.nextFreeTicket == b.nextFreeTicket &&
		same(a.maxPermits, b.maxPermits) && same(a.stableInterval, b.stableInterval) && a.version == b.version
}

// TestReserveSaturatesStoredPlusFreshPrice is FuzzLimiter's second find: a
// warming-up engine at 1e-9 permits/s (here 1e-12, to saturate in µs ticks too) prices 10 fresh permits at 10¹⁹ ticks or more,
// saturated to MaxInt64; adding the price of the stored permits spent wrapped
// the sum to a negative wait (Guava's plain long addition does the same),
// and nextFreeTicket went back in time, so the next request was free.
func TestReserveSaturatesStoredPlusFreshPrice(t *testing.T) {
	for _, tps := range []float64{Nanosecond, Microsecond} {
		l := NewWarmingUp(tps, int64(4.8*tps), 4, 1e-12, 0)
		if l.StoredPermits() <= 0 {
			t.Fatalf("tps %v: the engine starts with %v stored permits, want a cold (full) one", tps, l.StoredPermits())
		}
		if moment, _ := l.Reserve(10, 0); moment != 0 {
			t.Fatalf("tps %v: the first booking starts at %d, want 0", tps, moment)
		}
		if got := l.NextFreeTicket(); got != math.MaxInt64 {
			t.Fatalf("tps %v: nextFreeTicket = %d after pricing 10 permits at 1e-12/s, want MaxInt64", tps, got)
		}
		if w := l.ReserveWait(1, 0); w != math.MaxInt64 {
			t.Fatalf("tps %v: the next request waits %d ticks, want MaxInt64", tps, w)
		}
	}
}

// TestSetRateNeverOverfillsTheBucket is FuzzLimiter's third find
// (testdata/fuzz/FuzzLimiter/67be1d31c4fd440f): a full bucket at 5e-324
// permits/s holds a subnormal maxPermits; rescaled to 1e-3/s,
// stored·newMax/oldMax came out at 1/24 permit for a capacity of 0.02425,
// and the limiter admitted more than R·T + maxPermits + one request.
func TestSetRateNeverOverfillsTheBucket(t *testing.T) {
	for _, tps := range []float64{Nanosecond, Microsecond} {
		l := NewBursty(tps, 24.25, math.SmallestNonzeroFloat64, 0)
		l.Fill()
		l.SetRate(1e-3, 0)
		if s, m := l.StoredPermits(), l.MaxPermits(); s > m || m != 24.25e-3 {
			t.Fatalf("tps %v: after SetRate stored %v of maxPermits %v, want at most 0.02425", tps, s, m)
		}
	}
}
