package rls

// The tests of what a store's faults and hostile callers do to
// `ratelimit rls` on Redis, against the built binary: large calls beside
// ordinary ones, a huge hits_addend, a Redis out of memory, a Redis killed
// under load.

import (
	"fmt"
	"math"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/smoothrate/ratelimit/internal/cli/clitest"
	"github.com/smoothrate/ratelimit/internal/redistest"
)

// warm calls until the service has answered one call on descriptor
// entries of domain test without an error: the connections to a new
// server or cluster are open and the scripts loaded, so that what a test
// asserts next does not include them (on a loaded machine they may take
// longer than a short --store-timeout). The descriptor is one the test
// asserts nothing about.
func (p *rlsProc) warm(entries ...string) {
	p.t.Helper()
	require.Eventually(p.t, func() bool {
		_, err := p.call(p.t.Context(), "test", entries...)
		return err == nil
	}, rlsWait, 10*time.Millisecond, "no answer from the store; stderr: %s", p.Stderr.String())
}

// TestRLSLargeCallsOnRedis: two callers sending 10 000 descriptors each,
// one call after another, hold no one behind them on Redis: a large call
// runs in steps of at most 256 keys, one script each, on a connection of
// its own, so Redis never runs one command longer than 100 ms (its
// SLOWLOG, which times each command in the server, stays empty: a step of
// 256 additions takes a few milliseconds, and 100 ms leaves room for a
// busy machine's preemptions of Redis, while one script of 10 000
// additions takes 40 steps' time, over 120 ms), and every ordinary call beside
// them is answered (they used to share one batch with the large calls:
// 826 of 1 194 ordinary calls answered UNAVAILABLE). The store timeout
// here is 1 s: what the test holds is Redis's side; the service's own
// processor time under such a load, slower still under the race
// detector, is latencyHeld's matter (TestRLSManyDescriptors).
func TestRLSLargeCallsOnRedis(t *testing.T) {
	srv := redistest.Start(t)
	cfg := filepath.Join(t.TempDir(), "config.yaml")
	writeFile(t, cfg, manyConfig)
	p := startRLS(t, nil, "--config", cfg, "--redis", clitest.RedisURL(srv), "--max-descriptors", "10000", "--store-timeout", "1s")
	p.warm("w=warm")
	p.warm("g=warm")
	srv.CLI("CONFIG", "SET", "slowlog-log-slower-than", "100000") // µs
	srv.CLI("SLOWLOG", "RESET")
	large := []*loader{newLoader(t, p, manyDescriptors("w", "a", 10_000)), newLoader(t, p, manyDescriptors("g", "b", 10_000))}
	stop := runLoad(t, large)
	const ordinary = 300
	failed := map[codes.Code]int{}
	var took []time.Duration
	for i := range ordinary {
		start := time.Now()
		if _, err := p.call(t.Context(), "test", "w=ordinary-"+strconv.Itoa(i%10)); err != nil {
			failed[status.Code(err)]++
		}
		took = append(took, time.Since(start))
	}
	stop()
	t.Logf("%d ordinary calls beside the large ones: p99 %v, failed: %v; the large ones' answers: %v, %v",
		ordinary, p99(took), failed, large[0].codes, large[1].codes)
	assert.Empty(t, failed, "ordinary calls beside two callers of 10 000 descriptors")
	for _, l := range large {
		assert.NotZero(t, l.codes[codes.OK], "the large calls were answered: %v", l.codes)
	}
	rc := redis.NewClient(&redis.Options{Addr: srv.Addr()})
	defer rc.Close()
	slow, err := rc.SlowLogGet(t.Context(), -1).Result()
	require.NoError(t, err)
	for _, e := range slow {
		args := e.Args
		if len(args) > 4 {
			args = append(args[:4:4], fmt.Sprintf("... (%d more)", len(e.Args)-4))
		}
		t.Errorf("Redis ran one command for %v: %v", e.Duration, args)
	}
}

