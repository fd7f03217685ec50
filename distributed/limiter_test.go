package distributed

import (
	"context"
	"errors"
	"math"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/smoothrate/ratelimit"
	"github.com/smoothrate/ratelimit/clocktest"
	"github.com/smoothrate/ratelimit/internal/redistest"
)

func TestNewRejectsBadInput(t *testing.T) {
	t.Parallel()
	c := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1"})
	defer c.Close()
	cases := []struct {
		name   string
		client redis.UniversalClient
		lname  string
		rate   float64
		opts   []Option
		want   error
	}{
		{"nil client", nil, "x", 1, nil, ErrNilClient},
		{"empty name", c, "", 1, nil, ErrInvalidName},
		{"brace", c, "a{b", 1, nil, ErrInvalidName},
		{"zero rate", c, "x", 0, nil, ratelimit.ErrInvalidRate},
		{"NaN rate", c, "x", math.NaN(), nil, ratelimit.ErrInvalidRate},
		{"negative warmup", c, "x", 1, []Option{WithWarmup(-1)}, ratelimit.ErrInvalidWarmup},
		{"cold factor", c, "x", 1, []Option{WithWarmup(time.Second), WithColdFactor(0.5)}, ratelimit.ErrInvalidColdFactor},
		{"cold without warmup", c, "x", 1, []Option{WithColdFactor(2)}, ErrInvalidOption},
		{"burst on warmup", c, "x", 1, []Option{WithWarmup(time.Second), WithMaxBurstSeconds(2)}, ErrInvalidOption},
		{"burst NaN", c, "x", 1, []Option{WithMaxBurstSeconds(math.NaN())}, ratelimit.ErrInvalidBurst},
		{"lease 0", c, "x", 1, []Option{WithLeaseDuration(0)}, ErrInvalidLease},
		{"validity", c, "x", 1, []Option{WithLeaseValidity(-time.Second)}, ErrInvalidLease},
		{"timeout", c, "x", 1, []Option{WithCallTimeout(0)}, ErrInvalidOption},
		{"safe rate", c, "x", 1, []Option{WithSafeRate(-1)}, ErrInvalidLease},
		{"pid", c, "x", 1, []Option{WithProcessID("a b")}, ErrInvalidProcessID},
		{"clock", c, "x", 1, []Option{WithLocalClock(nil)}, ratelimit.ErrInvalidClock},
		// The root package's WithClock refused a typed nil, which is not
		// == nil but panics on its first Now; this package's copy of the
		// check had drifted and let it through. They now share one.
		{"typed nil clock", c, "x", 1, []Option{WithLocalClock((*clocktest.Fake)(nil))}, ratelimit.ErrInvalidClock},
		// The module's one option convention: this package's own
		// ErrInvalidOption.
		{"nil option", c, "x", 1, []Option{nil}, ErrInvalidOption},
		{"bad value is an invalid option", c, "x", 1, []Option{WithLeaseDuration(0)}, ErrInvalidOption},
		{"unknown policy", c, "x", 1, []Option{WithFailurePolicy(7)}, ErrInvalidOption},
		{"safe rate when closed", c, "x", 1, []Option{WithFailurePolicy(FailClosed), WithSafeRate(5)}, ErrInvalidOption},
	}
	for _, tc := range cases {
		l, err := New(tc.client, tc.lname, tc.rate, tc.opts...)
		if !errors.Is(err, tc.want) || l != nil {
			t.Errorf("%s: got (%v, %v), want an error wrapping %v", tc.name, l, err, tc.want)
		}
		if errors.Is(err, ratelimit.ErrInvalidOption) {
			t.Errorf("%s: %v matches the root package's ErrInvalidOption, not only this package's", tc.name, err)
		}
	}
	// A call timeout bounds a round trip: a bad one is a bad option, not a
	// bad lease.
	if _, err := New(c, "x", 1, WithCallTimeout(-time.Second)); errors.Is(err, ErrInvalidLease) {
		t.Errorf("WithCallTimeout(-1s): %v matches ErrInvalidLease", err)
	}
}

