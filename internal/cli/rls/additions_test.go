package rls

import (
	"context"
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"

	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/smoothrate/ratelimit/internal/cli/clitest"
	"github.com/smoothrate/ratelimit/internal/cli/command"
	"github.com/smoothrate/ratelimit/internal/redistest"
	"github.com/smoothrate/ratelimit/throttle"
)

const additions = `domain: add
descriptors:
  - key: sw
    rate_limit: {unit: day, requests_per_unit: 3, algorithm: sliding-window}
  - key: two
    rate_limits:
      - {unit: day, requests_per_unit: 5, name: daily}
      - {unit: hour, requests_per_unit: 2, algorithm: gcra, name: hourly}
`

// TestRLSAdditions: the additions through the binary, against throttle's
// definitions decided at the same instants by a local limiter: a sliding
// window, and two limits on one descriptor (a reference window of 5 a
// day and GCRA at 2 an hour), both applied; --ietf-headers adds the IETF
// fields.
func TestRLSAdditions(t *testing.T) {
	t.Parallel()
	cfg := filepath.Join(t.TempDir(), "add.yaml")
	writeFile(t, cfg, additions)
	p := startRLS(t, nil, "--config", cfg, "--ietf-headers")
	ctx := t.Context()
	store, err := throttle.NewMemoryStore()
	require.NoError(t, err)
	sw, err := throttle.New(store, throttle.SlidingWindow, throttle.Limit{Count: 3, Period: 24 * time.Hour})
	require.NoError(t, err)
	for i := range 5 {
		want, err := sw.Allow(ctx, "sw")
		require.NoError(t, err)
		resp, err := p.call(ctx, "add", "sw=a")
		require.NoError(t, err)
		st := resp.Statuses[0]
		assert.Equal(t, want.Allowed, st.Code == rlsv3.RateLimitResponse_OK, "sliding window, call %d", i)
		assert.Equal(t, uint32(want.Remaining), st.LimitRemaining, "sliding window, call %d", i)
		assert.Equal(t, uint32(3), st.CurrentLimit.GetRequestsPerUnit())
	}

	hourly, err := throttle.New(store, throttle.GCRA, throttle.Limit{Count: 2, Period: time.Hour})
	require.NoError(t, err)
	for i := range 4 {
		want, err := hourly.Allow(ctx, "two")
		require.NoError(t, err)
		resp, err := p.call(ctx, "add", "two=a")
		require.NoError(t, err)
		st := resp.Statuses[0]
		assert.Equal(t, want.Allowed, resp.OverallCode == rlsv3.RateLimitResponse_OK, "two limits, call %d", i)
		// Allowed: the one with the fewest remaining is the hourly
		// GCRA (its burst is 2, the daily window has 5); refused: the
		// one over, the hourly.
		assert.Equal(t, "hourly", st.CurrentLimit.GetName(), "call %d", i)
		assert.Equal(t, uint32(want.Remaining), st.LimitRemaining, "call %d", i)
		var names []string
		for _, h := range resp.ResponseHeadersToAdd {
			names = append(names, h.Key)
		}
		assert.Contains(t, names, "RateLimit-Policy", "call %d", i)
	}
}

// TestRLSCountOnlyAdmitted: the reference counts refused hits, so after a
// limit is raised mid-window a client that kept retrying is still over;
// with --count-only-admitted it is not.
func TestRLSCountOnlyAdmitted(t *testing.T) {
	t.Parallel()
	for _, only := range []bool{false, true} {
		t.Run(fmt.Sprint("only-admitted=", only), func(t *testing.T) {
			cfg := filepath.Join(t.TempDir(), "config.yaml")
			writeFile(t, cfg, fmt.Sprintf(perDay, 2))
			args := []string{"--config", cfg}
			if only {
				args = append(args, "--count-only-admitted")
			}
			p := startRLS(t, nil, args...)
			ctx := t.Context()
			codes := func(n int) string {
				var s []string
				for range n {
					resp, err := p.call(ctx, "test", "k=x")
					require.NoError(t, err)
					s = append(s, resp.OverallCode.String())
				}
				return strings.Join(s, " ")
			}
			assert.Equal(t, "OK OK OVER_LIMIT OVER_LIMIT", codes(4))
			loads := p.metric("ratelimit_service_config_load_success")
			writeFile(t, cfg, fmt.Sprintf(perDay, 4))
			p.waitMetric("ratelimit_service_config_load_success", loads+1)
			if only {
				// 2 admitted so far: 2 more fit.
				assert.Equal(t, "OK OK OVER_LIMIT", codes(3))
			} else {
				// 4 counted so far (the refusals too): still over.
				assert.Equal(t, "OVER_LIMIT", codes(1))
			}
		})
	}
}

// TestRLSRedisCluster: --redis redis+cluster:// shares the counts through a
// Redis Cluster; a call with two descriptors (in different slots) counts
// both, and a second process sees the same counts.
func TestRLSRedisCluster(t *testing.T) {
	t.Parallel()
	c := redistest.StartCluster(t, 3)
	cfg := filepath.Join(t.TempDir(), "config.yaml")
	writeFile(t, cfg, fmt.Sprintf(perDay, 10))
	url := "redis+cluster://" + strings.Join(c.Addrs(), ",")
	// Not a test of the store timeout: a first call to a new cluster
	// opens connections to its nodes, longer than the default 50 ms on a
	// loaded machine.
	a := startRLS(t, nil, "--config", cfg, "--redis", url, "--store-timeout", "5s")
	b := startRLS(t, nil, "--config", cfg, "--redis", url, "--store-timeout", "5s")
	req := &rlsv3.RateLimitRequest{Domain: "test", Descriptors: []*ratelimitv3.RateLimitDescriptor{
		{Entries: []*ratelimitv3.RateLimitDescriptor_Entry{{Key: "k", Value: "one"}}},
		{Entries: []*ratelimitv3.RateLimitDescriptor_Entry{{Key: "k", Value: "two"}}},
	}}
	remaining := func(p *rlsProc) []uint32 {
		ctx, cancel := context.WithTimeout(t.Context(), rlsWait)
		defer cancel()
		resp, err := p.client.ShouldRateLimit(ctx, req)
		require.NoError(t, err)
		return []uint32{resp.Statuses[0].LimitRemaining, resp.Statuses[1].LimitRemaining}
	}
	assert.Equal(t, []uint32{9, 9}, remaining(a))
	assert.Equal(t, []uint32{8, 8}, remaining(b))
	assert.Equal(t, []uint32{7, 7}, remaining(a))

	// A single-server URL for a Cluster node is a misconfiguration:
	// exit status 2 at start, not MOVED answers forever.
	stdout, stderr, code := clitest.Run(t, clitest.Binary(t), "", "rls", "--config", cfg, "--redis", "redis://"+c.Addrs()[0],
		"--grpc", "127.0.0.1:0", "--http", "127.0.0.1:0")
	assert.Equal(t, command.ExitUsage, code, "stdout %q stderr %q", stdout, stderr)
	assert.Contains(t, stderr, "node of a Redis Cluster")
}
