package rls

import (
	"context"
	"errors"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"github.com/redis/go-redis/v9"
	"google.golang.org/grpc/codes"
	grpcstatus "google.golang.org/grpc/status"

	"github.com/smoothrate/ratelimit/internal/redistest"
)

// roundTrips counts what a go-redis client sends: one per command sent
// alone, one per pipeline.
type roundTrips struct{ n atomic.Int64 }

func (r *roundTrips) DialHook(next redis.DialHook) redis.DialHook { return next }
func (r *roundTrips) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		r.n.Add(1)
		return next(ctx, cmd)
	}
}
func (r *roundTrips) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		r.n.Add(1)
		return next(ctx, cmds)
	}
}

// commandCalls reads how many times the server ran cmd (scripts' calls
// included) from INFO commandstats.
func commandCalls(t *testing.T, c *redis.Client, cmd string) int {
	t.Helper()
	info, err := c.Info(context.Background(), "commandstats").Result()
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(info, "\n") {
		if rest, ok := strings.CutPrefix(line, "cmdstat_"+cmd+":calls="); ok {
			n, _ := strconv.Atoi(rest[:strings.IndexByte(rest, ',')])
			return n
		}
	}
	return 0
}

const fiveRules = `
domain: d
descriptors:
  - key: a
    rate_limit: {unit: second, requests_per_unit: 100}
  - key: b
    rate_limit: {unit: minute, requests_per_unit: 100}
  - key: c
    rate_limit: {unit: hour, requests_per_unit: 100}
  - key: e
    rate_limit: {unit: day, requests_per_unit: 100}
  - key: f
    rate_limit: {unit: minute, requests_per_unit: 2}
`

// One call, five descriptors: one round trip, and an EXPIRE only for the
// counters a call creates.
func TestRedisOneRoundTripNoExpirePerHit(t *testing.T) {
	srv := redistest.Start(t)
	client := redis.NewClient(&redis.Options{Addr: srv.Addr()})
	defer client.Close()
	admin := redis.NewClient(&redis.Options{Addr: srv.Addr()})
	defer admin.Close()
	var rt roundTrips
	client.AddHook(&rt)
	clock := newTestClock(T0)
	store, err := NewRedisStore(client, WithStoreClock(clock))
	if err != nil {
		t.Fatal(err)
	}
	svc, err := New(parseYAML(t, fiveRules), store)
	if err != nil {
		t.Fatal(err)
	}
	req := request("d", 0, desc("a", "1"), desc("b", "1"), desc("c", "1"), desc("e", "1"), desc("f", "1"))
	// The script is loaded by the first call (EVALSHA, NOSCRIPT, EVAL).
	if _, err := svc.ShouldRateLimit(context.Background(), req); err != nil {
		t.Fatal(err)
	}
	expires := commandCalls(t, admin, "expire")
	if expires != 5 {
		t.Errorf("first call: %d EXPIRE, want 5 (one per new counter)", expires)
	}
	before := rt.n.Load()
	for i := 0; i < 10; i++ {
		if _, err := svc.ShouldRateLimit(context.Background(), req); err != nil {
			t.Fatal(err)
		}
	}
	if got := rt.n.Load() - before; got != 10 {
		t.Errorf("10 calls of 5 descriptors: %d round trips, want 10", got)
	}
	if got := commandCalls(t, admin, "expire"); got != expires {
		t.Errorf("10 more calls on the same windows: %d more EXPIRE, want 0", got-expires)
	}
	if got := commandCalls(t, admin, "incrby"); got != 55 {
		t.Errorf("%d INCRBY, want 55", got)
	}
}

// meetingTrips counts round trips as roundTrips does and, while meet is
// set, holds the first command sent until a second one is in flight (or
// two seconds pass), so that a test tells commands sent at once from
// commands sent one after the other: peak is the most in flight.
type meetingTrips struct {
	roundTrips
	mu       sync.Mutex
	meet     chan struct{}
	in, peak int
}

func (m *meetingTrips) hold() func() {
	m.n.Add(1)
	m.mu.Lock()
	m.in++
	m.peak = max(m.peak, m.in)
	wait := m.meet
	if wait != nil && m.in >= 2 {
		close(wait)
		m.meet, wait = nil, nil
	}
	m.mu.Unlock()
	if wait != nil {
		select {
		case <-wait:
		case <-time.After(2 * time.Second):
		}
	}
	return func() {
		m.mu.Lock()
		m.in--
		m.mu.Unlock()
	}
}

