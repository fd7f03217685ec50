package distributed

import (
	"context"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/smoothrate/ratelimit/clocktest"
	"github.com/smoothrate/ratelimit/internal/redistest"
)

// timedDrive is drive that also returns the longest single TryAcquire in
// real time: a call stuck on a dead or demoted node would show here (or
// hang the test) instead of passing unnoticed.
func timedDrive(base *clocktest.Fake, d time.Duration, perSecond float64, lims ...*Limiter) ([]int64, time.Duration) {
	got := make([]int64, len(lims))
	var longest time.Duration
	steps := int(d / time.Millisecond)
	for k := 1; k <= steps; k++ {
		due := int(float64(k)*perSecond/1000) - int(float64(k-1)*perSecond/1000)
		for i, l := range lims {
			for j := 0; j < due; j++ {
				start := time.Now()
				ok := l.TryAcquire(1, 0)
				longest = max(longest, time.Since(start))
				if ok {
					got[i]++
				}
			}
		}
		base.Jump(time.Millisecond)
	}
	return got, longest
}

// TestClusterFailover kills -9 the primary that serves the limiter's slot
// in a 3-primary, 3-replica Redis Cluster. While the slot has no primary
// the two processes fall back (fail-open, each at its share R/N_last) and
// every call returns within the call timeout; once the replica is promoted
// they lease from it again and the fleet runs at R.
func TestClusterFailover(t *testing.T) {
	// A 1 s node timeout: the replica is promoted about 2 s after the
	// kill instead of the default 15 s.
	cl := redistest.StartClusterWithReplicas(t, 3, 1, time.Second)
	// go-redis (v9.23.0) reloads its slot map on MOVED, ASK or
	// READONLY replies, and otherwise only every
	// ClusterStateReloadInterval (60 s by default): a refused connection
	// to a dead primary does not trigger a reload, so with the default
	// the client would keep dialling the dead node for up to a minute
	// after the promotion. A short interval is the client setting a
	// deployment that wants quick failover needs.
	mk := func() *redis.ClusterClient {
		c := redis.NewClusterClient(&redis.ClusterOptions{
			Addrs:                      cl.Addrs(),
			ContextTimeoutEnabled:      true,
			ClusterStateReloadInterval: 250 * time.Millisecond,
		})
		t.Cleanup(func() { _ = c.Close() })
		return c
	}
	const (
		rate     = 500.0
		key      = "ratelimit:{fo}:state"
		callTime = 300 * time.Millisecond
	)
	// A call may take the call timeout plus scheduling on a busy,
	// race-instrumented machine, never more.
	const callBound = callTime + 700*time.Millisecond
	base := clocktest.NewFake()
	a := newSim(t, mk(), "fo", "a", rate, base, WithCallTimeout(callTime))
	b := newSim(t, mk(), "fo", "b", rate, base, WithCallTimeout(callTime))
	got, longest := timedDrive(base, 2*time.Second, rate, a, b)
	for _, s := range []*Limiter{a, b} {
		if st := s.Stats(); st.RedisErrors != 0 || st.Processes != 2 {
			t.Fatalf("before the fault: %+v", st)
		}
	}
	if total := got[0] + got[1]; total < int64(0.97*rate*2) || longest > callBound {
		t.Fatalf("before the fault: admitted %v in 2 s at %v/s, longest call %v", got, rate, longest)
	}

	old := cl.NodeForKey(t, key)
	if n := old.CLI("EXISTS", key); n != "1" {
		t.Fatalf("state key on the slot owner: %s", n)
	}
	sa0, sb0 := a.Stats(), b.Stats()
	held := sa0.Held + sb0.Held
	largest := max(sa0.LargestLease, sb0.LargestLease)
	old.Kill()
	killed := time.Now()

	// The outage: the slot's primary is gone and not yet replaced.
	// Calls fail fast (connection refused) or at the call timeout; the
	// limiters fall back and admit no more than the fleet rate, plus the
	// fallbacks' free first permits, what they held, and one lease each
	// should the replica already have taken over near the end.
	got, longest = timedDrive(base, time.Second, rate, a, b)
	sa, sb := a.Stats(), b.Stats()
	if longest > callBound {
		t.Fatalf("a call took %v during the outage, call timeout %v", longest, callTime)
	}
	if sa.RedisErrors == 0 || sb.RedisErrors == 0 || sa.FallbackAdmitted == 0 || sb.FallbackAdmitted == 0 {
		t.Fatalf("no fallback with the slot owner killed: a %+v, b %+v", sa, sb)
	}
	if total := got[0] + got[1]; total > int64(rate)+2+held+2*largest {
		t.Fatalf("admitted %v in 1 s of outage at %v/s (held %d, largest lease %d)", got, rate, held, largest)
	}
	if got[0] < int64(0.8*rate/2) || got[1] < int64(0.8*rate/2) {
		t.Fatalf("fail-open admitted only %v in 1 s at a share of %v/s each", got, rate/2)
	}

	// The replica sees the primary fail after the node timeout, wins the
	// election and takes the slot.
	promoted := cl.WaitFailover(t, key, 15*time.Second)
	if promoted == old {
		t.Fatal("the killed node still serves the slot")
	}
	t.Logf("outage: admitted %v in 1 s of fake time (held %d before); replica %s promoted %v after the kill",
		got, held, promoted.Addr(), time.Since(killed).Round(time.Millisecond))

	// The clients learn the new slot map on their next failed call and
	// the limiters leave fallback on their next retry. Drive fake time
	// in short rounds until both lease again, within a real-time bound.
	leasesAt := sa.Leases + sb.Leases
	var slowest time.Duration
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		_, longest = timedDrive(base, 200*time.Millisecond, rate, a, b)
		slowest = max(slowest, longest)
		sa, sb = a.Stats(), b.Stats()
		assert.False(c, sa.InFallback, "a in fallback: %+v", sa)
		assert.False(c, sb.InFallback, "b in fallback: %+v", sb)
		assert.Greater(c, sa.Leases+sb.Leases, leasesAt, "no lease since the outage")
	}, 10*time.Second, time.Millisecond, "still not leasing 10 s after the promotion")
	if slowest > callBound {
		t.Fatalf("a call took %v after the failover, call timeout %v", slowest, callTime)
	}

	t.Logf("leasing again %v after the kill", time.Since(killed).Round(time.Millisecond))

	// Steady state on the new primary: the fleet runs at R from leases,
	// with no new errors. The shared bucket filled while nobody leased
	// from it, so on top of R·T it may hand out what it stored: up to
	// one second of permits (the default WithMaxBurstSeconds).
	errsAt := sa.RedisErrors + sb.RedisErrors
	leasedAt := sa.PermitsLeased + sb.PermitsLeased
	remoteAt := sa.RemoteDecisions + sb.RemoteDecisions + sa.LocalDecisions + sb.LocalDecisions
	largest = max(sa.LargestLease, sb.LargestLease)
	held = sa.Held + sb.Held
	got, longest = timedDrive(base, 2*time.Second, rate, a, b)
	sa, sb = a.Stats(), b.Stats()
	if sa.InFallback || sb.InFallback || sa.RedisErrors+sb.RedisErrors != errsAt || longest > callBound {
		t.Fatalf("after the failover: longest call %v, a %+v, b %+v", longest, sa, sb)
	}
	if leased := sa.PermitsLeased + sb.PermitsLeased - leasedAt; leased < int64(0.9*rate*2) {
		t.Fatalf("leased %d in 2 s after the failover at %v/s", leased, rate)
	}
	if sa.RemoteDecisions+sb.RemoteDecisions+sa.LocalDecisions+sb.LocalDecisions <= remoteAt {
		t.Fatalf("no decisions after the failover: a %+v, b %+v", sa, sb)
	}
	if total := got[0] + got[1]; total < int64(0.95*rate*2) || total > int64(rate*2+rate*1)+held+2*largest {
		t.Fatalf("admitted %v in 2 s after the failover at %v/s (bound R·T + 1 s stored + held %d + 2 leases of %d)", got, rate, held, largest)
	}
	t.Logf("after the failover: admitted %v in 2 s, leased %d", got, sa.PermitsLeased+sb.PermitsLeased-leasedAt)
	if n := promoted.CLI("EXISTS", key); n != "1" {
		t.Fatalf("state key on the promoted primary: %s", n)
	}
	_ = a.Close(context.Background())
	_ = b.Close(context.Background())
}
