package rls

// The tests of `ratelimit rls` that need a real redis-server
// (internal/redistest): a Redis killed and restarted, one set up wrong,
// the reference's environment variables, a graceful stop with calls held
// by a paused Redis, the refusal cache.

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/smoothrate/ratelimit/internal/cli/clitest"
	"github.com/smoothrate/ratelimit/internal/cli/command"
	"github.com/smoothrate/ratelimit/internal/redistest"
)

// TestRLSRedisKilled: Redis killed under the service answers UNAVAILABLE
// at once (within --store-timeout, not the reference's 10 s) and counts
// store errors; once Redis is back on the same port, calls are answered
// again.
func TestRLSRedisKilled(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	cfg := filepath.Join(t.TempDir(), "config.yaml")
	writeFile(t, cfg, fmt.Sprintf(perDay, 100))
	p := startRLS(t, nil, "--config", cfg, "--redis", "redis://"+srv.Addr()+"/0", "--store-timeout", "1s")
	p.warm("k=warm")
	ctx := t.Context()
	resp, err := p.call(ctx, "test", "k=x")
	require.NoError(t, err)
	assert.Equal(t, uint32(99), resp.Statuses[0].LimitRemaining)

	srv.Kill()
	start := time.Now()
	_, err = p.call(ctx, "test", "k=x")
	assert.Equal(t, codes.Unavailable, status.Code(err), "%v", err)
	// Far below the reference's 10 s; generous against a busy machine.
	assert.Less(t, time.Since(start), 5*time.Second)
	assert.GreaterOrEqual(t, p.metric(`ratelimit_service_should_rate_limit_error{err_type="redis_error"}`), int64(1))
	p.waitStderr(t, "outage began: ")
	p.waitStderr(t, "each request is answered Unavailable")

	srv.Restart()
	require.Eventually(t, func() bool {
		_, err := p.call(ctx, "test", "k=x")
		return err == nil
	}, rlsWait, 20*time.Millisecond, "no answer after Redis restarted; stderr: %s", p.Stderr.String())
	p.waitStderr(t, "outage ended after ")
}

// TestRLSRedisMisconfigured: a Redis that answers but is set up wrong (a
// wrong password, a replica, a database it does not have, a cluster URL
// for a single server) stops the command at start with exit status 2 and
// one line.
func TestRLSRedisMisconfigured(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	srv.CLI("CONFIG", "SET", "requirepass", "secret")
	replica := redistest.StartReplica(t, srv)
	cfg := filepath.Join(t.TempDir(), "config.yaml")
	writeFile(t, cfg, fmt.Sprintf(perDay, 1))
	bin := clitest.Binary(t)
	for _, url := range []string{
		"redis://" + srv.Addr() + "/0",
		"redis://" + replica.Addr() + "/0",
		"redis://:wrong@" + srv.Addr() + "/0",
		"redis://:secret@" + srv.Addr() + "/99",
		"redis+cluster://:secret@" + srv.Addr(),
	} {
		stdout, stderr, code := clitest.Run(t, bin, "", "rls", "--config", cfg, "--redis", url,
			"--grpc", "127.0.0.1:0", "--http", "127.0.0.1:0")
		assert.Equal(t, command.ExitUsage, code, "%s: stdout %q stderr %q", url, stdout, stderr)
		assert.Equal(t, 1, strings.Count(stderr, "\n"), "%s: %q", url, stderr)
		assert.Contains(t, stderr, "set up wrong", url)
		assert.NotContains(t, stderr, "secret", "the password is not printed")
	}

	// The right password, from a file rather than the URL, starts.
	pw := filepath.Join(t.TempDir(), "redis-password")
	writeFile(t, pw, "secret\n")
	p := startRLS(t, nil, "--config", cfg, "--redis", "redis://"+srv.Addr()+"/0", "--redis-password-file", pw, "--store-timeout", "5s")
	resp, err := p.call(t.Context(), "test", "k=x")
	require.NoError(t, err)
	assert.Equal(t, rlsv3.RateLimitResponse_OK, resp.OverallCode)

	// Set up wrong after start (the password changed, the connections
	// dropped): INTERNAL, counted and logged as a misconfiguration, not
	// UNAVAILABLE like an outage.
	srv.CLI("-a", "secret", "--no-auth-warning", "CONFIG", "SET", "requirepass", "changed")
	srv.CLI("-a", "changed", "--no-auth-warning", "CLIENT", "KILL", "TYPE", "normal")
	_, err = p.call(t.Context(), "test", "k=x")
	if status.Code(err) == codes.Unavailable { // the pool may have lost a killed connection first
		_, err = p.call(t.Context(), "test", "k=x")
	}
	assert.Equal(t, codes.Internal, status.Code(err), "%v", err)
	assert.GreaterOrEqual(t, p.metric("ratelimit_service_store_misconfigured"), int64(1))
	p.waitStderr(t, "Redis set up wrong")
}