func (m *meetingTrips) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		defer m.hold()()
		return next(ctx, cmd)
	}
}

func (m *meetingTrips) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		defer m.hold()()
		return next(ctx, cmds)
	}
}

const windowsAndAdditions = `
domain: d
descriptors:
  - key: w
    rate_limit: {unit: minute, requests_per_unit: 100}
  - key: a
    rate_limit: {unit: minute, requests_per_unit: 1, algorithm: gcra}
  - key: b
    rate_limit: {unit: minute, requests_per_unit: 5, algorithm: sliding-window}
`

// A call that mixes the reference's windows with additions on a standalone
// Redis: two scripts (the windows', the additions'), sent at once, so the
// call waits for one round trip; when an addition refuses, the others are
// asked again, one round trip more. docs/rls.md states these counts; this
// pins them, so that a change to either shows.
func TestRedisRoundTripsWithAdditions(t *testing.T) {
	srv := redistest.Start(t)
	client := redis.NewClient(&redis.Options{Addr: srv.Addr()})
	defer client.Close()
	clock := newTestClock(T0)
	store, err := NewRedisStore(client, WithStoreClock(clock))
	if err != nil {
		t.Fatal(err)
	}
	svc, err := New(parseYAML(t, windowsAndAdditions), store)
	if err != nil {
		t.Fatal(err)
	}
	// Load the scripts first (a first EVALSHA may need an EVAL), on
	// descriptors the calls below do not use: the windows', the
	// additions' for several checks, and, once a refuses, the one for
	// the single check asked again.
	for range 2 {
		if _, err := svc.ShouldRateLimit(context.Background(), request("d", 0, desc("w", "0"), desc("a", "0"), desc("b", "0"))); err != nil {
			t.Fatal(err)
		}
	}
	// Two connections in the pool, so that the two scripts sent at once
	// each find one: a connection dialed for the second would send its
	// own commands (HELLO, CLIENT SETINFO) through the hook. (The
	// warm-up's two scripts may not have overlapped, and left one.)
	c1, c2 := client.Conn(), client.Conn()
	for _, c := range []*redis.Conn{c1, c2} {
		if err := c.Ping(context.Background()).Err(); err != nil {
			t.Fatal(err)
		}
	}
	c1.Close()
	c2.Close()
	var mt meetingTrips
	client.AddHook(&mt)
	req := request("d", 0, desc("w", "1"), desc("a", "1"), desc("b", "1"))

	// All fit: the windows' script and the additions' one, at once.
	mt.mu.Lock()
	mt.meet = make(chan struct{})
	mt.mu.Unlock()
	got, err := svc.ShouldRateLimit(context.Background(), req)
	if err != nil {
		t.Fatal(err)
	}
	mt.mu.Lock()
	mt.meet = nil
	peak := mt.peak
	mt.mu.Unlock()
	if got.GetOverallCode() != ok {
		t.Fatalf("first call: %v, want OK", got)
	}
	if n := mt.n.Load(); n != 2 {
		t.Errorf("windows and additions that all fit: %d commands, want 2 (one script each)", n)
	}
	if peak != 2 {
		t.Errorf("windows and additions: at most %d command in flight, want 2 (sent at once: one round-trip wait)", peak)
	}

	// a (1 a minute) now refuses: the additions' script counts nothing,
	// a is answered, b is asked again.
	for call := 2; call <= 3; call++ {
		before := mt.n.Load()
		got, err := svc.ShouldRateLimit(context.Background(), req)
		if err != nil {
			t.Fatal(err)
		}
		codes := []rlsv3.RateLimitResponse_Code{}
		for _, st := range got.GetStatuses() {
			codes = append(codes, st.GetCode())
		}
		if got.GetOverallCode() != over || len(codes) != 3 || codes[0] != ok || codes[1] != over || codes[2] != ok {
			t.Fatalf("call %d: overall %v, descriptors %v; want OVER_LIMIT, [OK OVER_LIMIT OK]", call, got.GetOverallCode(), codes)
		}
		if n := mt.n.Load() - before; n != 3 {
			t.Errorf("call %d, one addition refusing: %d commands, want 3 (windows, additions, the others again)", call, n)
		}
	}
}

