package smooth_test

// Benchmarks of the engine alone: no clock read, no lock, explicit time.
// They show what the Limiter's bookkeeping costs once the clock read and the
// mutex are taken away (compare with the root package's benchmarks and
// BenchmarkTimeNow there). Run them with
//
//	go test -run '^$' -bench . -benchmem -count=5 ./smooth/
//
// Time advances by step ticks per operation. At 1e9 permits/s on nanosecond
// ticks a permit costs 1 tick, so a step of 50 (about the cost of a real
// call) keeps the engine granting at once; each benchmark checks that it
// did, so that it measures the path its name says.

import (
	"testing"

	"github.com/smoothrate/ratelimit/smooth"
)

const (
	rate = 1e9
	step = 50 // ticks between calls: longer than a permit's 1 tick
)

var sink int64

func BenchmarkReserveBursty(b *testing.B) {
	e := smooth.NewBursty(smooth.Nanosecond, 1, rate, 0)
	now := int64(0)
	b.ReportAllocs()
	for b.Loop() {
		now += step
		moment, _ := e.Reserve(1, now)
		if moment > now {
			b.Fatalf("Reserve at %d had to wait until %d", now, moment)
		}
	}
}

func BenchmarkReserveWarmingUp(b *testing.B) {
	e := smooth.NewWarmingUp(smooth.Nanosecond, 1e6, 3, rate, 0) // 1 ms warm-up
	now := int64(0)
	b.ReportAllocs()
	for b.Loop() {
		now += step
		moment, _ := e.Reserve(1, now)
		if moment > now {
			b.Fatalf("Reserve at %d had to wait until %d", now, moment)
		}
	}
}

// BenchmarkTryAcquireGranted is the engine part of Limiter.TryAcquire's
// granted path: CanAcquire, then ReserveWait.
func BenchmarkTryAcquireGranted(b *testing.B) {
	e := smooth.NewBursty(smooth.Nanosecond, 1, rate, 0)
	now := int64(0)
	b.ReportAllocs()
	for b.Loop() {
		now += step
		if !e.CanAcquire(now, 0) {
			b.Fatalf("CanAcquire(%d, 0) refused", now)
		}
		if w := e.ReserveWait(1, now); w != 0 {
			b.Fatalf("ReserveWait at %d = %d, want 0", now, w)
		}
	}
}

// BenchmarkTryAcquireDenied is the engine part of a refusal: 1 permit/s, the
// next permit 1 s away, time frozen.
func BenchmarkTryAcquireDenied(b *testing.B) {
	e := smooth.NewBursty(smooth.Nanosecond, 1, 1, 0)
	e.Reserve(1, 0)
	b.ReportAllocs()
	for b.Loop() {
		if e.CanAcquire(0, 0) {
			b.Fatal("CanAcquire granted with the next permit 1 s away")
		}
	}
}

// BenchmarkReserveCancel books and gives back.
func BenchmarkReserveCancel(b *testing.B) {
	e := smooth.NewBursty(smooth.Nanosecond, 1, rate, 0)
	now := int64(0)
	b.ReportAllocs()
	for b.Loop() {
		now += step
		_, u := e.Reserve(1, now)
		if !e.Cancel(u) {
			b.Fatal("Cancel of the latest reservation failed")
		}
	}
}

// BenchmarkReserveThrottled books on a limiter in debt: time never catches
// up, so every reservation lands further in the future (the resync is
// skipped and the whole price is paid in fresh permits).
func BenchmarkReserveThrottled(b *testing.B) {
	e := smooth.NewBursty(smooth.Nanosecond, 1, 1000, 0)
	var last int64
	b.ReportAllocs()
	for b.Loop() {
		last, _ = e.Reserve(1, 0)
	}
	if last <= 0 && b.N > 1 {
		b.Fatalf("Reserve in debt returned moment %d, want > 0", last)
	}
	sink = last
}
