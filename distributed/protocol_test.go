package distributed

import (
	"context"
	"encoding/binary"
	"fmt"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/smoothrate/ratelimit/clocktest"
	"github.com/smoothrate/ratelimit/internal/redistest"
)

// stateFields is the layout of the packed state (engine.lua's
// STATE_FIELDS, then lease.lua's FLEET).
var stateFields = []string{"kind", "stored", "max", "interval", "next", "burst", "warmup", "cold",
	"threshold", "slope", "ver", "lc", "born", "slot", "lvl", "spr", "np", "lvt", "sc", "exp"}

// stateField reads one number of the shared state, decoding the packed
// doubles of its 'e' field.
func stateField(t *testing.T, c redis.UniversalClient, name, field string) float64 {
	t.Helper()
	v, err := c.HGet(context.Background(), keysOf(name)[0], "e").Result()
	if err != nil {
		t.Fatalf("HGET e: %v", err)
	}
	if len(v) != 8*len(stateFields) {
		t.Fatalf("the state is %d bytes, want %d", len(v), 8*len(stateFields))
	}
	for i, f := range stateFields {
		if f == field {
			return math.Float64frombits(binary.LittleEndian.Uint64([]byte(v[8*i:])))
		}
	}
	t.Fatalf("no state field %q", field)
	return 0
}

// newSim makes a limiter in the deterministic simulation on base.
func newSim(t *testing.T, c redis.UniversalClient, name, pid string, rate float64, base *clocktest.Fake, opts ...Option) *Limiter {
	t.Helper()
	opts = append([]Option{withSim(base), WithLocalClock(base), WithProcessID(pid)}, opts...)
	l, err := New(c, name, rate, opts...)
	if err != nil {
		t.Fatal(err)
	}
	return l
}

// drive calls TryAcquire(1, 0) at perSecond on every limiter for d of fake
// time, in 1 ms steps, and returns what each admitted.
func drive(base *clocktest.Fake, d time.Duration, perSecond float64, lims ...*Limiter) []int64 {
	got := make([]int64, len(lims))
	steps := int(d / time.Millisecond)
	for k := 1; k <= steps; k++ {
		due := int(float64(k)*perSecond/1000) - int(float64(k-1)*perSecond/1000)
		for i, l := range lims {
			for j := 0; j < due; j++ {
				if l.TryAcquire(1, 0) {
					got[i]++
				}
			}
		}
		base.Jump(time.Millisecond)
	}
	return got
}

// TestSetRateAppliesOnceFleetWide: one process changes the rate; Guava's
// rescaling happens once, in Redis, and the other process learns the new
// rate from its next lease without applying it again.
func TestSetRateAppliesOnceFleetWide(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	c := newClient(t, srv)
	base := clocktest.NewFake()
	a := newSim(t, c, "setrate", "a", 100, base)
	b := newSim(t, newClient(t, srv), "setrate", "b", 100, base)
	if !a.TryAcquire(1, 0) {
		t.Fatal("first permit refused")
	}
	base.Jump(100 * time.Millisecond)
	if !b.TryAcquire(1, 0) {
		t.Fatal("b's first permit refused")
	}
	base.Jump(5 * time.Second) // idle: the bucket fills to 1 s = 100 permits
	if err := a.SetRate(200); err != nil {
		t.Fatal(err)
	}
	// Bursty rescaling: a full bucket of 100 becomes a full bucket of 200.
	if got := stateField(t, c, "setrate", "stored"); got != 200 {
		t.Fatalf("stored after SetRate: %v, want 200", got)
	}
	if got := stateField(t, c, "setrate", "ver"); got != 2 {
		t.Fatalf("version after SetRate: %v, want 2", got)
	}
	if a.Rate() != 200 || b.Rate() != 100 {
		t.Fatalf("rates before b's next lease: a %v b %v", a.Rate(), b.Rate())
	}
	if !b.TryAcquire(1, 0) {
		t.Fatal("b refused from a full bucket")
	}
	if b.Rate() != 200 {
		t.Fatalf("b did not learn the new rate: %v", b.Rate())
	}
	if got := stateField(t, c, "setrate", "ver"); got != 2 {
		t.Fatalf("b's lease changed the version to %v", got)
	}
	if got := stateField(t, c, "setrate", "max"); got != 200 {
		t.Fatalf("max permits %v, want 200", got)
	}
	for _, l := range []*Limiter{a, b} {
		if err := l.Close(context.Background()); err != nil {
			t.Fatal(err)
		}
	}
}

