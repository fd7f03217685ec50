package bench

// Hot-path benchmarks of this module's Limiter next to its peers, in one
// `go test` run so that ratios compare like with like:
//
//	go test -run '^$' -bench . -benchmem -count=5 -benchtime=200ms
//	go run ./cmd/ratios -count 5      # the same, plus medians and ratios
//
// Granted: every limiter at 1e9 events/s with a bucket (or slack) large
// enough that no call ever sleeps or is refused, so each benchmark measures
// one call's bookkeeping: clock read, lock or CAS, arithmetic.
//   - ours: ratelimit.NewBursty(1e9), TryAcquire(1, 0)
//   - xrate: rate.NewLimiter(1e9, 1<<30), Allow()
//   - uber: ratelimit.New(1e9) (1 ns per permit, default slack 10), Take()
//   - juju: ratelimit.NewBucketWithRate(1e9, 1<<30), TakeAvailable(1)
//
// Denied: 1 event/s, burst 1, with the one event taken, so that every call
// is refused (except the event that comes due each second): ours
// NewBursty(1) after one grant, xrate NewLimiter(1, 1) after one Allow, juju
// NewBucketWithRate(1, 1) after one TakeAvailable. uber has no
// non-blocking call.
//
// Every benchmark checks the outcome its name claims, so a change that made
// a grant sleep or a refusal grant cannot pass for a speed-up.

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	juju "github.com/juju/ratelimit"
	ours "github.com/smoothrate/ratelimit"
	uber "go.uber.org/ratelimit"
	"golang.org/x/time/rate"
)

const (
	grantRate  = 1e9
	grantBurst = 1 << 30
)

func newOurs(b *testing.B, r float64) *ours.Limiter {
	b.Helper()
	warmClock.Do(warmOurClock)
	l, err := ours.NewBursty(r)
	if err != nil {
		b.Fatal(err)
	}
	return l
}

// warmClock makes the benchmarks measure our limiters as a running
// process has them. Where the processor's counter is invariant they read
// it rather than the monotonic clock, once it has been scaled against that
// clock over its first 100 ms of use in the process (internal/tsc's
// MinSpan); until then they read time.Since, as the peers read time.Now.
// Without this, the first benchmark of each run (Granted/ours) would spend
// half of its 200 ms in that start-up.
var warmClock sync.Once

// warmOurClock drives a limiter for 150 ms of the monotonic clock, past
// the counter's scaling.
func warmOurClock() {
	l, err := ours.NewBursty(grantRate)
	if err != nil {
		panic(err)
	}
	for start := time.Now(); time.Since(start) < 150*time.Millisecond; {
		l.TryAcquire(1, 0)
	}
}

// serial runs op b.N times on one goroutine and fails if it ever returns
// false.
func serial(b *testing.B, what string, op func() bool) {
	b.ReportAllocs()
	for b.Loop() {
		if !op() {
			b.Fatalf("%s failed", what)
		}
	}
}

// parallel is serial under b.RunParallel (GOMAXPROCS goroutines).
func parallel(b *testing.B, what string, op func() bool) {
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			if !op() {
				b.Errorf("%s failed", what)
				return
			}
		}
	})
}

// grantedOps returns, per library, a call that must be granted at once.
func grantedOps(b *testing.B) []struct {
	name string
	op   func() bool
} {
	o := newOurs(b, grantRate)
	x := rate.NewLimiter(grantRate, grantBurst)
	u := uber.New(grantRate)
	j := juju.NewBucketWithRate(grantRate, grantBurst)
	// uber's Take has no outcome to check: it returns the time at which
	// the caller may proceed, after sleeping if it had to. Checking that
	// time against time.Now would double the clock reads, so the check is
	// done once, in TestUberTakeDoesNotSleep, instead of in the loop.
	return []struct {
		name string
		op   func() bool
	}{
		{"ours", func() bool { return o.TryAcquire(1, 0) }},
		{"xrate", func() bool { return x.Allow() }},
		{"uber", func() bool { u.Take(); return true }},
		{"juju", func() bool { return j.TakeAvailable(1) == 1 }},
	}
}

func BenchmarkGranted(b *testing.B) {
	for _, c := range grantedOps(b) {
		b.Run(c.name, func(b *testing.B) { serial(b, c.name+" grant", c.op) })
	}
}

func BenchmarkGrantedParallel(b *testing.B) {
	for _, c := range grantedOps(b) {
		b.Run(c.name, func(b *testing.B) { parallel(b, c.name+" grant", c.op) })
	}
}

// TestUberTakeDoesNotSleep backs BenchmarkGranted/uber: at 1e9 events/s
// (1 ns per event, slack 10) Take never has to sleep, because a call takes
// far longer than 1 ns, so the benchmark measures bookkeeping only. The
// limiter here runs on the real time, through a clock that counts the
// sleeps Take asks for.
func TestUberTakeDoesNotSleep(t *testing.T) {
	c := &sleepCounter{}
	u := uber.New(grantRate, uber.WithClock(c))
	const calls = 100000
	for range calls {
		u.Take()
	}
	if n := c.sleeps.Load(); n != 0 {
		t.Fatalf("uber Take at 1e9 events/s slept %d times in %d calls", n, calls)
	}
}