// A Redis Cluster: the reference's answers, the descriptors' keys in
// several slots, one pipeline per call.
func TestRedisClusterReferenceAnswers(t *testing.T) {
	cl := redistest.StartCluster(t, 3)
	client := redis.NewClusterClient(&redis.ClusterOptions{Addrs: cl.Addrs()})
	defer client.Close()
	var rt roundTrips
	client.AddHook(&rt)
	clock := newTestClock(T0)
	store, err := NewRedisStore(client, WithStoreClock(clock))
	if err != nil {
		t.Fatal(err)
	}
	if err := store.Check(context.Background()); err != nil {
		t.Fatal(err)
	}
	svc, err := New(mustLoad(t, "testdata/config"), store)
	if err != nil {
		t.Fatal(err)
	}
	for i, s := range referenceSteps {
		clock.set(time.Unix(T0+s.at, 0))
		got, err := svc.ShouldRateLimit(context.Background(), s.req)
		if err != nil {
			t.Fatalf("step %d %s: %v", i, s.name, err)
		}
		checkResponse(t, s.name, got, s.want)
	}
	svc2, err := New(parseYAML(t, fiveRules), store)
	if err != nil {
		t.Fatal(err)
	}
	req := request("d", 0, desc("a", "1"), desc("b", "1"), desc("c", "1"), desc("e", "1"), desc("f", "1"))
	if _, err := svc2.ShouldRateLimit(context.Background(), req); err != nil {
		t.Fatal(err)
	}
	before := rt.n.Load()
	if _, err := svc2.ShouldRateLimit(context.Background(), req); err != nil {
		t.Fatal(err)
	}
	if got := rt.n.Load() - before; got != 1 {
		t.Errorf("a call of 5 descriptors over a cluster: %d pipelines, want 1", got)
	}
	// The additions: each descriptor in its own script, keys in the
	// descriptor's hash tag.
	svc3, err := New(parseYAML(t, independentConfig), store)
	if err != nil {
		t.Fatal(err)
	}
	checkIndependent(t, svc3, func() int64 { return 0 })
	// Every node but the first key's forgets the script: only their keys
	// are sent again (with EVAL); the first, already counted, is not
	// counted twice.
	keys := []string{"d_a_1_" + itoa(T0), "d_b_1_" + itoa(T0-20), "d_c_1_" + itoa(T0-800), "d_e_1_" + itoa(T0-80000), "d_f_1_" + itoa(T0-20)}
	keep := cl.NodeForKey(t, keys[0])
	others := 0
	for _, k := range keys[1:] {
		if cl.NodeForKey(t, k) != keep {
			others++
		}
	}
	if others == 0 {
		t.Fatal("every key on one node: the test would test nothing")
	}
	for _, srv := range cl.Servers {
		if srv != keep {
			srv.CLI("SCRIPT", "FLUSH")
		}
	}
	got, err := svc2.ShouldRateLimit(context.Background(), req)
	if err != nil {
		t.Fatal(err)
	}
	for i, st := range got.Statuses {
		if st.LimitRemaining != 97 && !(i == 4 && st.Code == over) {
			t.Errorf("after SCRIPT FLUSH on one node, descriptor %d: %v", i, st)
		}
	}
}

