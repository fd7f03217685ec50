package rlqs

// Replicas of `ratelimit rlqs` on one real redis-server (internal/redistest):
// Envoys split between them share each limit; Redis killed and restarted
// under them; a Redis set up wrong, or away at start.

import (
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"

	"github.com/smoothrate/ratelimit/internal/cli/clitest"
	"github.com/smoothrate/ratelimit/internal/cli/command"
	"github.com/smoothrate/ratelimit/internal/redistest"
	"github.com/smoothrate/ratelimit/internal/rlqstest"
	"github.com/smoothrate/ratelimit/internal/testlong"
)

// replicas starts two `ratelimit rlqs` on the Redis at url with the file
// at path.
func replicas(t *testing.T, path, url string) (a, b *proc) {
	t.Helper()
	return startRLQS(t, "--config", path, "--redis", url, "--server-id", "a"),
		startRLQS(t, "--config", path, "--redis", url, "--server-id", "b")
}

// TestRLQSReplicas: one Envoy on one replica and three on another, each
// wanting the whole of 100/s, get a quarter of it each (24.75: 99 % of the
// limit), and the fleet admits 100/s.
func TestRLQSReplicas(t *testing.T) {
	t.Parallel()
	window := testlong.Pick(3*time.Second, 10*time.Second)
	srv := redistest.Start(t)
	a, b := replicas(t, writeConfig(t, 100), clitest.RedisURL(srv))
	f := newEnvoys(t)
	es := []*rlqstest.Envoy{f.add(a.grpcAddr, rlqstest.Config{})}
	for range 3 {
		es = append(es, f.add(b.grpcAddr, rlqstest.Config{}))
	}
	for _, e := range es {
		f.drive(e, api, 100)
	}
	quarter := []float64{24.75, 24.75, 24.75, 24.75}
	took := eventually(t, waitLimit, func() string { return fmt.Sprintf("rates %.2f", rates(es, api)) },
		func() bool { return runningNear(es, api, quarter, 0.95, 1.05) })
	t.Logf("settled after %v", took)
	w := measure(es, api, window)
	within(t, "each Envoy", w, quarter, testlong.Pick(0.15, 0.1))
	within(t, "the fleet", w.fleet(), []float64{100}, testlong.Pick(0.1, 0.05))
	assert.Greater(t, a.metric("ratelimit_rlqs_store_calls_total"), 0.0)
	assert.Equal(t, 0.0, a.metric("ratelimit_rlqs_store_errors_total"))
}

// TestRLQSRedisRestart: Redis killed under two replicas: each logs the
// outage's start and goes on with the shares it had (renewed past their
// time to live, the fleet still within its limit); Redis restarted
// (empty): each logs the outage's end, and the shares hold.
func TestRLQSRedisRestart(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	a, b := replicas(t, writeConfig(t, 100), clitest.RedisURL(srv))
	f := newEnvoys(t)
	es := []*rlqstest.Envoy{f.add(a.grpcAddr, rlqstest.Config{}), f.add(b.grpcAddr, rlqstest.Config{})}
	for _, e := range es {
		f.drive(e, api, 100)
	}
	halves := []float64{49.5, 49.5}
	near := func() bool { return runningNear(es, api, halves, 0.95, 1.05) }
	eventually(t, waitLimit, func() string { return fmt.Sprintf("rates %.2f", rates(es, api)) }, near)

	srv.Kill()
	for _, p := range []*proc{a, b} {
		p.WaitStderr(t, "store (redis "+srv.Addr()+") outage began: rlqs: redis unavailable", waitLimit)
		p.WaitStderr(t, "each request is skipped (the buckets keep their last shares)", waitLimit)
	}
	// Longer than the time to live (3 s): the assignments are renewed.
	w := measure(es, api, 4*time.Second)
	assert.True(t, near(), "during the outage: rates %.2f", rates(es, api))
	within(t, "during the outage", w, halves, 0.15)
	assert.Greater(t, a.metric(`ratelimit_rlqs_store_errors_total{cause="unavailable"}`), 0.0)

	srv.Restart()
	for _, p := range []*proc{a, b} {
		p.WaitStderr(t, "store (redis "+srv.Addr()+") outage ended after ", waitLimit)
	}
	within(t, "after the outage", measure(es, api, 2*time.Second), halves, 0.15)
	assert.True(t, near(), "after the outage: rates %.2f", rates(es, api))
	assert.Equal(t, command.ExitOK, a.stop(), a.Stderr.String())
	assert.NotContains(t, a.Stderr.String(), "still going at shutdown")
}