func TestRejectedCallsChangeNothing(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	l, err := New(newClient(t, srv), "bad", 10)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close(context.Background())
	if _, err := l.Acquire(context.Background(), 0); !errors.Is(err, ratelimit.ErrInvalidPermits) {
		t.Fatalf("Acquire(0): %v", err)
	}
	if l.TryAcquire(-1, 0) {
		t.Fatal("TryAcquire(-1) succeeded")
	}
	//lint:ignore SA1012 testing the nil check
	if _, err := l.Acquire(nil, 1); !errors.Is(err, ratelimit.ErrNilContext) { //nolint:staticcheck
		t.Fatalf("Acquire(nil, 1): %v", err)
	}
	//lint:ignore SA1012 testing the nil check
	if err := l.Join(nil); !errors.Is(err, ratelimit.ErrNilContext) { //nolint:staticcheck
		t.Fatalf("Join(nil): %v", err)
	}
	//lint:ignore SA1012 testing the nil check
	if err := l.Close(nil); !errors.Is(err, ratelimit.ErrNilContext) { //nolint:staticcheck
		t.Fatalf("Close(nil): %v", err)
	}
	if err := l.SetRate(math.NaN()); !errors.Is(err, ratelimit.ErrInvalidRate) {
		t.Fatalf("SetRate(NaN): %v", err)
	}
	if st := l.Stats(); st.RedisCalls != 0 || st.Demand != 0 {
		t.Fatalf("rejected calls touched the limiter: %+v", st)
	}
	if got := srv.CLI("DBSIZE"); got != "0" {
		t.Fatalf("rejected calls wrote to Redis: DBSIZE %s", got)
	}
}

// TestSingleProcessSchedule checks the simplest schedule exactly: one
// process, explicit Redis time, 10 permits/s bursty starting empty.
func TestSingleProcessSchedule(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	base := clocktest.NewFake()
	l, err := New(newClient(t, srv), "one", 10, withSim(base), WithLocalClock(base), WithMaxBurstSeconds(0))
	if err != nil {
		t.Fatal(err)
	}
	// First permit: free (Guava's pay later), the lease is booked at once.
	if !l.TryAcquire(1, 0) {
		t.Fatal("first TryAcquire refused")
	}
	// Second, at the same moment: the first one's cost (100 ms) is owed.
	// The call books the next permit for 100 ms from now and says no.
	if l.TryAcquire(1, 0) {
		t.Fatal("second TryAcquire at the same moment admitted")
	}
	st := l.Stats()
	if st.Leases != 2 || st.Held != 1 || st.RedisCalls != 2 {
		t.Fatalf("stats after two tries: %+v", st)
	}
	// The permit is held but not usable yet: no Redis call, no permit.
	base.Advance(50 * time.Millisecond)
	if l.TryAcquire(1, 0) {
		t.Fatal("admitted a permit before it was usable")
	}
	if got := l.Stats().RedisCalls; got != 2 {
		t.Fatalf("a TryAcquire with a pending permit called Redis (%d calls, want 2)", got)
	}
	base.Advance(50 * time.Millisecond)
	if !l.TryAcquire(1, 0) {
		t.Fatal("refused at 100 ms")
	}
	// Demand is now measured, so that success also prefetched the next
	// permit (booked for 200 ms).
	if st := l.Stats(); st.LocalDecisions != 2 || st.Leases != 3 || st.Held != 1 {
		t.Fatalf("stats at 100 ms: %+v", st)
	}
	// An Acquire now waits for the debt of the last permit: 100 ms,
	// slept on the fake clock.
	base.ClearEvents()
	w, err := l.Acquire(context.Background(), 1)
	if err != nil || w != 100*time.Millisecond {
		t.Fatalf("Acquire: %v, %v; want 100ms", w, err)
	}
	if ev := base.TakeEvents(); ev != "[R0.10]" {
		t.Fatalf("sleeps: %s", ev)
	}
	if err := l.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	if l.TryAcquire(1, 0) {
		t.Fatal("admitted after Close")
	}
	if _, err := l.Acquire(context.Background(), 1); !errors.Is(err, ErrClosed) {
		t.Fatalf("Acquire after Close: %v", err)
	}
}

// TestHugePermitsRefused: a request of more than MaxPermits is refused at
// once (ErrInvalidPermits), debiting nothing: asked of the fleet, 2^63
// permits were debited, the reply overflowed into a negative grant that
// read as Redis set up wrong, and the fleet was locked out.
func TestHugePermitsRefused(t *testing.T) {
	if uint64(math.MaxInt) <= MaxPermits {
		return // an int of 32 bits asks for at most MaxPermits: nothing to refuse (386)
	}
	srv := redistest.Start(t)
	c := newClient(t, srv)
	base := clocktest.NewFake()
	a := newSim(t, c, "huge", "a", 100, base)
	b := newSim(t, c, "huge", "b", 100, base)
	if a.TryAcquire(math.MaxInt, 0) {
		t.Error("TryAcquire(MaxInt) granted")
	}
	if _, err := a.Acquire(context.Background(), math.MaxInt); !errors.Is(err, ratelimit.ErrInvalidPermits) {
		t.Errorf("Acquire(MaxInt): %v, want ErrInvalidPermits", err)
	}
	if err := a.Stats().LastError; err != nil {
		t.Errorf("last error %v", err)
	}
	if got := drive(base, 2*time.Second, 100, b); got[0] < 150 {
		t.Errorf("after the refused requests, b admitted %d in 2 s at 100/s", got[0])
	}
}

