package throttle

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/smoothrate/ratelimit"
	"github.com/smoothrate/ratelimit/clocktest"
	"github.com/smoothrate/ratelimit/internal/redisscript"
	"github.com/smoothrate/ratelimit/internal/redistest"
)

// One redis-server per top-level test, shared by its subtests; every store
// opened on it gets its own key prefix, so it starts empty.
var (
	redisServers sync.Map // top-level test name → *redisFixture
	redisPrefix  atomic.Int64
)

type redisFixture struct {
	srv    *redistest.Server
	client *redis.Client
}

func init() {
	testStores = append(testStores, namedStore{name: "redis", open: func(t testing.TB, clk ratelimit.Clock) Store {
		f := redisFor(t)
		return fakeTimeStore(f.client, WithStoreClock(clk), WithKeyPrefix(fmt.Sprintf("t%d:", redisPrefix.Add(1))))
	}})
}

// fakeTimeStore is NewRedisStore for tests on a fake clock: Redis expires
// keys by its own clock, so a key whose one-second TTL ran out while a
// slow test ran would be forgotten while the fake time says it matters.
// Its TTLs are at least an hour.
func fakeTimeStore(c redis.UniversalClient, opts ...StoreOption) *RedisStore {
	s := redisStore(c, opts...)
	s.ttlFloor = 3_600_000
	return s
}

// redisFor returns the server of t's top-level test, starting it on first
// use; it is stopped when that test ends.
func redisFor(t testing.TB) *redisFixture {
	t.Helper()
	top := strings.SplitN(t.Name(), "/", 2)[0]
	if f, ok := redisServers.Load(top); ok {
		return f.(*redisFixture)
	}
	srv := redistest.Start(t)
	f := &redisFixture{srv: srv, client: newRedisClient(t, srv.Addr())}
	redisServers.Store(top, f)
	t.Cleanup(func() { redisServers.Delete(top) })
	return f
}

// newRedisClient returns a client that honours context deadlines and does
// not retry: the tests see every failure. edit, if given, adjusts the
// options first.
func newRedisClient(t testing.TB, addr string, edit ...func(*redis.Options)) *redis.Client {
	t.Helper()
	o := &redis.Options{
		Addr:                  addr,
		ContextTimeoutEnabled: true,
		MaxRetries:            -1,
		DialTimeout:           2 * time.Second,
		DialerRetries:         1, // a server that is down fails at once
		DialerRetryTimeout:    time.Millisecond,
	}
	for _, e := range edit {
		e(o)
	}
	c := redis.NewClient(o)
	t.Cleanup(func() { _ = c.Close() })
	return c
}

func TestRedisScriptsAreThePorts(t *testing.T) {
	// Each single-request script holds its own algorithm only (a meter's
	// is the flat meter script with its own debt, without the prelude's
	// decide table), and the AllowAll script all six; every one starts
	// with the shared packing prelude.
	for a, debt := range map[Algorithm]string{GCRA: "gcra_debt.lua", TokenBucket: "tb_debt.lua", LeakyBucket: "lb_debt.lua"} {
		if want := redisscript.New(mustLua("meter_head.lua") + mustLua(debt) + mustLua("meter_tail.lua")); oneScripts[a].Source() != want.Source() {
			t.Errorf("%v's single-request script is not the meter script with %s", a, debt)
		}
	}
	for a := GCRA; a <= SlidingLog; a++ {
		src := oneScripts[a].Source()
		for b := GCRA; b <= SlidingLog; b++ {
			has := strings.Contains(src, fmt.Sprintf("decide[%d] = function", b))
			if has != (a == b && !isMeter(a)) {
				t.Errorf("script for %v: has decide[%d] = %v", a, b, has)
			}
		}
		if !strings.Contains(allScript.Source(), fmt.Sprintf("decide[%d] = function", a)) {
			t.Errorf("AllowAll script lacks %v", a)
		}
	}
}

