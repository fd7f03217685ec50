package ratelimit

import (
	"math/rand/v2"
	"testing"
	"time"

	"github.com/smoothrate/ratelimit/clocktest"
)

// TestMirrorNeverLate: the lock-free mirror of nextFreeTicket, which lets
// TryAcquire refuse without the lock, is never later than the engine's
// (a later one would refuse a caller the limiter would admit), and equals
// it whenever the engine is in debt past the present (else a caller to be
// refused would take the lock). Random bookings, cancels, rate changes
// and time steps, bursty and warming up, on a fake clock.
func TestMirrorNeverLate(t *testing.T) {
	for seed := range uint64(20) {
		r := rand.New(rand.NewPCG(seed, 1))
		clk := clocktest.NewFake()
		var l *Limiter
		var err error
		if seed%2 == 0 {
			l, err = NewBursty(10, WithClock(clk))
		} else {
			l, err = NewWarmingUp(10, time.Second, WithClock(clk))
		}
		if err != nil {
			t.Fatal(err)
		}
		var held []Reservation
		for step := range 2000 {
			switch r.IntN(6) {
			case 0:
				l.TryAcquire(1+r.IntN(3), 0)
			case 1:
				held = append(held, l.Reserve(1+r.IntN(3)))
			case 2:
				if len(held) > 0 {
					held[len(held)-1].Cancel()
					held = held[:len(held)-1]
				}
			case 3:
				if err := l.SetRate(1 + 20*r.Float64()); err != nil {
					t.Fatal(err)
				}
			case 4:
				l.Reserve(5 + r.IntN(20)) // a debt no one cancels
			case 5:
				clk.Advance(time.Duration(r.IntN(300)) * time.Millisecond)
			}
			l.mu.Lock()
			m, nf := l.nextFree.Load(), l.e.NextFreeTicket()
			now := l.ticks(l.elapsed())
			l.mu.Unlock()
			if m > nf || (nf > now && m != nf) {
				t.Fatalf("seed %d step %d: mirror %d, engine's nextFreeTicket %d, now %d", seed, step, m, nf, now)
			}
		}
	}
}
