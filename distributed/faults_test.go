package distributed

import (
	"context"
	"errors"
	"net"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/smoothrate/ratelimit/clocktest"
	"github.com/smoothrate/ratelimit/internal/redistest"
)

// TestWrongTypeKey: a foreign key of another type under the limiter's name
// is reported, never overwritten, and never turns into admissions.
func TestWrongTypeKey(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	c := newClient(t, srv)
	srv.CLI("SET", "ratelimit:{wt}:state", "not a hash")
	base := clocktest.NewFake()
	l := newSim(t, c, "wt", "p", 100, base, WithFailurePolicy(FailClosed))
	if l.TryAcquire(1, 0) {
		t.Fatal("fail-closed limiter admitted over a wrong-type key")
	}
	_, err := l.Acquire(context.Background(), 1)
	// Not an outage: a configuration error, which no fallback and no
	// retry fixes, so it never fails open.
	if !errors.Is(err, ErrMisconfigured) || errors.Is(err, ErrUnavailable) || !strings.Contains(err.Error(), "holds a string") {
		t.Fatalf("Acquire over a wrong-type key: %v", err)
	}
	if got := srv.CLI("GET", "ratelimit:{wt}:state"); got != "not a hash" {
		t.Fatalf("the foreign key was changed to %q", got)
	}
	srv.CLI("DEL", "ratelimit:{wt}:demand")
	srv.CLI("SET", "ratelimit:{wt2}:demand", "x")
	l2 := newSim(t, c, "wt2", "p", 100, base, WithFailurePolicy(FailClosed))
	if l2.TryAcquire(1, 0) {
		t.Fatal("admitted over a wrong-type registry key")
	}
	if err := l2.Stats().LastError; err == nil || !strings.Contains(err.Error(), "registry") {
		t.Fatalf("registry error: %v", err)
	}
	// SetRate and a refund check the registry too, before writing
	// anything: the foreign key keeps its value and gets no TTL.
	if err := l2.SetRate(50); err == nil || !strings.Contains(err.Error(), "registry") {
		t.Fatalf("SetRate over a wrong-type registry key: %v", err)
	}
	if got, ttl := srv.CLI("GET", "ratelimit:{wt2}:demand"), srv.CLI("PTTL", "ratelimit:{wt2}:demand"); got != "x" || ttl != "-1" {
		t.Fatalf("the foreign registry key was changed: %q, PTTL %s", got, ttl)
	}
	if n := srv.CLI("EXISTS", "ratelimit:{wt2}:state"); n != "0" {
		t.Fatalf("a state was created next to a wrong-type registry key (EXISTS %s)", n)
	}
	_ = l.Close(context.Background())
	_ = l2.Close(context.Background())
}

// TestScriptFlushAndFlushAll: NOSCRIPT is handled by EVAL; a flushed state
// is recreated with the newest config version the fleet knows.
func TestScriptFlushAndFlushAll(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	c := newClient(t, srv)
	base := clocktest.NewFake()
	l := newSim(t, c, "flush", "p", 100, base)
	drive(base, time.Second, 100, l)
	srv.CLI("SCRIPT", "FLUSH")
	drive(base, time.Second, 100, l)
	if st := l.Stats(); st.RedisErrors != 0 {
		t.Fatalf("SCRIPT FLUSH caused %d errors: %v", st.RedisErrors, st.LastError)
	}
	if err := l.SetRate(50); err != nil {
		t.Fatal(err)
	}
	srv.CLI("FLUSHALL")
	got := drive(base, 2*time.Second, 200, l)
	if st := l.Stats(); st.RedisErrors != 0 {
		t.Fatalf("FLUSHALL caused %d errors: %v", st.RedisErrors, st.LastError)
	}
	if v := stateField(t, c, "flush", "ver"); v != 2 {
		t.Fatalf("recreated state has version %v, want the fleet's 2", v)
	}
	if r := 1e6 / stateField(t, c, "flush", "interval"); r != 50 {
		t.Fatalf("recreated state has rate %v, want 50", r)
	}
	// 2 s at 50/s, plus what was held from before the flush.
	if got[0] > 100+50 {
		t.Fatalf("admitted %d in 2 s at 50/s after FLUSHALL", got[0])
	}
	_ = l.Close(context.Background())
}