// A hung Redis (SIGSTOP) answers UNAVAILABLE within the store timeout, not
// the client's; a dead one at once; a restarted one is used again.
func TestRedisFailureIsUnavailable(t *testing.T) {
	srv := redistest.Start(t)
	client := redis.NewClient(&redis.Options{Addr: srv.Addr(), MaxRetries: -1, ReadTimeout: 10 * time.Second, WriteTimeout: 10 * time.Second})
	defer client.Close()
	store, err := NewRedisStore(client)
	if err != nil {
		t.Fatal(err)
	}
	svc, err := New(parseYAML(t, fiveRules), store, WithStoreTimeout(100*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	req := request("d", 0, desc("a", "1"), desc("f", "1"))
	if _, err := svc.ShouldRateLimit(context.Background(), req); err != nil {
		t.Fatal(err)
	}
	unavailable := func(what string) {
		t.Helper()
		start := time.Now()
		_, err := svc.ShouldRateLimit(context.Background(), req)
		if grpcstatus.Code(err) != codes.Unavailable {
			t.Fatalf("%s: got %v, want UNAVAILABLE", what, err)
		}
		// Bounded by the store timeout (100 ms), far from the client's
		// 10 s: 5 s leaves room for a loaded machine.
		if d := time.Since(start); d > 5*time.Second {
			t.Errorf("%s: answered after %v", what, d)
		}
	}
	srv.Pause()
	unavailable("hung")
	srv.Resume()
	srv.Kill()
	unavailable("dead")
	if svc.StoreErrors() != 2 {
		t.Errorf("store errors %d, want 2", svc.StoreErrors())
	}
	srv.Restart()
	// The pool may hold a connection from before the restart: a first
	// call may fail, a second must not.
	if _, err := svc.ShouldRateLimit(context.Background(), req); err != nil {
		if _, err := svc.ShouldRateLimit(context.Background(), req); err != nil {
			t.Fatalf("after restart: %v", err)
		}
	}
}

func TestRedisMisconfigured(t *testing.T) {
	srv := redistest.Start(t)
	srv.CLI("CONFIG", "SET", "requirepass", "secret")
	for _, c := range []struct {
		name string
		opts redis.Options
	}{
		{"wrong password", redis.Options{Password: "wrong"}},
		{"no password", redis.Options{}},
		{"no such database", redis.Options{Password: "secret", DB: 4000}},
	} {
		c.opts.Addr = srv.Addr()
		client := redis.NewClient(&c.opts)
		store, err := NewRedisStore(client)
		if err != nil {
			t.Fatal(err)
		}
		if err := store.Check(context.Background()); !errors.Is(err, ErrMisconfigured) {
			t.Errorf("%s: %v, want ErrMisconfigured", c.name, err)
		}
		client.Close()
	}
	good := redis.NewClient(&redis.Options{Addr: srv.Addr(), Password: "secret"})
	defer good.Close()
	store, _ := NewRedisStore(good)
	if err := store.Check(context.Background()); err != nil {
		t.Errorf("right password: %v", err)
	}
	// A cluster client on a server that is not a cluster.
	cc := redis.NewClusterClient(&redis.ClusterOptions{Addrs: []string{srv.Addr()}, Password: "secret"})
	defer cc.Close()
	store, _ = NewRedisStore(cc)
	if err := store.Check(context.Background()); !errors.Is(err, ErrMisconfigured) {
		t.Errorf("cluster client on a standalone server: %v, want ErrMisconfigured", err)
	}
	// Nothing listening: unavailable, not misconfigured.
	dead := redis.NewClient(&redis.Options{Addr: redistest.ClosedAddr(t), MaxRetries: -1})
	defer dead.Close()
	store, _ = NewRedisStore(dead)
	if err := store.Check(context.Background()); !errors.Is(err, ErrUnavailable) {
		t.Errorf("nothing listening: %v, want ErrUnavailable", err)
	}
}

// The refusal cache answers an over-limit window without a round trip
// until the window ends, with the answer Redis would give.
func TestRedisRefusalCache(t *testing.T) {
	srv := redistest.Start(t)
	client := redis.NewClient(&redis.Options{Addr: srv.Addr()})
	defer client.Close()
	var rt roundTrips
	client.AddHook(&rt)
	clock := newTestClock(T0)
	store, err := NewRedisStore(client, WithStoreClock(clock), WithRefusalCache(100))
	if err != nil {
		t.Fatal(err)
	}
	svc, err := New(parseYAML(t, fiveRules), store)
	if err != nil {
		t.Fatal(err)
	}
	req := request("d", 0, desc("f", "1"))
	want := []*rlsv3.RateLimitResponse{
		response(ok, status(ok, "", 2, mnt, 1, 40)),
		response(ok, status(ok, "", 2, mnt, 0, 40)),
		response(over, status(over, "", 2, mnt, 0, 40)),
		response(over, status(over, "", 2, mnt, 0, 40)),
		response(over, status(over, "", 2, mnt, 0, 40)),
	}
	var trips []int64
	for i, w := range want {
		before := rt.n.Load()
		got, err := svc.ShouldRateLimit(context.Background(), req)
		if err != nil {
			t.Fatal(err)
		}
		checkResponse(t, "call "+strconv.Itoa(i), got, w)
		trips = append(trips, rt.n.Load()-before)
	}
	if trips[3] != 0 || trips[4] != 0 {
		t.Errorf("round trips per call %v: the cached refusals should need none", trips)
	}
	if c := svc.RuleCounts("d.f"); c.OverLimitWithLocalCache != 2 || c.OverLimit != 3 {
		t.Errorf("counts %+v", c)
	}
	// The next window is asked again.
	clock.set(time.Unix(T0+40, 0))
	before := rt.n.Load()
	got, err := svc.ShouldRateLimit(context.Background(), req)
	if err != nil {
		t.Fatal(err)
	}
	checkResponse(t, "next window", got, response(ok, status(ok, "", 2, mnt, 1, 60)))
	if rt.n.Load() == before {
		t.Error("the next window was answered from the cache")
	}
}

// The refusal cache serves the additions too (throttle's).
func TestRedisRefusalCacheAdditions(t *testing.T) {
	srv := redistest.Start(t)
	client := redis.NewClient(&redis.Options{Addr: srv.Addr()})
	defer client.Close()
	var rt roundTrips
	client.AddHook(&rt)
	clock := newTestClock(T0)
	store, err := NewRedisStore(client, WithStoreClock(clock), WithRefusalCache(100))
	if err != nil {
		t.Fatal(err)
	}
	svc, err := New(parseYAML(t, "domain: d\ndescriptors:\n  - key: g\n    rate_limit: {unit: minute, requests_per_unit: 1, algorithm: gcra}\n"), store)
	if err != nil {
		t.Fatal(err)
	}
	req := request("d", 0, desc("g", "1"))
	for i := 0; i < 2; i++ {
		if _, err := svc.ShouldRateLimit(context.Background(), req); err != nil {
			t.Fatal(err)
		}
	}
	before := rt.n.Load()
	got, err := svc.ShouldRateLimit(context.Background(), req)
	if err != nil {
		t.Fatal(err)
	}
	checkResponse(t, "cached refusal", got, response(over, status(over, "", 1, mnt, 0, 60)))
	if rt.n.Load() != before {
		t.Error("a cached refusal of an addition made a round trip")
	}
}

// A Ring of two servers: each window counted on its key's shard, the same
// shard whichever descriptor comes first in a call.
func TestRedisRing(t *testing.T) {
	a, b := redistest.Start(t), redistest.Start(t)
	ring := redis.NewRing(&redis.RingOptions{Addrs: map[string]string{"a": a.Addr(), "b": b.Addr()}})
	defer ring.Close()
	clock := newTestClock(T0)
	store, err := NewRedisStore(ring, WithStoreClock(clock))
	if err != nil {
		t.Fatal(err)
	}
	svc, err := New(parseYAML(t, fiveRules), store)
	if err != nil {
		t.Fatal(err)
	}
	vs := []string{"1", "2", "3", "4", "5", "6", "7", "8"}
	for i := 0; i < 8; i++ {
		// Rotate the order: each key comes first in some call.
		req := request("d", 0)
		for j := range vs {
			req.Descriptors = append(req.Descriptors, desc("b", vs[(i+j)%len(vs)]))
		}
		got, err := svc.ShouldRateLimit(context.Background(), req)
		if err != nil {
			t.Fatal(err)
		}
		for _, st := range got.Statuses {
			if st.LimitRemaining != uint32(99-i) {
				t.Fatalf("call %d: %v, want remaining %d", i, got.Statuses, 99-i)
			}
		}
	}
	// The test means something only if the keys are on both shards.
	na, nb := a.CLI("DBSIZE"), b.CLI("DBSIZE")
	if strings.TrimSpace(na) == "0" || strings.TrimSpace(nb) == "0" {
		t.Errorf("keys per shard: %s and %s: the ring did not spread them", strings.TrimSpace(na), strings.TrimSpace(nb))
	}
}

// TestRedisNowhereLogsNothing: a store whose client points at a closed
// port answers ErrUnavailable (UNAVAILABLE through the service) at once,
// and go-redis prints none of its "failed to dial" lines about it: the
// store dials first while Redis is not known to be reachable
// (redisscript.Gate).
func TestRedisNowhereLogsNothing(t *testing.T) {
	log := redistest.CaptureClientLog(t)
	addr := redistest.ClosedAddr(t)
	// One dial attempt a call: a failed dial logs before the call returns.
	client := redis.NewClient(&redis.Options{Addr: addr, MaxRetries: -1, DialerRetries: 1})
	defer client.Close()
	store, err := NewRedisStore(client)
	if err != nil {
		t.Fatal(err)
	}
	for i := range 3 {
		if err := store.Check(context.Background()); !errors.Is(err, ErrUnavailable) {
			t.Errorf("Check %d: %v, want ErrUnavailable", i, err)
		}
	}
	svc, err := New(parseYAML(t, fiveRules), store, WithStoreTimeout(time.Second))
	if err != nil {
		t.Fatal(err)
	}
	req := request("d", 0, desc("a", "1"), desc("f", "1"))
	for i := range 3 {
		if _, err := svc.ShouldRateLimit(context.Background(), req); grpcstatus.Code(err) != codes.Unavailable {
			t.Errorf("call %d: %v, want UNAVAILABLE", i, err)
		}
	}
	if lines := log.About(addr); len(lines) > 0 {
		t.Errorf("go-redis logged:\n%s", strings.Join(lines, "\n"))
	}
}
