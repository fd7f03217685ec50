package rlqs

import (
	"context"
	"errors"
	"math"
	"math/rand/v2"
	"strings"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"

	"github.com/smoothrate/ratelimit/internal/redistest"
)

func newRedis(t testing.TB, addr string, opts ...func(*redis.Options)) *redis.Client {
	t.Helper()
	o := &redis.Options{Addr: addr, ContextTimeoutEnabled: true, MaxRetries: -1, DialTimeout: 2 * time.Second}
	for _, f := range opts {
		f(o)
	}
	c := redis.NewClient(o)
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// scripted is a RedisStore whose script runs at the explicit time *now
// (µs), for deterministic tests.
func scripted(t testing.TB, c redis.UniversalClient, now *int64) *RedisStore {
	t.Helper()
	s, err := NewRedisStore(c)
	if err != nil {
		t.Fatal(err)
	}
	s.scriptTime = func() int64 { return *now }
	return s
}

const testTimeout = time.Second

func mustClaim(t testing.TB, s *RedisStore, c claim) grant {
	t.Helper()
	g, err := s.claim(testTimeout, &c)
	if err != nil {
		t.Fatal(err)
	}
	return g
}

// TestClaims: two servers claim on one bucket of 100/s. Their budgets
// follow the max-min shares of all their clients together (A has one
// client, B three, all wanting more than the limit: a quarter each, so A
// gets 25 and B 75, not half each), never sum above the limit, and never
// fall below a server's floor. A server that stops claiming keeps its
// claim until its hold ends; a release gives it back.
func TestClaims(t *testing.T) {
	srv := redistest.Start(t)
	c := newRedis(t, srv.Addr())
	now := int64(1e15)
	s := scripted(t, c, &now)
	inf := math.Inf(1)
	key := "ratelimit:rlqs:{t}"
	hold := 4 * time.Second

	a := mustClaim(t, s, claim{server: "a", key: key, rate: 100, hold: hold, demands: []float64{inf}})
	if a.budget != 100 || a.servers != 1 || a.clients != 1 {
		t.Fatalf("a alone: %+v", a)
	}
	// B's clients arrive; A's 100 is committed to A's client (its floor).
	b := mustClaim(t, s, claim{server: "b", key: key, rate: 100, hold: hold, demands: []float64{inf, inf, inf}})
	if b.budget != 0 || b.servers != 2 || b.clients != 4 {
		t.Fatalf("b while a holds everything: %+v", b)
	}
	now += 50e3
	// A lowers its client (the floor stays 100 until it settles).
	a = mustClaim(t, s, claim{server: "a", key: key, rate: 100, floor: 100, hold: hold, demands: []float64{inf}, known: true})
	if a.budget != 100 {
		t.Fatalf("a while its decrease settles: %+v", a)
	}
	now += 250e3
	a = mustClaim(t, s, claim{server: "a", key: key, rate: 100, floor: 25, hold: hold, demands: []float64{inf}, known: true})
	if math.Abs(a.budget-25) > 1e-9 {
		t.Fatalf("a settled: %+v", a)
	}
	b = mustClaim(t, s, claim{server: "b", key: key, rate: 100, hold: hold, demands: []float64{inf, inf, inf}, known: true})
	if math.Abs(b.budget-75) > 1e-9 {
		t.Fatalf("b once a settled: %+v", b)
	}
	// Demands below the level: B's clients want 10 each (30), so A may
	// have the rest, and what is left over is spread over the four.
	b = mustClaim(t, s, claim{server: "b", key: key, rate: 100, floor: 75, hold: hold, demands: []float64{10, 10, 10}, known: true})
	if b.budget != 75 {
		t.Fatalf("b keeps its floor: %+v", b)
	}
	b = mustClaim(t, s, claim{server: "b", key: key, rate: 100, floor: 30, hold: hold, demands: []float64{10, 10, 10}, known: true})
	a = mustClaim(t, s, claim{server: "a", key: key, rate: 100, floor: 25, hold: hold, demands: []float64{inf}, known: true})
	if b.budget < 30 || b.budget > 40 || a.budget+b.budget > 100+1e-9 || a.budget < 60 {
		t.Fatalf("a %+v, b %+v", a, b)
	}
	// B dies: its claim counts until its hold ends, then A may have it.
	now += hold.Microseconds() - 1
	if a2 := mustClaim(t, s, claim{server: "a", key: key, rate: 100, floor: a.budget, hold: hold, demands: []float64{inf}, known: true}); a2.budget+b.budget > 100+1e-9 || a2.servers != 2 {
		t.Fatalf("before b's hold ends: %+v", a2)
	}
	now += 2
	if a2 := mustClaim(t, s, claim{server: "a", key: key, rate: 100, floor: a.budget, hold: hold, demands: []float64{inf}, known: true}); a2.budget != 100 || a2.servers != 1 {
		t.Fatalf("after b's hold: %+v", a2)
	}
	// A releases: its floor counts for the hold given, then nothing.
	mustClaim(t, s, claim{server: "a", key: key, rate: 100, floor: 100, hold: time.Second, release: true})
	if g := mustClaim(t, s, claim{server: "c", key: key, rate: 100, hold: hold, demands: []float64{inf}}); g.budget != 0 {
		t.Fatalf("c while a's release holds: %+v", g)
	}
	now += 1e6 + 1
	if g := mustClaim(t, s, claim{server: "c", key: key, rate: 100, hold: hold, demands: []float64{inf}}); g.budget != 100 {
		t.Fatalf("c after a's release: %+v", g)
	}
	mustClaim(t, s, claim{server: "c", key: key, rate: 100, release: true})
	if n, _ := c.HLen(context.Background(), key).Result(); n != 1 { // only 'b', the key's birth
		t.Fatalf("%d fields left", n)
	}
	if ttl := c.PTTL(context.Background(), key).Val(); ttl <= 0 || ttl > 10*time.Second {
		t.Fatalf("key TTL %v", ttl)
	}
}

// TestClaimsAfterLoss: a server that claimed before and finds the key gone
// (Redis restarted empty) keeps its floor and raises nobody until every
// live server has had time to claim again.
func TestClaimsAfterLoss(t *testing.T) {
	srv := redistest.Start(t)
	c := newRedis(t, srv.Addr())
	now := int64(1e15)
	s := scripted(t, c, &now)
	key := "ratelimit:rlqs:{loss}"
	inf := math.Inf(1)
	g := mustClaim(t, s, claim{server: "a", key: key, rate: 100, floor: 40, hold: 4 * time.Second, demands: []float64{inf}, known: true})
	if g.budget != 40 {
		t.Fatalf("right after the loss: %+v", g)
	}
	now += liveDemand.Microseconds() - 1
	if g := mustClaim(t, s, claim{server: "b", key: key, rate: 100, floor: 50, hold: 4 * time.Second, demands: []float64{inf}, known: true}); g.budget != 50 {
		t.Fatalf("b within the window: %+v", g)
	}
	now += 2
	if g := mustClaim(t, s, claim{server: "a", key: key, rate: 100, floor: 40, hold: 4 * time.Second, demands: []float64{inf}, known: true}); g.budget != 50 {
		t.Fatalf("a after the window: %+v", g)
	}
}

// TestClaimsNeverOverCommit drives three servers through random claims:
// floors at most what each was granted (a server only commits what it
// holds), random demands and holds, time moving on. The claims that count
// never sum above the limit.
func TestClaimsNeverOverCommit(t *testing.T) {
	srv := redistest.Start(t)
	c := newRedis(t, srv.Addr())
	now := int64(1e15)
	s := scripted(t, c, &now)
	rng := rand.New(rand.NewPCG(9, 9))
	const rate = 100.0
	key := "ratelimit:rlqs:{prop}"
	type server struct {
		budget float64
		until  int64
	}
	servers := map[string]*server{"a": {}, "b": {}, "c": {}}
	for range 2000 {
		name := []string{"a", "b", "c"}[rng.IntN(3)]
		sv := servers[name]
		if sv.until <= now {
			sv.budget = 0 // its claim lapsed: it commits nothing any more
		}
		floor := sv.budget * rng.Float64()
		var demands []float64
		for range rng.IntN(4) {
			demands = append(demands, rng.ExpFloat64()*40)
		}
		hold := time.Duration(rng.IntN(3000)) * time.Millisecond
		g := mustClaim(t, s, claim{server: name, key: key, rate: rate, floor: floor, hold: hold, demands: demands, known: true})
		if g.budget < floor {
			t.Fatalf("budget %v below floor %v", g.budget, floor)
		}
		sv.budget, sv.until = g.budget, now+hold.Microseconds()
		sum := 0.0
		for _, o := range servers {
			if o.until > now {
				sum += o.budget
			}
		}
		if sum > rate+1e-9 {
			t.Fatalf("claims sum to %v", sum)
		}
		now += int64(rng.IntN(500e3))
	}
}

// TestRedisMisconfigured: Check tells a Redis set up wrong (an error
// wrapping ErrMisconfigured, which a command exits 2 on) from one that is
// away (ErrUnavailable), and a key of another type is refused, untouched.
func TestRedisMisconfigured(t *testing.T) {
	srv := redistest.Start(t)
	srv.CLI("CONFIG", "SET", "requirepass", "secret")
	ctx := context.Background()
	for _, tc := range []struct {
		name string
		c    redis.UniversalClient
		want error
	}{
		{"no password", newRedis(t, srv.Addr()), ErrMisconfigured},
		{"wrong password", newRedis(t, srv.Addr(), func(o *redis.Options) { o.Password = "wrong" }), ErrMisconfigured},
		{"no such database", newRedis(t, srv.Addr(), func(o *redis.Options) { o.Password, o.DB = "secret", 99 }), ErrMisconfigured},
		{"a cluster client on a single server", redis.NewClusterClient(&redis.ClusterOptions{Addrs: []string{srv.Addr()}, Password: "secret"}), ErrMisconfigured},
		{"nobody listens", newRedis(t, redistest.ClosedAddr(t)), ErrUnavailable},
		{"set up right", newRedis(t, srv.Addr(), func(o *redis.Options) { o.Password = "secret" }), nil},
	} {
		s, err := NewRedisStore(tc.c)
		if err != nil {
			t.Fatal(err)
		}
		err = s.Check(ctx)
		if tc.want == nil && err != nil || tc.want != nil && (!errors.Is(err, tc.want) || !errors.Is(err, ErrStore)) {
			t.Errorf("%s: %v, want %v", tc.name, err, tc.want)
		}
		if errors.Is(err, ErrMisconfigured) && errors.Is(err, ErrUnavailable) {
			t.Errorf("%s: %v is both", tc.name, err)
		}
	}
	c := newRedis(t, srv.Addr(), func(o *redis.Options) { o.Password = "secret" })
	if err := c.Set(ctx, "ratelimit:rlqs:{x}", "theirs", 0).Err(); err != nil {
		t.Fatal(err)
	}
	s, _ := NewRedisStore(c)
	_, err := s.claim(testTimeout, &claim{server: "a", key: "ratelimit:rlqs:{x}", rate: 1, hold: time.Second})
	if !errors.Is(err, ErrMisconfigured) || !strings.Contains(err.Error(), "holds a string") {
		t.Errorf("a string under the key: %v", err)
	}
	if v := c.Get(ctx, "ratelimit:rlqs:{x}").Val(); v != "theirs" {
		t.Errorf("the foreign key was changed: %q", v)
	}
	if _, err := NewRedisStore(nil); !errors.Is(err, ErrInvalidOption) {
		t.Errorf("nil client: %v", err)
	}
	if err := s.Check(nil); err == nil { //nolint:staticcheck // a nil context is refused, not a panic
		t.Error("nil context accepted")
	}
}

// TestMiniredis: the script runs on miniredis (no struct library: the
// prelude packs in pure Lua), for tests of programs that use the store.
func TestMiniredis(t *testing.T) {
	m := miniredis.RunT(t)
	c := newRedis(t, m.Addr())
	s, err := NewRedisStore(c)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Check(context.Background()); err != nil {
		t.Fatal(err)
	}
	key := "ratelimit:rlqs:{m}"
	a := mustClaim(t, s, claim{server: "a", key: key, rate: 10, hold: time.Second, demands: []float64{math.Inf(1), 2}})
	b := mustClaim(t, s, claim{server: "b", key: key, rate: 10, hold: time.Second, demands: []float64{3}})
	if a.budget != 10 || b.budget != 0 || b.clients != 3 || b.servers != 2 {
		t.Fatalf("a %+v, b %+v", a, b)
	}
}

// TestCluster: on a 3-primary Redis Cluster, through redis.ClusterClient,
// each bucket is one key (one slot) on whichever node owns it, and two
// servers share each bucket's limit as on a single Redis.
func TestCluster(t *testing.T) {
	cl := redistest.StartCluster(t, 3)
	c := redis.NewClusterClient(&redis.ClusterOptions{Addrs: cl.Addrs(), ContextTimeoutEnabled: true})
	t.Cleanup(func() { _ = c.Close() })
	now := int64(1e15)
	s := scripted(t, c, &now)
	if err := s.Check(context.Background()); err != nil {
		t.Fatal(err)
	}
	inf := math.Inf(1)
	for _, key := range []string{"ratelimit:rlqs:{a}", "ratelimit:rlqs:{b}", "ratelimit:rlqs:{c}"} {
		a := mustClaim(t, s, claim{server: "one", key: key, rate: 10, hold: time.Second, demands: []float64{inf}})
		b := mustClaim(t, s, claim{server: "two", key: key, rate: 10, hold: time.Second, demands: []float64{inf}})
		if a.budget != 10 || b.budget != 0 || b.servers != 2 || b.target != 5 {
			t.Fatalf("%s: one %+v, two %+v", key, a, b)
		}
		if n := cl.NodeForKey(t, key).CLI("EXISTS", key); n != "1" {
			t.Fatalf("%s is not on the node that owns its slot", key)
		}
	}
}