// TestKillRestartFailOpen: with Redis killed, a fail-open process runs at
// its fallback share R/N_last; after a restart on the same port it returns
// to leasing.
func TestKillRestartFailOpen(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	base := clocktest.NewFake()
	const rate = 400.0
	a := newSim(t, newClient(t, srv), "kill", "a", rate, base, WithCallTimeout(time.Second))
	b := newSim(t, newClient(t, srv), "kill", "b", rate, base, WithCallTimeout(time.Second))
	drive(base, 2*time.Second, 400, a, b)
	if p := a.Stats().Processes; p != 2 {
		t.Fatalf("processes %d, want 2", p)
	}
	held := a.Stats().Held + b.Stats().Held
	srv.Kill()
	got := drive(base, 2*time.Second, 400, a, b)
	sa, sb := a.Stats(), b.Stats()
	if !sa.InFallback || !sb.InFallback {
		t.Fatalf("not in fallback with Redis killed: %+v %+v", sa, sb)
	}
	// Each may admit its share (200/s) for 2 s, plus one free first
	// permit, plus what it held.
	if total := got[0] + got[1]; total > int64(2*rate)+2+held {
		t.Fatalf("admitted %v in 2 s of outage (held %d), want at most R·T + held", got, held)
	}
	if got[0] < 380 || got[1] < 380 {
		t.Fatalf("fail-open admitted only %v in 2 s at a fallback share of 200/s", got)
	}
	srv.Restart()
	drive(base, 3*time.Second, 400, a, b)
	// The fallback starts only once the leases in hand are spent (about a
	// lease duration, 100 ms, at this demand) and once a background lease
	// call has failed, which runs on the real clock while the test moves
	// the fake one: under load it fails a few fake milliseconds later (CI
	// once saw 1.99 s). So it covers the 2 s outage less those.
	if st := a.Stats(); st.InFallback || st.FallbackTime < 2*time.Second-200*time.Millisecond {
		t.Fatalf("a after restart: %+v", st)
	}
	before := a.Stats().PermitsLeased + b.Stats().PermitsLeased
	got = drive(base, time.Second, 400, a, b)
	after := a.Stats().PermitsLeased + b.Stats().PermitsLeased
	if after-before < 300 || got[0]+got[1] > int64(rate)+100 {
		t.Fatalf("after recovery: admitted %v, leased %d", got, after-before)
	}
	_ = a.Close(context.Background())
	_ = b.Close(context.Background())
}

// TestPausedServerFailClosed: a SIGSTOPped server makes calls time out;
// a fail-closed limiter refuses within the call timeout and recovers after
// SIGCONT. Real time: each call waits at most the 100 ms timeout.
func TestPausedServerFailClosed(t *testing.T) {
	srv := redistest.Start(t)
	base := clocktest.NewFake()
	l := newSim(t, newClient(t, srv), "pause", "p", 100, base, WithFailurePolicy(FailClosed), WithCallTimeout(100*time.Millisecond))
	drive(base, time.Second, 50, l)
	srv.Pause()
	base.Jump(5 * time.Second) // whatever was held has lapsed
	start := time.Now()
	if l.TryAcquire(1, 0) {
		t.Fatal("admitted with the server paused")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	_, err := l.Acquire(ctx, 1)
	// The call timeout is the limiter's, not the caller's deadline (2 s,
	// not reached): it must not look like context.DeadlineExceeded.
	if !errors.Is(err, ErrUnavailable) || !errors.Is(err, ErrCallTimeout) || errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Acquire with the server paused: %v; want ErrUnavailable and ErrCallTimeout, not context.DeadlineExceeded", err)
	}
	if d := time.Since(start); d > time.Second {
		t.Fatalf("refusing took %v with a 100 ms call timeout", d)
	}
	srv.Resume()
	got := drive(base, 3*time.Second, 50, l)
	if st := l.Stats(); st.InFallback || got[0] < 100 {
		t.Fatalf("after SIGCONT: admitted %v, %+v", got, st)
	}
	_ = l.Close(context.Background())
}