func TestRedisBasics(t *testing.T) {
	f := redisFor(t)
	ctx := context.Background()
	clk := newSetClock()
	s := redisStore(f.client, WithStoreClock(clk))
	for _, alg := range allAlgorithms {
		t.Run(alg.String(), func(t *testing.T) {
			lim := mustNew(t, s, alg, PerSecond(3))
			key := "basic"
			for i := range 3 {
				d := mustAllow(t, lim, key, 1)
				if !d.Allowed || d.Remaining != 2-i || d.Limit != 3 {
					t.Fatalf("request %d: %+v", i, d)
				}
			}
			d := mustAllow(t, lim, key, 1)
			if d.Allowed || d.RetryAfter <= 0 {
				t.Fatalf("4th request: %+v", d)
			}
			if d := mustAllow(t, lim, key, 4); d.Allowed || d.RetryAfter != Never {
				t.Fatalf("n > limit: %+v", d)
			}
			rk := s.redisKey(alg, key)
			ttl, err := f.client.PTTL(ctx, rk).Result()
			if err != nil || ttl < 900*time.Millisecond || ttl > time.Second {
				// The limit's state matters for at most 1 s (2 s for the
				// sliding window) of fake time, so the TTL is the floor.
				if alg != SlidingWindow || ttl > 2*time.Second {
					t.Fatalf("PTTL %s = %v, %v: want about 1 s", rk, ttl, err)
				}
			}
			if err := lim.Reset(ctx, key); err != nil {
				t.Fatal(err)
			}
			if n, _ := f.client.Exists(ctx, rk).Result(); n != 0 {
				t.Fatalf("Reset left %s", rk)
			}
			if d := mustAllow(t, lim, key, 3); !d.Allowed {
				t.Fatalf("after Reset: %+v", d)
			}
		})
	}
}

func TestRedisKeyLayout(t *testing.T) {
	f := redisFor(t)
	ctx := context.Background()
	s := redisStore(f.client, WithStoreClock(newSetClock()), WithKeyPrefix("app:"))
	want := map[Algorithm]string{GCRA: "app:gcra:{u}:k", TokenBucket: "app:tb:{u}:k", LeakyBucket: "app:lb:{u}:k",
		FixedWindow: "app:fw:{u}:k", SlidingWindow: "app:sw:{u}:k", SlidingLog: "app:sl:{u}:k"}
	for alg, rk := range want {
		mustAllow(t, mustNew(t, s, alg, PerMinute(5)), "{u}:k", 2)
		typ, err := f.client.Type(ctx, rk).Result()
		wantType := "string"
		if alg == SlidingLog {
			wantType = "zset"
		}
		if err != nil || typ != wantType {
			t.Errorf("%v: TYPE %s = %q, %v; want %s", alg, rk, typ, err, wantType)
		}
		if ttl := f.client.PTTL(ctx, rk).Val(); ttl <= 0 {
			t.Errorf("%v: %s has no TTL (%v)", alg, rk, ttl)
		}
	}
	// A state is three integers as little-endian doubles; the window's first
	// is where it ends.
	state := make([]byte, 0, 24)
	for _, x := range []int64{clocktest.Epoch.UnixMicro() + 60_000_000, 2, 0} {
		state = binary.LittleEndian.AppendUint64(state, math.Float64bits(float64(x)))
	}
	if v := f.client.Get(ctx, "app:fw:{u}:k").Val(); v != string(state) {
		t.Errorf("fixed window state %x, want %x", v, state)
	}
	// Two units in the same microsecond are two members.
	if m := f.client.ZRange(ctx, "app:sl:{u}:k", 0, -1).Val(); len(m) != 2 || m[0] == m[1] {
		t.Errorf("sliding log members %q: want 2 distinct", m)
	}
	if keySlot("app:gcra:{u}:k") != keySlot("app:sl:{u}:x") || keySlot("a") == keySlot("b") {
		t.Error("keySlot ignores the hash tag")
	}
	// Redis's own answer for the slot.
	for _, k := range []string{"app:gcra:{u}:k", "foo", "{}x", "a{b}c{d}", "{"} {
		got, err := f.client.Do(ctx, "CLUSTER", "KEYSLOT", k).Int()
		if err != nil {
			break // not a cluster node: CLUSTER KEYSLOT may be refused
		}
		if keySlot(k) != got {
			t.Errorf("keySlot(%q) = %d, Redis says %d", k, keySlot(k), got)
		}
	}
}