// TestRLSEnvironment: with no flags, the reference's variables place the
// configuration (RUNTIME_ROOT/RUNTIME_SUBDIRECTORY/RUNTIME_APPDIRECTORY),
// the ports and Redis (REDIS_SOCKET_TYPE, REDIS_URL, REDIS_AUTH).
func TestRLSEnvironment(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	srv.CLI("CONFIG", "SET", "requirepass", "secret")
	root := t.TempDir()
	dir := filepath.Join(root, "sub", "ratelimit")
	require.NoError(t, os.MkdirAll(dir, 0o755))
	writeFile(t, filepath.Join(dir, "config.yaml"), fmt.Sprintf(perDay, 3))
	env := []string{"RUNTIME_ROOT=" + root, "RUNTIME_SUBDIRECTORY=sub", "RUNTIME_APPDIRECTORY=ratelimit",
		"REDIS_SOCKET_TYPE=tcp", "REDIS_URL=" + srv.Addr(), "REDIS_AUTH=secret", "LIMIT_RESPONSE_HEADERS_ENABLED=true",
		"GRPC_HOST=127.0.0.1", "GRPC_PORT=0", "HOST=127.0.0.1", "PORT=0"}
	// No flag at all: startRLS's would win over the variables.
	q := startBare(t, env)
	q.warm("k=warm") // the connection and the script, before the 50 ms store timeout counts
	resp, err := q.call(t.Context(), "test", "k=x")
	require.NoError(t, err)
	assert.Equal(t, uint32(2), resp.Statuses[0].LimitRemaining)
	assert.Equal(t, uint32(3), resp.Statuses[0].CurrentLimit.GetRequestsPerUnit())
	var names []string
	for _, h := range resp.ResponseHeadersToAdd {
		names = append(names, h.Key)
	}
	assert.Contains(t, names, "RateLimit-Remaining")
	// The count is in Redis, under the reference's key layout.
	assert.Contains(t, srv.CLI("-a", "secret", "--no-auth-warning", "KEYS", "*"), "test_k_x_")
}

// startBare starts `ratelimit rls` with no flags at all, configured by
// the environment alone.
func startBare(t *testing.T, env []string) *rlsProc {
	t.Helper()
	return launchRLS(t, env, []string{"rls"})
}

// TestRLSGracefulStop: calls in flight when SIGTERM arrives (held by a
// paused Redis) are answered, not cut, after the drain window, and the
// process then exits 0; the health check reports failure meanwhile.
func TestRLSGracefulStop(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	cfg := filepath.Join(t.TempDir(), "config.yaml")
	writeFile(t, cfg, fmt.Sprintf(perDay, 100))
	p := startRLS(t, nil, "--config", cfg, "--redis", "redis://"+srv.Addr()+"/0", "--store-timeout", "30s", "--drain", "1s")
	ctx := t.Context()
	_, err := p.call(ctx, "test", "k=x") // connects the pool
	require.NoError(t, err)

	srv.Pause()
	const n = 4
	errs := make(chan error, n)
	for range n {
		go func() {
			resp, err := p.call(ctx, "test", "k=x")
			if err == nil && resp.OverallCode != rlsv3.RateLimitResponse_OK {
				err = fmt.Errorf("answer %v", resp.OverallCode)
			}
			errs <- err
		}()
	}
	p.waitMetric("ratelimit_service_calls_in_flight", n)
	require.NoError(t, p.Cmd.Process.Signal(syscall.SIGTERM))
	require.Eventually(t, func() bool { return strings.Contains(p.Stderr.String(), "shutting down") },
		rlsWait, 10*time.Millisecond)
	srv.Resume()
	for range n {
		assert.NoError(t, <-errs)
	}
	assert.Equal(t, command.ExitOK, p.wait(), "stderr: %s", p.Stderr.String())
}

// TestRLSRefusalCache: with --refusal-cache (or the reference's
// LOCAL_CACHE_SIZE_IN_BYTES), a counter over its limit is answered from
// this process until its window ends: with Redis gone, it is still
// OVER_LIMIT (no round trip), while another counter is UNAVAILABLE.
func TestRLSRefusalCache(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		env  []string
		args []string
	}{
		{nil, []string{"--refusal-cache", "100"}},
		{[]string{"LOCAL_CACHE_SIZE_IN_BYTES=1048576"}, nil},
	} {
		t.Run(strings.Join(append(c.env, c.args...), " "), func(t *testing.T) {
			refusalCache(t, c.env, c.args)
		})
	}
}

func refusalCache(t *testing.T, env, args []string) {
	srv := redistest.Start(t)
	cfg := filepath.Join(t.TempDir(), "config.yaml")
	writeFile(t, cfg, fmt.Sprintf(perDay, 1))
	p := startRLS(t, env, append([]string{"--config", cfg, "--redis", "redis://" + srv.Addr() + "/0", "--store-timeout", "5s"}, args...)...)
	ctx := t.Context()
	for _, want := range []rlsv3.RateLimitResponse_Code{rlsv3.RateLimitResponse_OK, rlsv3.RateLimitResponse_OVER_LIMIT} {
		resp, err := p.call(ctx, "test", "k=x")
		require.NoError(t, err)
		assert.Equal(t, want, resp.OverallCode)
	}
	srv.Kill()
	resp, err := p.call(ctx, "test", "k=x")
	require.NoError(t, err, "answered from the refusal cache, without Redis")
	assert.Equal(t, rlsv3.RateLimitResponse_OVER_LIMIT, resp.OverallCode)
	// The reference's default mapping leaves over_limit_with_local_cache
	// unmapped: its name is the stat's, escaped.
	assert.Equal(t, int64(1), p.metric("ratelimit_service_rate_limit_test_k_over_limit_with_local_cache"))
	assert.Equal(t, int64(2), p.metric(`ratelimit_service_rate_limit_over_limit{domain="test",key1="k"}`))
	_, err = p.call(ctx, "test", "k=y")
	assert.Equal(t, codes.Unavailable, status.Code(err), "%v", err)
}
