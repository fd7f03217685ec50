package throttle

import (
	"context"
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/smoothrate/ratelimit/internal/redistest"
)

func newClusterClient(t testing.TB, c *redistest.Cluster) *redis.ClusterClient {
	t.Helper()
	cc := redis.NewClusterClient(&redis.ClusterOptions{
		Addrs:                 c.Addrs(),
		ContextTimeoutEnabled: true,
		MaxRetries:            -1,
		DialTimeout:           2 * time.Second,
	})
	t.Cleanup(func() { _ = cc.Close() })
	return cc
}

// TestRedisCluster runs the store on a 3-node Redis Cluster: the
// differential test against the definition (keys on every node), then
// AllowAll with keys in one slot and in several.
func TestRedisCluster(t *testing.T) {
	cluster := redistest.StartCluster(t, 3)
	cc := newClusterClient(t, cluster)
	ctx := context.Background()

	t.Run("definition", func(t *testing.T) {
		for _, alg := range allAlgorithms {
			clk := newSetClock()
			ref := &refStore{clock: clk, keys: map[cacheKey]*refEntry{}}
			rs := fakeTimeStore(cc, WithStoreClock(clk), WithKeyPrefix(fmt.Sprintf("cl%d:", redisPrefix.Add(1))))
			// AllowAll's checks land in several slots here: with
			// nobody else writing, the two rounds decide as one.
			runDifferential(t, rand.New(rand.NewPCG(7, uint64(alg))), alg, clk, ref, rs, true)
		}
		// The keys really are spread over the nodes.
		nodes := map[int]bool{}
		for _, k := range []string{"cl1:gcra:a", "cl1:gcra:b", "cl1:gcra:c", "cl1:gcra:f", "cl1:gcra:g", "cl1:gcra:h"} {
			nodes[cluster.NodeForKey(t, k).Port] = true
		}
		if len(nodes) < 2 {
			t.Fatalf("test keys all on one node")
		}
	})

	log := newCallLog()
	cc.AddHook(log)
	clk := newSetClock()
	s := redisStore(cc, WithStoreClock(clk))
	ip := mustNew(t, s, FixedWindow, PerMinute(2))
	route := mustNew(t, s, FixedWindow, PerMinute(3))
	peek := func(lim *Limiter, key string) int { return mustAllow(t, lim, key, 0).Remaining }

	t.Run("one slot", func(t *testing.T) {
		log.reset()
		ds, err := AllowAll(ctx, Check{Limiter: ip, Key: "{1.2.3.4}:ip"}, Check{Limiter: route, Key: "{1.2.3.4}:route:/x", N: 1})
		if err != nil || !ds.Allowed() {
			t.Fatalf("AllowAll: %v, %v", ds, err)
		}
		if n := log.count("evalsha") + log.count("eval"); n != 1 {
			t.Fatalf("%d script calls for one slot, want 1 (%v)", n, log.calls)
		}
	})

	// Keys without a common tag: asked first without counting, then
	// counted slot by slot.
	a, b := "1.2.3.5", "/y"
	if keySlot(s.redisKey(FixedWindow, a)) == keySlot(s.redisKey(FixedWindow, b)) {
		t.Fatal("test keys share a slot")
	}
	t.Run("several slots", func(t *testing.T) {
		log.reset()
		ds, err := AllowAll(ctx, Check{Limiter: ip, Key: a, N: 2}, Check{Limiter: route, Key: b, N: 1})
		if err != nil || !ds.Allowed() {
			t.Fatalf("AllowAll: %v, %v", ds, err)
		}
		if n := log.count("evalsha") + log.count("eval"); n != 4 {
			t.Fatalf("%d script calls for two slots, want 4 (%v)", n, log.calls)
		}
		if peek(ip, a) != 0 || peek(route, b) != 2 {
			t.Fatalf("not counted: %d %d", peek(ip, a), peek(route, b))
		}
		// The IP is now over its limit: nothing is counted on the route.
		ds, err = AllowAll(ctx, Check{Limiter: route, Key: b, N: 1}, Check{Limiter: ip, Key: a, N: 1})
		if err != nil || ds.Allowed() || !ds[0].Allowed || ds[1].Allowed {
			t.Fatalf("AllowAll over the IP limit: %+v, %v", ds, err)
		}
		if peek(route, b) != 2 {
			t.Fatalf("a refused AllowAll counted the route: remaining %d", peek(route, b))
		}
	})

	t.Run("race between the rounds", func(t *testing.T) {
		// Another process takes the last unit of the second slot's key
		// after the first round said yes: the first slot stays counted
		// (over-counting), the result is refused (never over-admitting).
		other := redisStore(cc, WithStoreClock(clk))
		otherRoute := mustNew(t, other, FixedWindow, PerMinute(3))
		c, r := "1.2.3.6", "/z"
		mustAllow(t, otherRoute, r, 2)
		groups := s.groups([]request{{p: &ip.p, key: c}, {p: &route.p, key: r}})
		secondIsRoute := groups[1][0] == 1
		firstCommit := true
		log.before = func(cmd redis.Cmder) {
			args := cmd.Args()
			if len(args) > 5 && args[0] == "evalsha" && fmt.Sprint(args[5]) == "1" && firstCommit {
				firstCommit = false
				// The first commit is about to run: take the unit.
				if secondIsRoute {
					mustAllow(t, otherRoute, r, 1)
				} else {
					mustAllow(t, mustNew(t, other, FixedWindow, PerMinute(2)), c, 2)
				}
			}
		}
		defer func() { log.before = nil }()
		ds, err := AllowAll(ctx, Check{Limiter: ip, Key: c, N: 1}, Check{Limiter: route, Key: r, N: 1})
		if err != nil || ds.Allowed() {
			t.Fatalf("AllowAll after a race: %+v, %v; want refused", ds, err)
		}
		if secondIsRoute {
			if peek(ip, c) != 1 || peek(route, r) != 0 {
				t.Fatalf("ip remaining %d (want 1: counted), route %d", peek(ip, c), peek(route, r))
			}
		} else if peek(route, r) != 0 || peek(ip, c) != 0 {
			t.Fatalf("route remaining %d (want 0: counted), ip %d", peek(route, r), peek(ip, c))
		}
	})
}