// TestRLSHugeHitsAddend: a descriptor's hits_addend of 2^63 - 1 (and a
// request's of 2^32 - 1), on Redis and in memory, is answered OVER_LIMIT,
// and no later call on the same descriptor, from anyone, fails for the
// rest of the window (an INTERNAL would let every request through under
// Envoy's default failure_mode_deny: false): on the reference's window,
// which counts refused hits too, the count saturates and later calls are
// OVER_LIMIT; on an addition (GCRA), a refused request changes nothing
// and later calls are OK. Both stores answer alike.
func TestRLSHugeHitsAddend(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	cfg := filepath.Join(t.TempDir(), "config.yaml")
	writeFile(t, cfg, "domain: test\ndescriptors:\n  - key: w\n    rate_limit: {unit: day, requests_per_unit: 100}\n"+
		"  - key: g\n    rate_limit: {unit: day, requests_per_unit: 100, algorithm: gcra}\n")
	later := map[string]rlsv3.RateLimitResponse_Code{"w": rlsv3.RateLimitResponse_OVER_LIMIT, "g": rlsv3.RateLimitResponse_OK}
	answers := map[string][]string{}
	for _, store := range []struct {
		name string
		args []string
	}{{"redis", []string{"--redis", clitest.RedisURL(srv), "--store-timeout", "5s"}}, {"memory", nil}} {
		p := startRLS(t, nil, append([]string{"--config", cfg}, store.args...)...)
		ctx := t.Context()
		for _, key := range []string{"w", "g"} {
			for _, huge := range []*rlsv3.RateLimitRequest{
				{Domain: "test", Descriptors: []*ratelimitv3.RateLimitDescriptor{{
					Entries:    []*ratelimitv3.RateLimitDescriptor_Entry{{Key: key, Value: "d"}},
					HitsAddend: wrapperspb.UInt64(math.MaxInt64)}}},
				{Domain: "test", HitsAddend: math.MaxUint32, Descriptors: []*ratelimitv3.RateLimitDescriptor{{
					Entries: []*ratelimitv3.RateLimitDescriptor_Entry{{Key: key, Value: "r"}}}}},
			} {
				value := huge.Descriptors[0].Entries[0].Value
				resp, err := p.client.ShouldRateLimit(ctx, huge)
				require.NoError(t, err, "%s: %s=%s, huge hits_addend", store.name, key, value)
				assert.Equal(t, rlsv3.RateLimitResponse_OVER_LIMIT, resp.OverallCode, "%s: %s=%s, huge hits_addend", store.name, key, value)
				answers[store.name] = append(answers[store.name], resp.OverallCode.String())
				for i := range 3 {
					resp, err := p.call(ctx, "test", key+"="+value)
					require.NoError(t, err, "%s: %s=%s, call %d after", store.name, key, value, i)
					assert.Equal(t, later[key], resp.OverallCode, "%s: %s=%s, call %d after", store.name, key, value, i)
					answers[store.name] = append(answers[store.name], resp.OverallCode.String())
				}
			}
		}
		assert.Zero(t, p.metric(`ratelimit_service_should_rate_limit_error{err_type="redis_error"}`), store.name)
	}
	assert.Equal(t, answers["memory"], answers["redis"], "the stores agree")
}

// outageEnd matches the line that ends an outage of the store, with the
// count of calls it failed.
var outageEnd = regexp.MustCompile(`outage ended after [0-9.]+[mµn]?s: (\d+) requests? answered Unavailable\n`)

// TestRLSRedisOutOfMemory: a Redis out of memory (maxmemory reached with
// noeviction) is an outage of the store, not a misconfiguration: calls
// answer UNAVAILABLE, counted as store errors and never as
// store_misconfigured, the outage log says when it began, and its end
// line counts every call it failed. Needs the library's classification of
// an out-of-memory reply as an outage.
func TestRLSRedisOutOfMemory(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	cfg := filepath.Join(t.TempDir(), "config.yaml")
	writeFile(t, cfg, "domain: test\ndescriptors:\n  - key: w\n    rate_limit: {unit: day, requests_per_unit: 100}\n"+
		"  - key: g\n    rate_limit: {unit: day, requests_per_unit: 100, algorithm: gcra}\n")
	p := startRLS(t, nil, "--config", cfg, "--redis", clitest.RedisURL(srv), "--store-timeout", "5s")
	p.warm("w=warm")
	p.warm("g=warm")

	// Past maxmemory: 2 MB of data, a limit of 1 MB, no eviction.
	srv.CLI("EVAL", "redis.call('SET', 'filler', string.rep('x', 2097152))", "0")
	srv.CLI("CONFIG", "SET", "maxmemory-policy", "noeviction")
	srv.CLI("CONFIG", "SET", "maxmemory", "1mb")
	const failing = 6
	for i := range failing {
		key := []string{"w", "g"}[i%2]
		_, err := p.call(t.Context(), "test", key+"=new-"+strconv.Itoa(i))
		assert.Equal(t, codes.Unavailable, status.Code(err), "%s, Redis out of memory: %v", key, err)
	}
	p.waitStderr(t, "outage began: ")
	assert.NotContains(t, p.Stderr.String(), "set up wrong")
	assert.Equal(t, int64(failing), p.metric(`ratelimit_service_should_rate_limit_error{err_type="redis_error"}`))
	assert.Zero(t, p.metric("ratelimit_service_store_misconfigured"))

	srv.CLI("CONFIG", "SET", "maxmemory", "0")
	_, err := p.call(t.Context(), "test", "w=after")
	require.NoError(t, err)
	p.waitStderr(t, "outage ended after ")
	m := outageEnd.FindStringSubmatch(p.Stderr.String())
	require.NotNil(t, m, "stderr: %s", p.Stderr.String())
	assert.Equal(t, strconv.Itoa(failing), m[1], "the outage's end counts every call it failed: %s", m[0])
}