// TestCluster runs two processes against a 3-primary Redis Cluster through
// redis.ClusterClient: both keys land in one slot, and the bound holds.
func TestCluster(t *testing.T) {
	t.Parallel()
	cl := redistest.StartCluster(t, 3)
	mk := func() *redis.ClusterClient {
		c := redis.NewClusterClient(&redis.ClusterOptions{Addrs: cl.Addrs(), ContextTimeoutEnabled: true})
		t.Cleanup(func() { _ = c.Close() })
		return c
	}
	base := clocktest.NewFake()
	const rate = 500.0
	// A cluster client retries a dead node with back-off; the call
	// timeout keeps each failed call short.
	a := newSim(t, mk(), "clu", "a", rate, base, WithCallTimeout(500*time.Millisecond))
	b := newSim(t, mk(), "clu", "b", rate, base, WithCallTimeout(500*time.Millisecond))
	got := drive(base, 3*time.Second, 500, a, b)
	for _, s := range []*Limiter{a, b} {
		if st := s.Stats(); st.RedisErrors != 0 {
			t.Fatalf("errors on the cluster: %v", st.LastError)
		}
	}
	// Starting empty: admitted ≤ R·T + largest lease.
	bound := rate*3 + float64(max(a.Stats().LargestLease, b.Stats().LargestLease))
	if total := float64(got[0] + got[1]); total > bound || total < 0.97*rate*3 {
		t.Fatalf("cluster admitted %v in 3 s at %v/s (bound %v)", got, rate, bound)
	}
	node := cl.NodeForKey(t, "ratelimit:{clu}:state")
	if n := node.CLI("EXISTS", "ratelimit:{clu}:state", "ratelimit:{clu}:demand"); n != "2" {
		t.Fatalf("keys on the slot owner: %s", n)
	}
	// kill -9 the slot owner: both fall back to half the rate each; the
	// node comes back (empty, same port, same cluster config) and they
	// lease again.
	held := a.Stats().Held + b.Stats().Held
	node.Kill()
	got = drive(base, 2*time.Second, 500, a, b)
	if st := a.Stats(); !st.InFallback || got[0]+got[1] > int64(rate*2)+2+held {
		t.Fatalf("with the slot owner down: admitted %v, %+v", got, st)
	}
	node.Restart()
	cl.WaitOK(t)
	drive(base, 3*time.Second, 500, a, b)
	before := a.Stats().PermitsLeased + b.Stats().PermitsLeased
	got = drive(base, time.Second, 500, a, b)
	if a.Stats().InFallback || b.Stats().InFallback || a.Stats().PermitsLeased+b.Stats().PermitsLeased-before < 400 {
		t.Fatalf("after the node came back: admitted %v, a %+v", got, a.Stats())
	}
	_ = a.Close(context.Background())
	_ = b.Close(context.Background())
}

// TestFailOpenSafeRate: a configured safe rate replaces R / N_last while
// Redis is down.
func TestFailOpenSafeRate(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	base := clocktest.NewFake()
	l := newSim(t, newClient(t, srv), "safe", "p", 1000, base, WithSafeRate(20), WithCallTimeout(time.Second))
	drive(base, time.Second, 100, l)
	srv.Kill()
	base.Jump(5 * time.Second) // what was held has lapsed
	got := drive(base, 2*time.Second, 100, l)
	st := l.Stats()
	// 20/s for 2 s, plus the fallback's free first permit.
	if !st.InFallback || got[0] < 39 || got[0] > 41 || st.FallbackAdmitted != got[0] {
		t.Fatalf("admitted %d in 2 s at a safe rate of 20/s: %+v", got[0], st)
	}
	_ = l.Close(context.Background())
}

// cuttable wraps a connection that a test can cut, as a network partition
// would: reads and writes fail while cut is set.
type cuttable struct {
	net.Conn
	cut *atomic.Bool
}

func (c cuttable) Read(p []byte) (int, error) {
	if c.cut.Load() {
		return 0, errors.New("partitioned")
	}
	return c.Conn.Read(p)
}

func (c cuttable) Write(p []byte) (int, error) {
	if c.cut.Load() {
		return 0, errors.New("partitioned")
	}
	return c.Conn.Write(p)
}

// TestPartition: one of two processes loses Redis. It runs at its fallback
// share R/2; the other, once the lost one's registry entry expires, gets the
// whole rate: the fleet admits up to R·(1 + k/N), as documented.
func TestPartition(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	var cut atomic.Bool
	dialer := &net.Dialer{}
	ca := redis.NewClient(&redis.Options{
		Addr: srv.Addr(), ContextTimeoutEnabled: true, MaxRetries: -1,
		Dialer: func(ctx context.Context, network, addr string) (net.Conn, error) {
			if cut.Load() {
				return nil, errors.New("partitioned")
			}
			c, err := dialer.DialContext(ctx, network, addr)
			return cuttable{c, &cut}, err
		},
	})
	t.Cleanup(func() { _ = ca.Close() })
	base := clocktest.NewFake()
	const rate = 400.0
	a := newSim(t, ca, "part", "a", rate, base)
	b := newSim(t, newClient(t, srv), "part", "b", rate, base)
	drive(base, 2*time.Second, 400, a, b)
	held := a.Stats().Held + b.Stats().Held
	cut.Store(true)
	// Registry TTL is 3 s: after it, b alone is registered.
	first := drive(base, 4*time.Second, 400, a, b)
	last := drive(base, 2*time.Second, 400, a, b)
	if !a.Stats().InFallback || b.Stats().InFallback {
		t.Fatalf("fallback: a %v, b %v", a.Stats().InFallback, b.Stats().InFallback)
	}
	if p := b.Stats().Processes; p != 1 {
		t.Fatalf("b sees %d processes after a's entry expired", p)
	}
	// a: R/2 throughout (one free first permit); b: up to R once alone.
	if last[0] < 395 || last[0] > 401 {
		t.Fatalf("partitioned a admitted %d in 2 s at its fallback share of 200/s", last[0])
	}
	if last[1] < 0.97*2*rate {
		t.Fatalf("b admitted %d in 2 s, want about the whole rate once alone", last[1])
	}
	total := first[0] + first[1] + last[0] + last[1]
	if float64(total) > rate*6*1.5+float64(held)+2 {
		t.Fatalf("the fleet admitted %d in 6 s of partition, more than R·T·(1 + k/N) + held", total)
	}
	t.Logf("partition: first 4 s %v, last 2 s %v", first, last)
	_ = a.Close(context.Background())
	_ = b.Close(context.Background())
}