// holdScripts holds every script call while hold is set, telling held
// about each, until release is closed.
type holdScripts struct {
	hold    *atomic.Bool
	held    chan<- struct{}
	release <-chan struct{}
}

func (h holdScripts) DialHook(next redis.DialHook) redis.DialHook { return next }
func (h holdScripts) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		if h.hold.Load() && (cmd.Name() == "evalsha" || cmd.Name() == "eval") {
			h.held <- struct{}{}
			<-h.release
		}
		return next(ctx, cmd)
	}
}
func (h holdScripts) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}

// TestCloseAgainAfterItsContextEnded: a Close whose ctx ends while a lease
// is in flight returns ctx's error; the lease lands; Close again gives its
// permits back and leaves the registry. The second Close returned nil at
// once, and the lease's 500 permits stayed debited from the fleet, unspent.
func TestCloseAgainAfterItsContextEnded(t *testing.T) {
	srv := redistest.Start(t)
	c := newClient(t, srv)
	var hold atomic.Bool
	held, release := make(chan struct{}, 1), make(chan struct{})
	c.AddHook(holdScripts{&hold, held, release})
	l, err := New(c, "closeagain", 1000, WithProcessID("a"), WithCallTimeout(time.Second))
	if err != nil {
		t.Fatal(err)
	}
	if !l.TryAcquire(50, time.Second) {
		t.Fatal("no first lease")
	}
	hold.Store(true)
	acquired := make(chan error)
	go func() {
		_, err := l.Acquire(context.Background(), 500)
		acquired <- err
	}()
	<-held // the lease for 500 is in flight
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := l.Close(ctx); !errors.Is(err, context.Canceled) {
		t.Fatalf("Close with its context ended: %v", err)
	}
	hold.Store(false)
	close(release)
	if err := <-acquired; !errors.Is(err, ErrClosed) {
		t.Fatalf("the Acquire under way: %v, want ErrClosed", err)
	}
	if err := l.Close(context.Background()); err != nil {
		t.Fatalf("Close again: %v", err)
	}
	st := l.Stats()
	registered, err := c.HExists(context.Background(), keysOf("closeagain")[0], "p:a").Result()
	if err != nil {
		t.Fatal(err)
	}
	if st.Held != 0 || st.PermitsRefunded == 0 || registered {
		t.Errorf("after Close again: held %d, refunded %d, still in the registry %v", st.Held, st.PermitsRefunded, registered)
	}
}

// TestStateOutlivesItsDebt: at less than a permit a day, the state's TTL
// still covers the debt booked: capped at a day, the state lapsed with
// nine days of debt booked, and the next caller found a fresh one.
func TestStateOutlivesItsDebt(t *testing.T) {
	srv := redistest.Start(t)
	c := newClient(t, srv)
	ctx := context.Background()
	l, err := New(c, "slow", 1/(10*86400.0), WithProcessID("p"))
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close(ctx)
	if _, err := l.Acquire(ctx, 1); err != nil {
		t.Fatal(err)
	}
	next := stateField(t, c, "slow", "next")
	now, err := c.Time(ctx).Result()
	if err != nil {
		t.Fatal(err)
	}
	debt := time.Duration(next-float64(now.UnixMicro())) * time.Microsecond
	if ttl := c.PTTL(ctx, keysOf("slow")[0]).Val(); ttl < debt {
		t.Errorf("the state expires in %v, with %v of debt booked", ttl, debt)
	}
}

// TestRefundCountsWholePermits: at a rate whose permit's price is not a
// whole number of µs (30/s), Close gives back the permits held and counts
// them all: the last was lost to the price's truncation (4 given back,
// PermitsRefunded 3).
func TestRefundCountsWholePermits(t *testing.T) {
	srv := redistest.Start(t)
	c := newClient(t, srv)
	base := clocktest.NewFake()
	l := newSim(t, c, "refund30", "p", 30, base, WithMaxBurstSeconds(0))
	drive(base, time.Second, 60, l)
	st := l.Stats()
	if st.Held == 0 {
		t.Fatalf("nothing held to give back: %+v", st)
	}
	if next, interval := stateField(t, c, "refund30", "next"), stateField(t, c, "refund30", "interval"); next-float64(st.Held)*interval < float64(simTime(base)()) {
		t.Fatalf("the refund would be cut at now: held %d", st.Held)
	}
	if err := l.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	if got := l.Stats(); got.PermitsRefunded != st.Held || got.Refunds == 0 {
		t.Errorf("Close gave back %d permits; Stats: %d refunded in %d refunds", st.Held, got.PermitsRefunded, got.Refunds)
	}
}