func TestRedisWrongType(t *testing.T) {
	f := redisFor(t)
	ctx := context.Background()
	s := redisStore(f.client, WithStoreClock(newSetClock()))
	for _, alg := range allAlgorithms {
		lim := mustNew(t, s, alg, PerMinute(5))
		for name, setup := range map[string]func(k string){
			"string": func(k string) { f.client.Set(ctx, k, "x", 0) },
			"hash":   func(k string) { f.client.HSet(ctx, k, "a", "1") },
			"short":  func(k string) { f.client.Set(ctx, k, "1,2", 0) },
			// 24 bytes, the size of a state, but not three integers in
			// [0, 2^53): huge, NaN, a fraction.
			"huge":     func(k string) { f.client.Set(ctx, k, strings.Repeat("x", 24), 0) },
			"nan":      func(k string) { f.client.Set(ctx, k, strings.Repeat("\xff", 24), 0) },
			"fraction": func(k string) { f.client.Set(ctx, k, strings.Repeat("\x3f\xe0\x00\x00\x00\x00\x00\x00", 3), 0) },
			"list":     func(k string) { f.client.RPush(ctx, k, "x") },
			"zset": func(k string) {
				if alg == SlidingLog {
					f.client.ZAdd(ctx, k, redis.Z{Score: 1e300, Member: "m"}) // live, and not a µs time
				} else {
					f.client.ZAdd(ctx, k, redis.Z{Score: 1, Member: "m"})
				}
			},
		} {
			key := "wrong-" + name
			rk := s.redisKey(alg, key)
			setup(rk)
			before := f.client.Dump(ctx, rk).Val()
			_, err := lim.Allow(ctx, key)
			if !errors.Is(err, ErrWrongType) || !errors.Is(err, ErrStore) || !errors.Is(err, ErrMisconfigured) {
				t.Errorf("%v on a %s: err = %v, want ErrWrongType, ErrMisconfigured and ErrStore", alg, name, err)
			} else if !strings.Contains(err.Error(), rk) {
				t.Errorf("%v on a %s: %v does not name the key", alg, name, err)
			}
			if after := f.client.Dump(ctx, rk).Val(); after != before {
				t.Errorf("%v on a %s: the key was changed", alg, name)
			}
		}
	}
}

func TestRedisOptions(t *testing.T) {
	f := redisFor(t)
	for _, tc := range []struct {
		name   string
		client redis.UniversalClient
		opt    StoreOption
	}{
		{"max keys", f.client, WithMaxKeys(10)},
		{"max bytes", f.client, WithMaxBytes(MinMaxBytes)},
		{"nil client", nil, WithKeyPrefix("x:")},
		{"nil option", f.client, nil},
		{"nil clock", f.client, WithStoreClock(nil)},
		{"braces", f.client, WithKeyPrefix("{x}")},
		{"cache size", f.client, WithRefusalCache(0)},
	} {
		if s, err := NewRedisStore(tc.client, tc.opt); !errors.Is(err, ErrInvalidOption) || s != nil {
			t.Errorf("%s: NewRedisStore: %v, %v, want nil, ErrInvalidOption", tc.name, s, err)
		}
	}
	var nilStore *RedisStore
	if _, err := New(nilStore, GCRA, PerSecond(1)); !errors.Is(err, ErrNilStore) {
		t.Errorf("nil *RedisStore: %v", err)
	}
}

func TestRedisClockOutOfRange(t *testing.T) {
	f := redisFor(t)
	clk := newSetClock()
	clk.Set(time.UnixMicro(maxMicros))
	lim := mustNew(t, redisStore(f.client, WithStoreClock(clk)), GCRA, PerSecond(1))
	if _, err := lim.Allow(context.Background(), "k"); !errors.Is(err, ErrInvalidTime) {
		t.Fatalf("err = %v, want ErrInvalidTime", err)
	}
}

func TestRedisTime(t *testing.T) {
	// Without WithStoreClock the scripts read Redis TIME: a second apart on a
	// real clock is too slow for a test, so check the answers' shape: a
	// fresh key is full, the second request of a 1/hour limit waits about
	// an hour.
	f := redisFor(t)
	lim := mustNew(t, redisStore(f.client), GCRA, PerHour(1))
	if d := mustAllow(t, lim, "k", 1); !d.Allowed || d.ResetAfter != time.Hour {
		t.Fatalf("first: %+v", d)
	}
	d := mustAllow(t, lim, "k", 1)
	if d.Allowed || d.RetryAfter > time.Hour || d.RetryAfter < time.Hour-time.Minute {
		t.Fatalf("second: %+v", d)
	}
}

// redisStore is NewRedisStore for tests whose options are right.
func redisStore(c redis.UniversalClient, opts ...StoreOption) *RedisStore {
	s, err := NewRedisStore(c, opts...)
	if err != nil {
		panic(err)
	}
	return s
}