// TestNoRefundToARecreatedState: permits leased before FLUSHALL are not
// refunded into the state recreated after it (it never debited them).
func TestNoRefundToARecreatedState(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	c := newClient(t, srv)
	base := clocktest.NewFake()
	a := newSim(t, c, "reborn", "a", 100, base, WithMaxBurstSeconds(0))
	drive(base, time.Second, 200, a)
	if a.Stats().Held == 0 {
		t.Fatal("nothing held")
	}
	srv.CLI("FLUSHALL")
	base.Jump(time.Millisecond)
	b := newSim(t, newClient(t, srv), "reborn", "b", 100, base, WithMaxBurstSeconds(0))
	drive(base, 200*time.Millisecond, 200, b)
	next := stateField(t, c, "reborn", "next")
	if err := a.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	if got := stateField(t, c, "reborn", "next"); got != next {
		t.Fatalf("a's old permits were refunded into the new state: next %v -> %v", next, got)
	}
	_ = b.Close(context.Background())
}

// TestFailOpenBeforeFirstLease: a process that has never had a lease reply
// knows no process count, so failing open without a safe rate it refuses
// (never the full R per process); with a safe rate it runs at that rate.
// Both lease as soon as Redis answers.
func TestFailOpenBeforeFirstLease(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	srv.Kill()
	base := clocktest.NewFake()
	const rate = 1000.0
	bare := newSim(t, newClient(t, srv), "early", "bare", rate, base, WithCallTimeout(time.Second))
	safe := newSim(t, newClient(t, srv), "early", "safe", rate, base, WithSafeRate(20), WithCallTimeout(time.Second))
	_, err := bare.Acquire(context.Background(), 1)
	if !errors.Is(err, ErrUnavailable) || !strings.Contains(err.Error(), "no fallback rate") {
		t.Fatalf("Acquire before any lease reply, Redis down, no safe rate: %v; want an error wrapping ErrUnavailable", err)
	}
	got := drive(base, 2*time.Second, 500, bare, safe)
	sb, ss := bare.Stats(), safe.Stats()
	if got[0] != 0 || sb.FallbackAdmitted != 0 || !sb.InFallback || sb.RedisErrors == 0 {
		t.Fatalf("without a safe rate, admitted %d in 2 s with Redis never reached: %+v", got[0], sb)
	}
	// 20/s for 2 s, plus the fallback's free first permit.
	if got[1] < 39 || got[1] > 41 || ss.FallbackAdmitted != got[1] {
		t.Fatalf("with a safe rate of 20/s, admitted %d in 2 s: %+v", got[1], ss)
	}
	srv.Restart()
	drive(base, 2*time.Second, 200, bare, safe) // probes find Redis again
	got = drive(base, time.Second, 200, bare, safe)
	sb, ss = bare.Stats(), safe.Stats()
	if sb.InFallback || ss.InFallback || sb.Processes != 2 || got[0] < 150 || got[1] < 150 {
		t.Fatalf("after Redis came back: admitted %v; bare %+v, safe %+v", got, sb, ss)
	}
	if _, err := bare.Acquire(context.Background(), 1); err != nil {
		t.Fatalf("Acquire once Redis answers: %v", err)
	}
	_ = bare.Close(context.Background())
	_ = safe.Close(context.Background())
}