// TestCloseRefundsAndLeaves: Close gives the unspent permits back (rolling
// nextFreeTicket back by their price) and leaves the registry.
func TestCloseRefundsAndLeaves(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	c := newClient(t, srv)
	base := clocktest.NewFake()
	l := newSim(t, c, "refund", "p", 100, base, WithMaxBurstSeconds(0))
	drive(base, time.Second, 200, l) // twice the rate: leases are booked ahead
	st := l.Stats()
	if st.Held == 0 {
		t.Fatalf("nothing held to refund: %+v", st)
	}
	next := stateField(t, c, "refund", "next")
	now := float64(simTime(base)())
	interval := stateField(t, c, "refund", "interval")
	if err := l.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	after := stateField(t, c, "refund", "next")
	want := max(next-float64(st.Held)*interval, now)
	if after != want {
		t.Fatalf("next after refunding %d permits: %v, want %v (before %v, now %v)", st.Held, after, want, next, now)
	}
	if got := l.Stats(); got.PermitsRefunded != st.Held || got.Held != 0 {
		t.Fatalf("stats after Close: %+v", got)
	}
	fields, _ := c.HKeys(context.Background(), "ratelimit:{refund}:state").Result()
	for _, f := range fields {
		if strings.HasPrefix(f, "p:") {
			t.Fatalf("registry entry %q still in the state after Close", f)
		}
	}
	if err := l.Close(context.Background()); err != nil {
		t.Fatalf("second Close: %v", err)
	}
}

// TestRefundOnlyForCurrentVersion: permits leased before a rate change are
// not refunded (their price was set by the old rate).
func TestRefundOnlyForCurrentVersion(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	c := newClient(t, srv)
	base := clocktest.NewFake()
	l := newSim(t, c, "refundver", "p", 100, base, WithMaxBurstSeconds(0))
	drive(base, time.Second, 200, l)
	if l.Stats().Held == 0 {
		t.Fatal("nothing held")
	}
	other := newSim(t, newClient(t, srv), "refundver", "q", 100, base)
	if err := other.SetRate(50); err != nil {
		t.Fatal(err)
	}
	next := stateField(t, c, "refundver", "next")
	// l does not know the new version yet; its permits are version 1.
	if err := l.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	if got := stateField(t, c, "refundver", "next"); got != next {
		t.Fatalf("stale-version refund moved next from %v to %v", next, got)
	}
	if got := l.Stats().PermitsRefunded; got != 0 {
		t.Fatalf("refunded %d permits of an old version", got)
	}
	_ = other.Close(context.Background())
}

// TestEveryKeyHasATTL: both keys (the state, with the registry in it, and
// the demand histogram) expire, with the 1 s floor.
func TestEveryKeyHasATTL(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	c := newClient(t, srv)
	base := clocktest.NewFake()
	l := newSim(t, c, "ttl", "p", 1e6, base) // a fast limit: tiny debts
	drive(base, 100*time.Millisecond, 1000, l)
	keys, err := c.Keys(context.Background(), "*").Result()
	if err != nil || len(keys) != 2 {
		t.Fatalf("keys %v, %v", keys, err)
	}
	for _, k := range keys {
		ttl, err := c.PTTL(context.Background(), k).Result()
		if err != nil || ttl < 900*time.Millisecond {
			t.Errorf("%s: PTTL %v, %v; want at least the 1 s floor", k, ttl, err)
		}
	}
	_ = l.Close(context.Background())
}

// TestLeasesLapse: permits not spent within their validity are dropped,
// never spent late.
func TestLeasesLapse(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	base := clocktest.NewFake()
	l := newSim(t, newClient(t, srv), "lapse", "p", 100, base, WithLeaseValidity(time.Second))
	drive(base, time.Second, 300, l) // builds demand and a pool
	held := l.Stats().Held
	if held == 0 {
		t.Fatalf("nothing held: %+v", l.Stats())
	}
	base.Jump(3 * time.Second)
	st := l.Stats()
	if st.Held != 0 || st.PermitsLapsed < held {
		t.Fatalf("after 3 s idle: held %d lapsed %d (had %d)", st.Held, st.PermitsLapsed, held)
	}
	_ = l.Close(context.Background())
}

// TestDeadProcessesLeaveTheRegistry: a process that stops calling is
// forgotten after the registry TTL, and the survivors' fair share grows.
func TestDeadProcessesLeaveTheRegistry(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	base := clocktest.NewFake()
	a := newSim(t, newClient(t, srv), "dead", "a", 1000, base)
	b := newSim(t, newClient(t, srv), "dead", "b", 1000, base)
	drive(base, time.Second, 1000, a, b)
	if got := a.Stats().Processes; got != 2 {
		t.Fatalf("processes seen by a: %d, want 2", got)
	}
	// b goes silent (crashed: no Close). Registry TTL is 3 × validity
	// (3 s by default).
	got := drive(base, 5*time.Second, 2000, a)
	if p := a.Stats().Processes; p != 1 {
		t.Fatalf("processes seen by a after b died: %d, want 1", p)
	}
	// Over the last seconds a had the whole rate.
	last := drive(base, 2*time.Second, 2000, a)
	if last[0] < 0.97*2000 {
		t.Fatalf("a alone admitted %d in 2 s at rate 1000 (before: %v)", last[0], got)
	}
	_ = a.Close(context.Background())
}