// TestRLSRedisKilledUnderLoad: Redis killed while four callers keep
// calling: the calls after the kill answer UNAVAILABLE within
// milliseconds, not after the whole --store-timeout (the default, 50 ms,
// shorter than the client's retries of a refused dial: each caller may
// have three of its 30 calls over 25 ms, those that met the dead
// server's connections and a busy machine's odd one, where a service that
// waits out the timeout has all 30), and the outage log says when it began
// and, once Redis is back, when it ended, counting the calls it failed.
// Needs the library's fast failure (the gate closing on a call that ran
// out its deadline).
func TestRLSRedisKilledUnderLoad(t *testing.T) {
	srv := redistest.Start(t)
	cfg := filepath.Join(t.TempDir(), "config.yaml")
	writeFile(t, cfg, fmt.Sprintf(perDay, 1_000_000_000))
	p := startRLS(t, nil, "--config", cfg, "--redis", clitest.RedisURL(srv))
	p.warm("k=warm")

	calls := redistest.KillUnderLoad(t, srv, 4, 30, func() error {
		_, err := p.call(t.Context(), "test", "k=load")
		return err
	})
	redistest.CheckFast(t, calls, 25*time.Millisecond, 3)
	failed := 0
	for w, cs := range calls {
		for _, c := range cs {
			if c.Err != nil {
				failed++
				assert.Equal(t, codes.Unavailable, status.Code(c.Err), "worker %d: %v", w, c.Err)
			}
		}
	}
	p.waitStderr(t, "outage began: ")

	srv.Restart()
	p.warm("k=back")
	p.waitStderr(t, "outage ended after ")
	m := outageEnd.FindStringSubmatch(p.Stderr.String())
	require.NotNil(t, m, "stderr: %s", p.Stderr.String())
	n, _ := strconv.Atoi(m[1])
	assert.GreaterOrEqual(t, n, failed, "the outage's end counts the calls it failed: %s", strings.TrimSpace(m[0]))
}

// TestRLSWarnsOfEvictions: a Redis that may evict the service's keys when
// full (a maxmemory, a policy other than noeviction) gets a warning at
// start, since a limit whose key is evicted starts again at its full
// allowance; one that keeps its keys, none.
func TestRLSWarnsOfEvictions(t *testing.T) {
	t.Parallel()
	cfg := filepath.Join(t.TempDir(), "config.yaml")
	writeFile(t, cfg, fmt.Sprintf(perDay, 10))
	evicting := redistest.Start(t, "--maxmemory", "50mb", "--maxmemory-policy", "volatile-lru")
	p := startRLS(t, nil, "--config", cfg, "--redis", clitest.RedisURL(evicting))
	p.WaitStderr(t, "ratelimit rls: warning: redis at "+evicting.Addr()+" evicts keys when it is full (maxmemory 50.00M, maxmemory-policy volatile-lru)", rlsWait)
	keeping := redistest.Start(t, "--maxmemory", "50mb", "--maxmemory-policy", "noeviction")
	p = startRLS(t, nil, "--config", cfg, "--redis", clitest.RedisURL(keeping))
	p.Signal(t, syscall.SIGINT) // no drain window
	p.Wait(t, rlsWait)          // its standard error read to the end
	assert.NotContains(t, p.Stderr.String(), "evicts")
}