// TestRLQSRedisMisconfigured: a Redis that answers but is set up wrong (a
// wrong password, a replica, a database it does not have, a cluster URL
// for a single server) stops the command at start with exit status 2 and
// one line.
func TestRLQSRedisMisconfigured(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	srv.CLI("CONFIG", "SET", "requirepass", "secret")
	replica := redistest.StartReplica(t, srv)
	path := writeConfig(t, 100)
	bin := clitest.Binary(t)
	for _, url := range []string{
		"redis://" + srv.Addr() + "/0",
		"redis://" + replica.Addr() + "/0",
		"redis://:wrong@" + srv.Addr() + "/0",
		"redis://:secret@" + srv.Addr() + "/99",
		"redis+cluster://:secret@" + srv.Addr(),
	} {
		stderr, code := clitest.RunToExit(t, bin, nil, waitLimit, "rlqs", "--config", path, "--redis", url,
			"--grpc", "127.0.0.1:0", "--http", "127.0.0.1:0")
		assert.Equal(t, command.ExitUsage, code, "%s: %s", url, stderr)
		assert.Equal(t, 1, strings.Count(stderr, "\n"), "%s: %q", url, stderr)
		assert.Contains(t, stderr, "set up wrong", url)
		assert.NotContains(t, stderr, "secret", "the password is not printed")
	}
	// The right password, from a file rather than the URL, starts.
	pw := filepath.Join(t.TempDir(), "redis-password")
	writeFile(t, pw, "secret\n")
	p := startRLQS(t, "--config", path, "--redis", clitest.RedisURL(srv), "--redis-password-file", pw)
	assert.Equal(t, command.ExitOK, p.stop(), p.Stderr.String())
}

// TestRLQSRedisAwayAtStart: a Redis that does not answer at start is a
// warning, not an exit: the server serves, assigns nothing (it has never
// claimed a share), and once Redis answers, the outage ends and the Envoy
// gets its share.
func TestRLQSRedisAwayAtStart(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	srv.Kill()
	p := startRLQS(t, "--config", writeConfig(t, 100), "--redis", clitest.RedisURL(srv))
	p.WaitStderr(t, "warning: redis at "+srv.Addr()+" does not answer", waitLimit)
	p.WaitStderr(t, "outage began", waitLimit)
	f := newEnvoys(t)
	e := f.add(p.grpcAddr, rlqstest.Config{})
	f.drive(e, api, 100)
	eventually(t, waitLimit, p.Stderr.String, func() bool { return e.State(api).Known })
	// A claim fails at least every allocation; the Envoy has none.
	base := p.metric("ratelimit_rlqs_store_errors_total")
	eventually(t, waitLimit, p.Stderr.String, func() bool { return p.metric("ratelimit_rlqs_store_errors_total") > base })
	assert.False(t, e.State(api).Assigned, "no share before a claim succeeded: %+v", e.State(api))

	srv.Restart()
	p.WaitStderr(t, "outage ended after ", waitLimit)
	eventually(t, waitLimit, func() string { return fmt.Sprintf("rates %.2f", rates(f.all, api)) },
		func() bool { return runningNear(f.all, api, []float64{99}, 0.97, 1.03) })
}

// TestRLQSRedisTLS: replicas reach a Redis that requires a client
// certificate, with --redis rediss:// and the --redis-tls-* flags: the
// claims are made (an Envoy gets its share, no outage) and written there.
func TestRLQSRedisTLS(t *testing.T) {
	t.Parallel()
	srv, files := redistest.StartTLSClientAuth(t, "rlqs")
	p := startRLQS(t, "--config", writeConfig(t, 100), "--redis", "rediss://"+srv.TLSAddr()+"/0",
		"--redis-tls-cert", files.ClientCert, "--redis-tls-key", files.ClientKey, "--redis-tls-ca", files.CA)
	f := newEnvoys(t)
	e := f.add(p.grpcAddr, rlqstest.Config{})
	f.drive(e, api, 100)
	eventually(t, waitLimit, func() string { return fmt.Sprintf("%+v; stderr: %s", e.State(api), p.Stderr.String()) },
		func() bool { return runningNear(f.all, api, []float64{99}, 0.97, 1.03) })
	assert.Contains(t, srv.CLI("KEYS", "*"), "ratelimit:rlqs:{")
	assert.Equal(t, 0.0, p.metric("ratelimit_rlqs_store_errors_total"))
	assert.NotContains(t, p.Stderr.String(), "outage")
}

// TestRLQSWarnsOfEvictions: a Redis that may evict the servers' claims
// when full gets a warning at start.
func TestRLQSWarnsOfEvictions(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t, "--maxmemory", "40mb", "--maxmemory-policy", "volatile-random")
	p := startRLQS(t, "--config", writeConfig(t, 100), "--redis", clitest.RedisURL(srv))
	p.WaitStderr(t, "ratelimit rlqs: warning: redis at "+srv.Addr()+" evicts keys when it is full (maxmemory 40.00M, maxmemory-policy volatile-random)", waitLimit)
	assert.Equal(t, command.ExitOK, p.stop(), p.Stderr.String())
}