// TestClockJumpBackIsClamped: if the Redis clock steps back by an hour,
// the fleet is locked out for at most about a second, not an hour.
func TestClockJumpBackIsClamped(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	base := clocktest.NewFake()
	var offset int64
	l, err := New(newClient(t, srv), "jump", 100, WithLocalClock(base), WithProcessID("p"),
		optionFunc(func(c *config) error {
			c.scriptTime = func() int64 { return redisEpoch + base.Elapsed().Microseconds() + offset }
			c.syncPrefetch = true
			c.callTimeout = 5 * time.Second
			return nil
		}))
	if err != nil {
		t.Fatal(err)
	}
	drive(base, time.Second, 200, l)
	offset = -3600e6
	// A locked-out limiter would admit nothing for an hour; the clamp
	// allows at most about one second (MAX_WAIT) of lock-out.
	drive(base, 2*time.Second, 200, l)
	got := drive(base, time.Second, 200, l)
	if got[0] < 90 {
		t.Fatalf("after a 1 h step back the limiter admitted %d/s at rate 100", got[0])
	}
	if next := stateField(t, newClient(t, srv), "jump", "next"); next > float64(simTime(base)()+offset)+2e6 {
		t.Fatalf("next is %v µs ahead of the server clock", next-float64(simTime(base)()+offset))
	}
	_ = l.Close(context.Background())
}

// TestRefundWhenDemandDrops: permits held for a demand that has gone are
// given back to the fleet instead of lapsing.
func TestRefundWhenDemandDrops(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	c := newClient(t, srv)
	base := clocktest.NewFake()
	l := newSim(t, c, "drop", "p", 1000, base, WithMaxBurstSeconds(0))
	drive(base, time.Second, 2000, l)
	held := l.Stats().Held
	if held < 50 {
		t.Fatalf("held %d at high demand", held)
	}
	calls := l.Stats().RedisCalls
	drive(base, 3*time.Second, 20, l)
	st := l.Stats()
	if st.Refunds == 0 || st.PermitsRefunded < held/2 {
		t.Fatalf("no refund after demand dropped from 2000/s to 20/s: %+v", st)
	}
	if st.PermitsLapsed > 10 {
		t.Fatalf("%d permits lapsed instead of being refunded", st.PermitsLapsed)
	}
	if c := st.RedisCalls - calls; c > 3*20 {
		t.Fatalf("%d Redis calls in 3 s at low demand", c)
	}
	_ = l.Close(context.Background())
}

// TestInfiniteRate: +Inf means unlimited, fleet-wide, and SetRate back to
// a finite rate limits again.
func TestInfiniteRate(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	base := clocktest.NewFake()
	l := newSim(t, newClient(t, srv), "inf", "p", math.Inf(1), base)
	if got := drive(base, 100*time.Millisecond, 10000, l); got[0] != 1000 {
		t.Fatalf("unlimited limiter admitted %d of 1000", got[0])
	}
	if err := l.SetRate(100); err != nil {
		t.Fatal(err)
	}
	base.Jump(5 * time.Second)
	got := drive(base, 2*time.Second, 1000, l)
	// From an infinite rate a bursty limiter is full (100 permits), then
	// 100/s for 2 s, plus one lease.
	if got[0] > 100+200+int64(l.Stats().LargestLease) || got[0] < 250 {
		t.Fatalf("admitted %d in 2 s after SetRate(100) from +Inf", got[0])
	}
	_ = l.Close(context.Background())
}

// TestSmallClockStepBackForgivesNoDebt: with the shared queue a second
// deep (callers without a deadline book up to MAX_WAIT ahead), a step back
// of the Redis clock by a millisecond must not forgive that second: the
// permits usable by 1.2 s stay within R·T + B + the largest lease. The
// clamp for a clock that stepped back set next to now plus the last cost,
// and the fleet admitted 210 where the bound is 131.
func TestSmallClockStepBackForgivesNoDebt(t *testing.T) {
	srv := redistest.Start(t)
	c := newClient(t, srv)
	const rate, burst = 100.0, 0.01 // B = 1 permit
	keys := keysOf("stepback")
	pid := 0
	type grant struct{ at, n int64 } // when (real µs) the permits may be used
	var grants []grant
	lease := func(redisNow, realNow int64) bool {
		pid++
		args := []any{"lease", redisEpoch + redisNow, "b", f64(rate), f64(burst), 0, "3", 1, fmt.Sprintf("p%d", pid),
			1_000_000, 1_000_000, 10, 10, 1_000_000, f64(rate), 100_000}
		v, err := leaseScript.Run(context.Background(), c, keys, args...).Slice()
		if err != nil {
			t.Fatal(err)
		}
		r, err := parseReply(v)
		if err != nil {
			t.Fatal(err)
		}
		if r.granted == 0 {
			return false
		}
		grants = append(grants, grant{realNow + r.wait.Microseconds(), r.granted})
		return true
	}
	for lease(0, 0) { // leases of 10 until the queue is a second deep
	}
	for lease(-1000+1, 1) { // a microsecond later, Redis's clock a millisecond back
	}
	const T = 1_200_000
	var largest, admitted int64
	for _, g := range grants {
		largest = max(largest, g.n)
		if g.at <= T {
			admitted += g.n
		}
	}
	if bound := rate*T/1e6 + rate*burst + float64(largest); float64(admitted) > bound {
		t.Fatalf("a 1 ms step back of Redis's clock: %d permits usable by 1.2 s, bound R·T + B + the largest lease = %.0f", admitted, bound)
	}
}
