package rls

import (
	"context"
	"fmt"
	"math/rand"
	"testing"
	"time"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"github.com/redis/go-redis/v9"

	"github.com/smoothrate/ratelimit/internal/redistest"
)

// A configuration with every kind of rule, for the stores' comparison.
const mixedConfig = `
domain: d
descriptors:
  - key: w
    rate_limit: {unit: second, requests_per_unit: 3}
  - key: m
    value: x*
    share_threshold: true
    rate_limit: {unit: minute, requests_per_unit: 5}
  - key: s
    shadow_mode: true
    rate_limit: {unit: second, requests_per_unit: 2}
  - key: z
    rate_limit: {unit: second, requests_per_unit: 0}
  - key: u
    rate_limit: {unlimited: true}
  - key: mul
    rate_limit: {unit: second, unit_multiplier: 7, requests_per_unit: 4}
  - key: g
    rate_limit: {unit: second, unit_multiplier: 5, requests_per_unit: 4, algorithm: gcra}
  - key: l
    rate_limits:
      - {unit: second, requests_per_unit: 3}
      - {unit: minute, requests_per_unit: 10, algorithm: sliding-window}
      - {unit: second, unit_multiplier: 10, requests_per_unit: 6, algorithm: sliding-log}
  - key: t
    rate_limit: {unit: second, unit_multiplier: 3, requests_per_unit: 5, algorithm: token-bucket}
  - key: k
    rate_limit: {unit: second, requests_per_unit: 4, algorithm: leaky-bucket}
`

// The memory store and Redis answer every call identically: random calls
// of one to four descriptors over every kind of rule, at random instants,
// with the reference's counting and with WithCountOnlyAdmitted.
func TestStoresAgree(t *testing.T) {
	srv := redistest.Start(t)
	for _, onlyAdmitted := range []bool{false, true} {
		t.Run(fmt.Sprint("onlyAdmitted=", onlyAdmitted), func(t *testing.T) {
			a, b, clock := agreeing(t, srv, onlyAdmitted, WithRateLimitHeaders("", "", ""), WithIETFHeaders())
			keys := []string{"w", "m", "s", "z", "u", "mul", "g", "l", "t", "k", "none"}
			values := []string{"x", "x1", "x2", "y"}
			r := rand.New(rand.NewSource(11))
			now := time.Unix(T0, 0)
			overs := 0
			for i := 0; i < 600; i++ {
				now = now.Add(time.Duration([]int{0, 0, 10, 300, 900, 4000}[r.Intn(6)]) * time.Millisecond)
				clock.set(now)
				req := request("d", uint32(r.Intn(3)))
				for j := 0; j < 1+r.Intn(4); j++ {
					d := desc(keys[r.Intn(len(keys))], values[r.Intn(len(values))])
					if r.Intn(5) == 0 {
						withHits(d, uint64(r.Intn(4)))
					}
					req.Descriptors = append(req.Descriptors, d)
				}
				if sameAnswer(t, fmt.Sprintf("call %d at +%v", i, now.Sub(time.Unix(T0, 0))), a, b, req).OverallCode == over {
					overs++
				}
			}
			if overs < 50 {
				t.Errorf("only %d calls over: the sequence tests little", overs)
			}
		})
	}
}

// agreeing returns a Service over mixedConfig on a memory store and one on
// srv's Redis (emptied), both reading one clock, with opts and, when only
// is set, WithCountOnlyAdmitted.
func agreeing(t *testing.T, srv *redistest.Server, only bool, opts ...Option) (mem, red *Service, clock *testClock) {
	t.Helper()
	client := redis.NewClient(&redis.Options{Addr: srv.Addr()})
	t.Cleanup(func() { client.Close() })
	client.FlushAll(context.Background())
	clock = newTestClock(T0)
	if only {
		opts = append(opts, WithCountOnlyAdmitted())
	}
	ms, err := NewMemoryStore(WithStoreClock(clock))
	if err != nil {
		t.Fatal(err)
	}
	rs, err := NewRedisStore(client, WithStoreClock(clock))
	if err != nil {
		t.Fatal(err)
	}
	cfg := parseYAML(t, mixedConfig)
	if mem, err = New(cfg, ms, opts...); err != nil {
		t.Fatal(err)
	}
	if red, err = New(cfg, rs, opts...); err != nil {
		t.Fatal(err)
	}
	return mem, red, clock
}

// sameAnswer sends req to mem and red, and stops the test unless both
// answer it alike; it returns the answer.
func sameAnswer(t *testing.T, what string, mem, red *Service, req *rlsv3.RateLimitRequest) *rlsv3.RateLimitResponse {
	t.Helper()
	ra, err := mem.ShouldRateLimit(context.Background(), req)
	if err != nil {
		t.Fatalf("%s: memory: %v", what, err)
	}
	rb, err := red.ShouldRateLimit(context.Background(), req)
	if err != nil {
		t.Fatalf("%s: redis: %v", what, err)
	}
	checkResponse(t, what, rb, ra)
	if t.Failed() {
		t.FailNow()
	}
	return ra
}

// redisStore is a RedisStore reading clock, on a server of its own, and
// a client of that server.
func redisStore(t *testing.T, clock *testClock) (*RedisStore, *redis.Client) {
	t.Helper()
	srv := redistest.Start(t)
	c := redis.NewClient(&redis.Options{Addr: srv.Addr()})
	t.Cleanup(func() { c.Close() })
	store, err := NewRedisStore(c, WithStoreClock(clock))
	if err != nil {
		t.Fatal(err)
	}
	return store, c
}