// sleepCounter is the real clock, counting the sleeps asked of it.
type sleepCounter struct{ sleeps atomic.Int64 }

func (c *sleepCounter) Now() time.Time { return time.Now() }

func (c *sleepCounter) Sleep(d time.Duration) {
	c.sleeps.Add(1)
	time.Sleep(d)
}

// deniedOps returns, per library, a call that must be refused, apart from
// the one event due each second, which the grants counter tolerates.
func deniedOps(b *testing.B) []struct {
	name string
	op   func() bool // reports whether it granted
} {
	o := newOurs(b, 1)
	x := rate.NewLimiter(1, 1)
	j := juju.NewBucketWithRate(1, 1)
	if !o.TryAcquire(1, 0) || !x.Allow() || j.TakeAvailable(1) != 1 {
		b.Fatal("a fresh limiter refused its first event")
	}
	return []struct {
		name string
		op   func() bool
	}{
		{"ours", func() bool { return o.TryAcquire(1, 0) }},
		{"xrate", func() bool { return x.Allow() }},
		{"juju", func() bool { return j.TakeAvailable(1) == 1 }},
	}
}

// checkDenied fails if a limiter at 1 event/s granted more than the events
// that came due while the benchmark ran.
func checkDenied(b *testing.B, name string, start time.Time, grants int64) {
	b.Helper()
	if allowed := int64(time.Since(start)/time.Second) + 1; grants > allowed {
		b.Fatalf("%s at 1 event/s granted %d times in %v", name, grants, time.Since(start))
	}
}

func BenchmarkDenied(b *testing.B) {
	for _, c := range deniedOps(b) {
		b.Run(c.name, func(b *testing.B) {
			start, grants := time.Now(), int64(0)
			b.ReportAllocs()
			for b.Loop() {
				if c.op() {
					grants++
				}
			}
			checkDenied(b, c.name, start, grants)
		})
	}
}

func BenchmarkDeniedParallel(b *testing.B) {
	for _, c := range deniedOps(b) {
		b.Run(c.name, func(b *testing.B) {
			start := time.Now()
			var grants atomic.Int64
			b.ReportAllocs()
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					if c.op() {
						grants.Add(1)
					}
				}
			})
			checkDenied(b, c.name, start, grants.Load())
		})
	}
}

// BenchmarkReserve books one event without sleeping: ours returns a value,
// x/time/rate a pointer (one allocation).
func BenchmarkReserve(b *testing.B) {
	o := newOurs(b, grantRate)
	x := rate.NewLimiter(grantRate, grantBurst)
	b.Run("ours", func(b *testing.B) {
		serial(b, "ours Reserve", func() bool { r := o.Reserve(1); return r.OK() && r.Delay() == 0 })
	})
	b.Run("xrate", func(b *testing.B) {
		serial(b, "xrate Reserve", func() bool { r := x.Reserve(); return r.OK() && r.Delay() == 0 })
	})
}

func BenchmarkReserveParallel(b *testing.B) {
	o := newOurs(b, grantRate)
	x := rate.NewLimiter(grantRate, grantBurst)
	b.Run("ours", func(b *testing.B) {
		parallel(b, "ours Reserve", func() bool { r := o.Reserve(1); return r.OK() && r.Delay() == 0 })
	})
	b.Run("xrate", func(b *testing.B) {
		parallel(b, "xrate Reserve", func() bool { r := x.Reserve(); return r.OK() && r.Delay() == 0 })
	})
}

// BenchmarkBlockingNoWait is each library's blocking call when it need not
// wait: ours Acquire, x/time/rate Wait, juju Wait (uber's Take is
// BenchmarkGranted/uber).
func BenchmarkBlockingNoWait(b *testing.B) {
	ctx := context.Background()
	o := newOurs(b, grantRate)
	x := rate.NewLimiter(grantRate, grantBurst)
	j := juju.NewBucketWithRate(grantRate, grantBurst)
	b.Run("ours", func(b *testing.B) {
		serial(b, "ours Acquire", func() bool { w, err := o.Acquire(ctx, 1); return err == nil && w == 0 })
	})
	b.Run("xrate", func(b *testing.B) {
		serial(b, "xrate Wait", func() bool { return x.Wait(ctx) == nil })
	})
	b.Run("juju", func(b *testing.B) {
		serial(b, "juju Wait", func() bool { j.Wait(1); return true })
	})
}

// BenchmarkClock is the floor under every figure above: each call reads the
// clock once. Ours reads only the monotonic clock (time.Since of a time
// with a monotonic reading); x/time/rate, uber and juju call time.Now,
// which reads the wall clock too.
func BenchmarkClock(b *testing.B) {
	start := time.Now()
	b.Run("time.Now", func(b *testing.B) {
		serial(b, "time.Now", func() bool { return !time.Now().IsZero() })
	})
	b.Run("time.Since", func(b *testing.B) {
		serial(b, "time.Since", func() bool { return time.Since(start) > 0 })
	})
}