// TestFallbackAdmitsItsShare: a fail-open process whose callers poll with
// TryAcquire(1, 0) faster than its fallback rate admits the whole fallback
// rate, whatever the polling period. With no burst in the fallback limiter
// a caller polling every 8.3 ms at a share of 50/s got one permit per
// 25 ms (40/s), and one polling every 16.7 ms one per 33 ms (30/s).
func TestFallbackAdmitsItsShare(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	base := clocktest.NewFake()
	const share = 50.0
	fast := newSim(t, newClient(t, srv), "fbshare", "fast", 1000, base, WithSafeRate(share), WithCallTimeout(time.Second))
	slow := newSim(t, newClient(t, srv), "fbshare", "slow", 1000, base, WithSafeRate(share), WithCallTimeout(time.Second))
	drive(base, time.Second, 100, fast, slow)
	srv.Kill()
	base.Jump(5 * time.Second) // what was held has lapsed
	// Both callers poll at once, each at its own rate, in 1 ms steps.
	poll := func(d time.Duration) []int64 {
		got := make([]int64, 2)
		for k := 1; k <= int(d/time.Millisecond); k++ {
			for i, l := range []*Limiter{fast, slow} {
				perSecond := []float64{120, 60}[i]
				for j := int(float64(k)*perSecond/1000) - int(float64(k-1)*perSecond/1000); j > 0; j-- {
					if l.TryAcquire(1, 0) {
						got[i]++
					}
				}
			}
			base.Jump(time.Millisecond)
		}
		return got
	}
	// Into fallback (one refused call each), then measure whole seconds.
	poll(time.Second)
	fa, sa := fast.Stats().FallbackAdmitted, slow.Stats().FallbackAdmitted
	got := poll(2 * time.Second)
	if !fast.Stats().InFallback || !slow.Stats().InFallback {
		t.Fatal("not in fallback with Redis killed")
	}
	if d := fast.Stats().FallbackAdmitted - fa; d != got[0] {
		t.Fatalf("fast: admitted %d, of which %d by the fallback", got[0], d)
	}
	if d := slow.Stats().FallbackAdmitted - sa; d != got[1] {
		t.Fatalf("slow: admitted %d, of which %d by the fallback", got[1], d)
	}
	// 2 s at 50/s, ± one permit for where the seconds fall.
	for i, name := range []string{"polling at 120/s", "polling at 60/s"} {
		if got[i] < 99 || got[i] > 101 {
			t.Errorf("%s: admitted %d in 2 s at a fallback rate of 50/s, want 100", name, got[i])
		}
	}
	_ = fast.Close(context.Background())
	_ = slow.Close(context.Background())
}

// TestCallTimeoutIsNotTheCallersDeadline: a Redis call that outlives
// WithCallTimeout is reported as ErrCallTimeout, never as
// context.DeadlineExceeded (package shape turns that into "i/o timeout: the
// wait would pass the deadline" although the caller set none), while a
// deadline the caller did set still surfaces as context.DeadlineExceeded.
// Real time: each call waits at most the 50 ms timeout.
func TestCallTimeoutIsNotTheCallersDeadline(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	srv.Pause()
	closed, err := New(newClient(t, srv), "ctimeout", 100, WithFailurePolicy(FailClosed), WithCallTimeout(50*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	_, err = closed.Acquire(context.Background(), 1)
	if !errors.Is(err, ErrUnavailable) || !errors.Is(err, ErrCallTimeout) || errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("fail-closed Acquire, no deadline, Redis paused: %v; want ErrUnavailable and ErrCallTimeout, not context.DeadlineExceeded", err)
	}
	if err := closed.SetRate(50); !errors.Is(err, ErrCallTimeout) || errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("SetRate with Redis paused: %v; want ErrCallTimeout, not context.DeadlineExceeded", err)
	}
	// Fail open at 1/s: the first permit is free, the next one is a
	// second away, past the caller's 200 ms deadline.
	open, err := New(newClient(t, srv), "ctimeout", 100, WithSafeRate(1), WithCallTimeout(50*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := open.Acquire(context.Background(), 1); err != nil {
		t.Fatalf("fail-open Acquire with Redis paused: %v", err)
	}
	if st := open.Stats(); !st.InFallback || !errors.Is(st.LastError, ErrCallTimeout) || errors.Is(st.LastError, context.DeadlineExceeded) {
		t.Fatalf("fail-open with Redis paused: in fallback %v, last error %v", st.InFallback, st.LastError)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	if _, err := open.Acquire(ctx, 1); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("fail-open Acquire past the caller's deadline: %v; want context.DeadlineExceeded", err)
	}
	srv.Resume()
	_ = closed.Close(context.Background())
	_ = open.Close(context.Background())
}
