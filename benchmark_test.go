package ratelimit_test

// Benchmarks of the Limiter's hot paths on the real clock. Run them with
//
//	go test -run '^$' -bench . -benchmem -count=5 .
//
// The comparison with golang.org/x/time/rate, go.uber.org/ratelimit and
// github.com/juju/ratelimit lives in the separate module bench/, so that the
// main module does not depend on its peers; see docs/performance.md.
//
// "Granted" limiters run at 1e9 permits/s: one permit costs 1 ns, less than a
// call takes, so every call is granted without sleeping and the benchmark
// measures the bookkeeping (clock read, lock, engine) and nothing else.
// "Denied" limiters run at 1 permit/s after one grant, so every call is
// refused, except the one permit that comes due each second. Each benchmark fails if the limiter did not do what its name says,
// so a regression that turns a grant into a sleep cannot pass as a speed-up.

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/smoothrate/ratelimit"
)

// grantRate makes every call of a benchmark loop a grant without sleeping.
const grantRate = 1e9

func newGranted(b *testing.B) *ratelimit.Limiter {
	b.Helper()
	l, err := ratelimit.NewBursty(grantRate)
	if err != nil {
		b.Fatal(err)
	}
	return l
}

// newDenied returns a limiter that refuses every TryAcquire(1, 0) for the
// next second: its one free permit is taken, and the next is 1 s away.
func newDenied(b *testing.B) *ratelimit.Limiter {
	b.Helper()
	l, err := ratelimit.NewBursty(1)
	if err != nil {
		b.Fatal(err)
	}
	if !l.TryAcquire(1, 0) {
		b.Fatal("the first TryAcquire on a fresh limiter was refused")
	}
	return l
}

// checkDenied fails a denied benchmark whose limiter granted more than its
// 1 permit/s allows: the permit due each second may be granted, nothing more.
func checkDenied(b *testing.B, start time.Time, grants int64) {
	b.Helper()
	if allowed := int64(time.Since(start)/time.Second) + 1; grants > allowed {
		b.Fatalf("a limiter at 1 permit/s granted %d times in %v", grants, time.Since(start))
	}
}

// benchGranted is the loop of the single-goroutine granted benchmarks.
func benchGranted(b *testing.B, l *ratelimit.Limiter) {
	b.Helper()
	b.ReportAllocs()
	for b.Loop() {
		if !l.TryAcquire(1, 0) {
			b.Fatal("TryAcquire refused at 1e9 permits/s")
		}
	}
}

func BenchmarkTryAcquireGranted(b *testing.B) {
	benchGranted(b, newGranted(b))
}

func BenchmarkTryAcquireGrantedParallel(b *testing.B) {
	l := newGranted(b)
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			if !l.TryAcquire(1, 0) {
				b.Error("TryAcquire refused at 1e9 permits/s")
				return
			}
		}
	})
}

func BenchmarkTryAcquireDenied(b *testing.B) {
	l := newDenied(b)
	start := time.Now()
	var grants int64
	b.ReportAllocs()
	for b.Loop() {
		if l.TryAcquire(1, 0) {
			grants++
		}
	}
	checkDenied(b, start, grants)
}

func BenchmarkTryAcquireDeniedParallel(b *testing.B) {
	l := newDenied(b)
	start := time.Now()
	var grants atomic.Int64
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			if l.TryAcquire(1, 0) {
				grants.Add(1)
			}
		}
	})
	checkDenied(b, start, grants.Load())
}

func BenchmarkAcquireNoWait(b *testing.B) {
	l := newGranted(b)
	ctx := context.Background()
	b.ReportAllocs()
	for b.Loop() {
		if w, err := l.Acquire(ctx, 1); err != nil || w != 0 {
			b.Fatalf("Acquire at 1e9 permits/s = %v, %v; want 0, nil", w, err)
		}
	}
}

func BenchmarkAcquireNoWaitParallel(b *testing.B) {
	l := newGranted(b)
	ctx := context.Background()
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			if w, err := l.Acquire(ctx, 1); err != nil || w != 0 {
				b.Errorf("Acquire at 1e9 permits/s = %v, %v; want 0, nil", w, err)
				return
			}
		}
	})
}

// BenchmarkAcquireNoWaitDeadline adds a context with a deadline, which makes
// Acquire check whether the wait fits before booking.
func BenchmarkAcquireNoWaitDeadline(b *testing.B) {
	l := newGranted(b)
	ctx, cancel := context.WithTimeout(context.Background(), time.Hour)
	defer cancel()
	b.ReportAllocs()
	for b.Loop() {
		if w, err := l.Acquire(ctx, 1); err != nil || w != 0 {
			b.Fatalf("Acquire at 1e9 permits/s = %v, %v; want 0, nil", w, err)
		}
	}
}

func BenchmarkReserve(b *testing.B) {
	l := newGranted(b)
	b.ReportAllocs()
	for b.Loop() {
		if r := l.Reserve(1); !r.OK() || r.Delay() != 0 {
			b.Fatalf("Reserve at 1e9 permits/s: ok=%v delay=%v", r.OK(), r.Delay())
		}
	}
}

func BenchmarkReserveParallel(b *testing.B) {
	l := newGranted(b)
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			if r := l.Reserve(1); !r.OK() || r.Delay() != 0 {
				b.Errorf("Reserve at 1e9 permits/s: ok=%v delay=%v", r.OK(), r.Delay())
				return
			}
		}
	})
}

// BenchmarkReserveCancel books and gives back, the path of an Acquire whose
// context ends during its sleep.
func BenchmarkReserveCancel(b *testing.B) {
	l := newGranted(b)
	b.ReportAllocs()
	for b.Loop() {
		if r := l.Reserve(1); !r.Cancel() {
			b.Fatal("Cancel of the latest reservation failed")
		}
	}
}

// BenchmarkTryAcquireGrantedWarmingUp is the granted path of a warming-up
// limiter, whose stored permits are priced (the trapezoid). It stays cold:
// between two calls tens of nanoseconds of idle time store tens of permits
// (one per ns at this rate and cold factor), and a call spends one, so every
// call prices a stored permit above the threshold.
func BenchmarkTryAcquireGrantedWarmingUp(b *testing.B) {
	l, err := ratelimit.NewWarmingUp(grantRate, time.Millisecond)
	if err != nil {
		b.Fatal(err)
	}
	benchGranted(b, l)
}

// BenchmarkTryAcquireGrantedGuavaMode is the granted path at Guava's
// microsecond resolution (one extra division per clock read).
func BenchmarkTryAcquireGrantedGuavaMode(b *testing.B) {
	l, err := ratelimit.NewBursty(grantRate, ratelimit.WithResolution(time.Microsecond))
	if err != nil {
		b.Fatal(err)
	}
	benchGranted(b, l)
}

// BenchmarkTimeNow is the floor: every call above reads the clock once.
func BenchmarkTimeNow(b *testing.B) {
	b.ReportAllocs()
	var last time.Time
	for b.Loop() {
		last = time.Now()
	}
	if last.IsZero() {
		b.Fatal("time.Now returned the zero time")
	}
}

// BenchmarkTimeSince is the clock read the Limiter actually does: the
// monotonic reading alone, cheaper than time.Now, which also reads the wall
// clock.
func BenchmarkTimeSince(b *testing.B) {
	start := time.Now()
	b.ReportAllocs()
	var last time.Duration
	for b.Loop() {
		last = time.Since(start)
	}
	if last <= 0 {
		b.Fatal("time.Since did not move")
	}
}
