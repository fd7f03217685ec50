package rls

// The tests of `ratelimit rls` drive the built binary (clitest.Binary) as an
// operator would: gRPC calls with go-control-plane's client, the /json
// face, reloads, a Redis killed and restarted, SIGTERM with calls in
// flight. They wait for conditions they can observe (a line on stdout, a
// counter on /metrics, an answer), polled with a deadline, never for time.

import (
	"bytes"
	"context"
	"flag"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/protobuf/encoding/protojson"

	"github.com/smoothrate/ratelimit/internal/cli/clitest"
	"github.com/smoothrate/ratelimit/internal/cli/command"
	"github.com/smoothrate/ratelimit/internal/cli/metrics/metricstest"
	"github.com/smoothrate/ratelimit/internal/cli/redisflag"
	"github.com/smoothrate/ratelimit/internal/redistest"
)

func TestMain(m *testing.M) { clitest.Main(m) }

// rlsWait bounds every wait for a condition: generous, since the machine
// may be busy; a passing test waits only as long as the condition takes.
const rlsWait = 15 * time.Second

// rlsProc is a running `ratelimit rls`.
type rlsProc struct {
	*clitest.Proc
	t           *testing.T
	grpcAddr    string
	httpURL     string
	metricsURL  string // http://host:port
	metricsPath string
	client      rlsv3.RateLimitServiceClient
}

var rlsBanner = regexp.MustCompile(`gRPC on (\S+)(?: \([^)]*\))?, HTTP on (http://[^,;]+)(?:, metrics on (http://[^/;]+)(/[^;]*))?;`)

// startRLS starts the binary on free loopback ports with args (after
// --grpc, --http, --metrics and a short --reload-interval, which args may
// override) and the extra environment env, and waits for its banner.
func startRLS(t *testing.T, env []string, args ...string) *rlsProc {
	t.Helper()
	return launchRLS(t, env, append([]string{"rls", "--grpc", "127.0.0.1:0", "--http", "127.0.0.1:0",
		"--metrics", "127.0.0.1:0", "--reload-interval", "20ms"}, args...))
}

// launchRLS runs the binary with exactly full and the extra environment
// env, and waits for its banner.
func launchRLS(t *testing.T, env []string, full []string) *rlsProc {
	t.Helper()
	return launchRLSOver(t, env, full, insecure.NewCredentials())
}

// launchRLSOver is launchRLS with creds for the client's connection (TLS).
func launchRLSOver(t *testing.T, env []string, full []string, creds credentials.TransportCredentials) *rlsProc {
	t.Helper()
	cmd := exec.Command(clitest.Binary(t), full...)
	cmd.Env = append(os.Environ(), env...)
	return attachRLS(t, cmd, creds)
}

// launchWrapped is launchRLS under a wrapper command (prlimit) that execs
// the binary, so that the process is the binary's.
func launchWrapped(t *testing.T, wrap, env, full []string) *rlsProc {
	t.Helper()
	argv := append(append(append([]string{}, wrap...), clitest.Binary(t)), full...)
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Env = append(os.Environ(), env...)
	return attachRLS(t, cmd, insecure.NewCredentials())
}

// attachRLS starts cmd, `ratelimit rls` however it is run (the binary, a
// container), waits for its banner and connects a client with creds.
func attachRLS(t *testing.T, cmd *exec.Cmd, creds credentials.TransportCredentials) *rlsProc {
	t.Helper()
	p := &rlsProc{t: t, Proc: clitest.Attach(t, cmd, rlsWait)}
	m := rlsBanner.FindStringSubmatch(p.Banner)
	if m == nil {
		t.Fatalf("rls %q: no banner: %q\nstderr: %s", cmd.Args[1:], p.Banner, p.Stderr.String())
	}
	p.grpcAddr, p.httpURL, p.metricsURL, p.metricsPath = m[1], m[2], m[3], m[4]
	conn, err := grpc.NewClient(p.grpcAddr, grpc.WithTransportCredentials(creds))
	require.NoError(t, err)
	t.Cleanup(func() { conn.Close() })
	p.client = rlsv3.NewRateLimitServiceClient(conn)
	return p
}

// call asks ShouldRateLimit about one descriptor of domain, made of
// key=value pairs ("k=v", or "k" for a key without a value).
func (p *rlsProc) call(ctx context.Context, domain string, entries ...string) (*rlsv3.RateLimitResponse, error) {
	return p.client.ShouldRateLimit(ctx, request(domain, entries...))
}

func request(domain string, entries ...string) *rlsv3.RateLimitRequest {
	d := &ratelimitv3.RateLimitDescriptor{}
	for _, e := range entries {
		k, v, _ := strings.Cut(e, "=")
		d.Entries = append(d.Entries, &ratelimitv3.RateLimitDescriptor_Entry{Key: k, Value: v})
	}
	return &rlsv3.RateLimitRequest{Domain: domain, Descriptors: []*ratelimitv3.RateLimitDescriptor{d}}
}

// metric reads a series from /metrics: name is a family, whose series
// are summed, or one series, `family{label="value",...}` with its labels
// sorted; 0 when the page has none, -1 when the endpoint does not answer.
func (p *rlsProc) metric(name string) int64 {
	page, _, err := metricstest.Scrape(p.metricsURL + p.metricsPath)
	if err != nil {
		return -1
	}
	family, _, labelled := strings.Cut(name, "{")
	var sum float64
	for k, v := range page.Series(family) {
		if k == name || !labelled && (k == family || strings.HasPrefix(k, family+"{")) {
			sum += v
		}
	}
	return int64(sum)
}

// waitMetric waits until the metric reaches at least want.
func (p *rlsProc) waitMetric(name string, want int64) {
	p.t.Helper()
	require.Eventually(p.t, func() bool { return p.metric(name) >= want }, rlsWait, 10*time.Millisecond,
		"%s never reached %d (last %d); stderr: %s", name, want, p.metric(name), p.Stderr.String())
}

// waitStderr waits, boundedly, until the service has written want on its
// standard error: a line written just before or after an answer or a
// metric reaches p.Stderr through a pipe, a little later.
func (p *rlsProc) waitStderr(t *testing.T, want string) {
	t.Helper()
	assert.Eventually(t, func() bool { return strings.Contains(p.Stderr.String(), want) },
		rlsWait, 10*time.Millisecond, "%q never written; stderr: %s", want, p.Stderr.String())
}

// wait waits for the process to exit and returns its status.
func (p *rlsProc) wait() int {
	p.t.Helper()
	return p.Wait(p.t, rlsWait)
}

func writeFile(t *testing.T, path, content string) {
	t.Helper()
	require.NoError(t, os.WriteFile(path, []byte(content), 0o644))
}

const perDay = `domain: test
descriptors:
  - key: k
    rate_limit:
      unit: day
      requests_per_unit: %d
  - key: other
    value: v
    rate_limit:
      unlimited: true
`

// untilReset is the reference's duration_until_reset of a window of unit
// seconds at now: the seconds to the window's end, aligned on the epoch.
func untilReset(now time.Time, unit int64) int64 { return unit - now.Unix()%unit }

// TestRLSGRPC: the reference's answers over gRPC (go-control-plane's
// client): a fixed window of 2 a day counts 1, 2, then refuses (and
// counts the refusal); an unlimited rule, a descriptor that matches no
// rule and an unknown domain are OK without a limit.
func TestRLSGRPC(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	cfg := filepath.Join(dir, "config.yaml")
	writeFile(t, cfg, fmt.Sprintf(perDay, 2))
	p := startRLS(t, nil, "--config", cfg)
	ctx := t.Context()
	for i, want := range []struct {
		code      rlsv3.RateLimitResponse_Code
		remaining uint32
	}{{rlsv3.RateLimitResponse_OK, 1}, {rlsv3.RateLimitResponse_OK, 0}, {rlsv3.RateLimitResponse_OVER_LIMIT, 0}} {
		before := time.Now()
		resp, err := p.call(ctx, "test", "k=x")
		after := time.Now()
		require.NoError(t, err)
		assert.Equal(t, want.code, resp.OverallCode, "call %d", i)
		require.Len(t, resp.Statuses, 1)
		st := resp.Statuses[0]
		assert.Equal(t, want.code, st.Code, "call %d", i)
		assert.Equal(t, want.remaining, st.LimitRemaining, "call %d", i)
		require.NotNil(t, st.CurrentLimit)
		assert.Equal(t, uint32(2), st.CurrentLimit.RequestsPerUnit)
		assert.Equal(t, rlsv3.RateLimitResponse_RateLimit_DAY, st.CurrentLimit.Unit)
		reset := st.DurationUntilReset.AsDuration()
		assert.True(t, reset >= time.Duration(untilReset(after, 86400)-1)*time.Second &&
			reset <= time.Duration(untilReset(before, 86400))*time.Second, "call %d: duration_until_reset %v", i, reset)
	}
	for _, e := range [][]string{{"other=v"}, {"nomatch=1"}} {
		resp, err := p.call(ctx, "test", e...)
		require.NoError(t, err)
		assert.Equal(t, rlsv3.RateLimitResponse_OK, resp.OverallCode, "%v", e)
		require.Len(t, resp.Statuses, 1)
		assert.Nil(t, resp.Statuses[0].CurrentLimit, "%v", e)
	}
	resp, err := p.call(ctx, "no-such-domain", "k=x")
	require.NoError(t, err)
	assert.Equal(t, rlsv3.RateLimitResponse_OK, resp.OverallCode)
	assert.Equal(t, int64(3), p.metric("ratelimit_service_rate_limit_total_hits"))
	assert.Equal(t, int64(1), p.metric("ratelimit_service_rate_limit_over_limit"))
}

// TestRLSJSON: POST /json takes the reference's body (protojson of a
// RateLimitRequest) and answers 200, then 429, with the response in JSON;
// a body that is not a request is 400; /healthcheck answers OK.
func TestRLSJSON(t *testing.T) {
	t.Parallel()
	cfg := filepath.Join(t.TempDir(), "config.yaml")
	writeFile(t, cfg, fmt.Sprintf(perDay, 1))
	p := startRLS(t, nil, "--config", cfg)
	post := func(body string) (int, *rlsv3.RateLimitResponse, string) {
		resp, err := http.Post(p.httpURL+"/json", "application/json", strings.NewReader(body))
		require.NoError(t, err)
		defer resp.Body.Close()
		b, err := io.ReadAll(resp.Body)
		require.NoError(t, err)
		var r rlsv3.RateLimitResponse
		if resp.StatusCode == http.StatusOK || resp.StatusCode == http.StatusTooManyRequests {
			require.NoError(t, protojson.Unmarshal(b, &r), "%s", b)
			assert.Equal(t, "application/json", resp.Header.Get("Content-Type"))
		}
		return resp.StatusCode, &r, string(b)
	}
	body := `{"domain": "test", "descriptors": [{"entries": [{"key": "k", "value": "a"}]}]}`
	code, r, raw := post(body)
	assert.Equal(t, http.StatusOK, code, raw)
	assert.Equal(t, rlsv3.RateLimitResponse_OK, r.OverallCode)
	code, r, raw = post(body)
	assert.Equal(t, http.StatusTooManyRequests, code, raw)
	assert.Equal(t, rlsv3.RateLimitResponse_OVER_LIMIT, r.OverallCode)
	assert.Contains(t, raw, `"overallCode":"OVER_LIMIT"`)
	code, _, _ = post(`{"domain": "test", "descriptors": [{"entries": [{"key": "k", "value": "b"}]}], "nosuchfield": 1}`)
	assert.Equal(t, http.StatusBadRequest, code)
	code, _, _ = post(`not json`)
	assert.Equal(t, http.StatusBadRequest, code)

	resp, err := http.Get(p.httpURL + "/healthcheck")
	require.NoError(t, err)
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	assert.Equal(t, http.StatusOK, resp.StatusCode)
	assert.Equal(t, "OK", string(b))
}

// TestRLSReload: a good change is taken (and counted), a bad one keeps
// the previous configuration, says why and is counted; SIGHUP reloads
// without waiting for the poll.
func TestRLSReload(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	cfg := filepath.Join(dir, "config.yaml")
	writeFile(t, cfg, fmt.Sprintf(perDay, 1))
	p := startRLS(t, nil, "--config", dir)
	ctx := t.Context()
	remaining := func(want rlsv3.RateLimitResponse_Code, rem uint32, limit uint32) {
		t.Helper()
		resp, err := p.call(ctx, "test", "k=x")
		require.NoError(t, err)
		assert.Equal(t, want, resp.OverallCode)
		assert.Equal(t, rem, resp.Statuses[0].LimitRemaining)
		assert.Equal(t, limit, resp.Statuses[0].CurrentLimit.GetRequestsPerUnit())
	}
	remaining(rlsv3.RateLimitResponse_OK, 0, 1)
	remaining(rlsv3.RateLimitResponse_OVER_LIMIT, 0, 1)
	loads := p.metric("ratelimit_service_config_load_success")

	// A good change: 5 a day. The window has counted 2 hits (the
	// reference counts refused hits too), so the third is the 3rd of 5.
	writeFile(t, cfg, fmt.Sprintf(perDay, 5))
	p.waitMetric("ratelimit_service_config_load_success", loads+1)
	remaining(rlsv3.RateLimitResponse_OK, 2, 5)

	// A bad change: the previous configuration (5 a day) stays.
	writeFile(t, cfg, "domain: test\ndescriptors:\n  - key: k\n    rate_limit: {unit: fortnight, requests_per_unit: 1}\n")
	p.waitMetric("ratelimit_service_config_load_error", 1)
	remaining(rlsv3.RateLimitResponse_OK, 1, 5)
	p.waitStderr(t, "keeping the previous one")
	p.waitStderr(t, cfg)
	assert.Equal(t, loads+1, p.metric("ratelimit_service_config_load_success"))

	// A second file with another domain, then the bad one fixed: both
	// load together.
	writeFile(t, filepath.Join(dir, "other.yaml"), "domain: other\ndescriptors:\n  - key: o\n    rate_limit: {unit: hour, requests_per_unit: 1}\n")
	writeFile(t, cfg, fmt.Sprintf(perDay, 10))
	p.waitMetric("ratelimit_service_config_load_success", loads+2)
	remaining(rlsv3.RateLimitResponse_OK, 5, 10)
	resp, err := p.call(ctx, "other", "o=1")
	require.NoError(t, err)
	assert.Equal(t, uint32(1), resp.Statuses[0].CurrentLimit.GetRequestsPerUnit())
}

// TestRLSReloadSIGHUP: with a poll too slow to notice, SIGHUP reloads.
func TestRLSReloadSIGHUP(t *testing.T) {
	t.Parallel()
	cfg := filepath.Join(t.TempDir(), "config.yaml")
	writeFile(t, cfg, fmt.Sprintf(perDay, 1))
	p := startRLS(t, nil, "--config", cfg, "--reload-interval", "1h")
	loads := p.metric("ratelimit_service_config_load_success")
	writeFile(t, cfg, fmt.Sprintf(perDay, 7))
	require.NoError(t, p.Cmd.Process.Signal(syscall.SIGHUP))
	p.waitMetric("ratelimit_service_config_load_success", loads+1)
	resp, err := p.call(t.Context(), "test", "k=x")
	require.NoError(t, err)
	assert.Equal(t, uint32(7), resp.Statuses[0].CurrentLimit.GetRequestsPerUnit())
}

// TestRLSCheck: --check exits 0 for a valid configuration and 2 with one
// line naming the file and the problem for an invalid one.
func TestRLSCheck(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	good := filepath.Join(dir, "good.yaml")
	writeFile(t, good, fmt.Sprintf(perDay, 1))
	var stdout, stderr bytes.Buffer
	assert.Equal(t, command.ExitOK, Run([]string{"--config", good, "--check"}, nil, &stdout, &stderr), stderr.String())
	assert.Contains(t, stdout.String(), "is valid")

	bad := filepath.Join(t.TempDir(), "bad.yaml")
	writeFile(t, bad, "domain: test\ndescriptors:\n  - key: k\n    rate_limit: {unit: fortnight, requests_per_unit: 1}\n")
	stdout.Reset()
	stderr.Reset()
	assert.Equal(t, command.ExitUsage, Run([]string{"--config", bad, "--check"}, nil, &stdout, &stderr))
	line := stderr.String()
	assert.Equal(t, 1, strings.Count(line, "\n"), "one line: %q", line)
	assert.True(t, strings.HasPrefix(line, "ratelimit rls: "+bad+": "), "%q", line)
	assert.Contains(t, line, "fortnight")
	assert.Empty(t, stdout.String())

	stderr.Reset()
	assert.Equal(t, command.ExitUsage, Run([]string{"--config", filepath.Join(dir, "missing"), "--check"}, nil, &stdout, &stderr))
	assert.Contains(t, stderr.String(), "missing")
}

// TestRLSFlagErrors: bad flags and environment values are one line and
// exit status 2.
func TestRLSFlagErrors(t *testing.T) {
	t.Parallel()
	cfg := filepath.Join(t.TempDir(), "config.yaml")
	writeFile(t, cfg, fmt.Sprintf(perDay, 1))
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--grpc", "nope"}, `--grpc "nope": want host:port`},
		{[]string{"--store-timeout", "0s"}, "--store-timeout 0s"},
		{[]string{"--redis", "http://x"}, `--redis "http://x"`},
		{[]string{"--redis", "redis://127.0.0.1:1", "--max-keys", "5"}, "--max-keys applies to the memory store"},
		{[]string{"extra"}, `unexpected argument "extra"`},
		{[]string{"--redis", "redis://:hunter2@127.0.0.1:1/x"}, `--redis "redis://:xxxxx@127.0.0.1:1/x"`},
		{[]string{"--redis-password-file", "/nonexistent"}, "only applies with --redis"},
	} {
		var stdout, stderr bytes.Buffer
		code := Run(append([]string{"--config", cfg}, tc.args...), nil, &stdout, &stderr)
		assert.Equal(t, command.ExitUsage, code, "%q", tc.args)
		assert.Equal(t, 1, strings.Count(stderr.String(), "\n"), "%q: %q", tc.args, stderr.String())
		assert.Contains(t, stderr.String(), tc.want, "%q", tc.args)
	}
}

// TestRLSResolve: how flags and the reference's variables combine: a flag
// wins, a variable fills in, the reference's defaults otherwise.
func TestRLSResolve(t *testing.T) {
	t.Parallel()
	lookup := func(env map[string]string) func(string) (string, bool) {
		return func(k string) (string, bool) { v, ok := env[k]; return v, ok }
	}
	defaults := flagDefaults
	c := defaults()
	require.NoError(t, c.resolve(map[string]bool{}, "", lookup(nil)))
	assert.Equal(t, "/srv/runtime_data/current/config", c.configPath)
	assert.Equal(t, ":8081", c.grpcAddr)
	assert.Equal(t, ":8080", c.httpAddr)
	assert.Nil(t, c.newRedis, "no REDIS_URL: the memory store")
	assert.Empty(t, c.metricsAddr)

	c = defaults()
	require.NoError(t, c.resolve(map[string]bool{}, "", lookup(map[string]string{
		"RUNTIME_ROOT": "/data", "RUNTIME_SUBDIRECTORY": "rl", "GRPC_PORT": "9000", "HOST": "127.0.0.1",
		"USE_PROMETHEUS": "true", "REDIS_URL": "redis-a:6379,redis-b:6379", "REDIS_TYPE": "CLUSTER",
		"REDIS_SOCKET_TYPE": "tcp", "LIMIT_RESPONSE_HEADERS_ENABLED": "1", "MERGE_DOMAIN_CONFIG": "true",
	})))
	assert.Equal(t, "/data/rl/config", c.configPath)
	assert.Equal(t, ":9000", c.grpcAddr)
	assert.Equal(t, "127.0.0.1:8080", c.httpAddr)
	assert.Equal(t, ":9090", c.metricsAddr)
	assert.True(t, c.responseHeaders)
	assert.True(t, c.mergeDomains)
	require.NotNil(t, c.newRedis)
	assert.Equal(t, "redis-a:6379,redis-b:6379", c.redisWhere)

	// Flags win over the variables.
	c = defaults()
	c.configPath, c.grpcAddr = "/etc/rl", "127.0.0.1:1"
	require.NoError(t, c.resolve(map[string]bool{"config": true, "grpc": true, "redis": true}, "redis://h:1/2",
		lookup(map[string]string{"RUNTIME_ROOT": "/data", "GRPC_PORT": "9000", "REDIS_URL": "x:1"})))
	assert.Equal(t, "/etc/rl", c.configPath)
	assert.Equal(t, "127.0.0.1:1", c.grpcAddr)
	assert.Equal(t, "h:1", c.redisWhere)

	for _, tc := range []struct {
		env  map[string]string
		want string
	}{
		{map[string]string{"GRPC_PORT": "x"}, `GRPC_PORT="x"`},
		{map[string]string{"PORT": "70000"}, `PORT="70000"`},
		{map[string]string{"USE_PROMETHEUS": "yes"}, `USE_PROMETHEUS="yes"`},
		{map[string]string{"REDIS_URL": "h:1", "REDIS_TYPE": "ring"}, `REDIS_TYPE="ring"`},
		{map[string]string{"REDIS_URL": "h:1", "REDIS_SOCKET_TYPE": "udp"}, `REDIS_SOCKET_TYPE="udp"`},
		{map[string]string{"REDIS_URL": "m", "REDIS_TYPE": "sentinel"}, "sentinel wants the master's name"},
		{map[string]string{"REDIS_URL": "a:1,b:1", "REDIS_SOCKET_TYPE": "tcp"}, "single takes one address"},
		{map[string]string{"NEAR_LIMIT_RATIO": "2"}, `NEAR_LIMIT_RATIO="2"`},
		// The reference's settings we do not implement, set: exit 2,
		// never silently ignored.
		{map[string]string{"BACKEND_TYPE": "memcache", "MEMCACHE_HOST_PORT": "m:11211"}, `BACKEND_TYPE="memcache": only Redis`},
		{map[string]string{"MEMCACHE_HOST_PORT": "m:11211"}, "memcache is not supported"},
		{map[string]string{"REDIS_URL": "h:1", "REDIS_SOCKET_TYPE": "tcp", "REDIS_PERSECOND": "true"}, "per-second limits is not supported"},
		{map[string]string{"REDIS_URL": "h:1", "REDIS_SOCKET_TYPE": "tcp", "REDIS_PERSECOND_URL": "p:1"}, "per-second limits is not supported"},
		{map[string]string{"QUOTA_MODE": "true"}, "quota mode"},
		{map[string]string{"QUOTA_MODE": "1"}, "quota mode"},
		{map[string]string{"BACKEND_TYPE": "redis"}, "needs REDIS_URL"},
	} {
		c := defaults()
		err := c.resolve(map[string]bool{}, "", lookup(tc.env))
		assert.ErrorContains(t, err, tc.want, "%v", tc.env)
	}
}

// TestRLSUnsupportedAtDefault: the reference's unsupported settings set to
// their defaults (as a deployment's manifest often carries them) ask for
// nothing and are accepted.
func TestRLSUnsupportedAtDefault(t *testing.T) {
	t.Parallel()
	env := map[string]string{"REDIS_URL": "h:1", "REDIS_SOCKET_TYPE": "tcp"}
	for _, s := range unsupportedSettings {
		env[s.name] = strings.ToUpper(s.def)
	}
	c := flagDefaults()
	require.NoError(t, c.resolve(map[string]bool{}, "", func(k string) (string, bool) { v, ok := env[k]; return v, ok }))
	// The reference reads its booleans with strconv.ParseBool: 0, f and F
	// are false too.
	for _, v := range []string{"0", "f", "F", "False"} {
		env := map[string]string{"REDIS_URL": "h:1", "REDIS_SOCKET_TYPE": "tcp", "REDIS_PERSECOND": v, "QUOTA_MODE": v}
		require.NoError(t, flagDefaults().resolve(map[string]bool{}, "", func(k string) (string, bool) { v, ok := env[k]; return v, ok }), "%v", env)
	}
}

// flagDefaults is the configuration the flags give when none is set.
func flagDefaults() *rlsConfig {
	c := &rlsConfig{}
	var rf redisflag.Flags
	c.register(flag.NewFlagSet("rls", flag.ContinueOnError), &rf)
	return c
}

// TestRLSResolveGateway: how the settings Envoy Gateway and the reference
// use combine with the flags, and the errors for what cannot be honoured.
func TestRLSResolveGateway(t *testing.T) {
	t.Parallel()
	lookup := func(env map[string]string) func(string) (string, bool) {
		return func(k string) (string, bool) { v, ok := env[k]; return v, ok }
	}
	resolve := func(given map[string]bool, env map[string]string, set func(*rlsConfig)) (*rlsConfig, error) {
		c := flagDefaults()
		if set != nil {
			set(c)
		}
		return c, c.resolve(given, "", lookup(env))
	}

	// Envoy Gateway's environment: xDS over TLS, gRPC over TLS without
	// client certificates, GRPC_SERVER_TLS_CA_CERT ignored.
	c, err := resolve(nil, map[string]string{
		"RUNTIME_ROOT": "/data", "CONFIG_TYPE": "GRPC_XDS_SOTW", "CONFIG_GRPC_XDS_SERVER_URL": "envoy-gateway:18001",
		"CONFIG_GRPC_XDS_NODE_ID": "envoy-ratelimit", "GRPC_SERVER_USE_TLS": "true", "GRPC_SERVER_TLS_CERT": "/certs/tls.crt",
		"GRPC_SERVER_TLS_KEY": "/certs/tls.key", "GRPC_SERVER_TLS_CA_CERT": "/certs/ca.crt",
		"CONFIG_GRPC_XDS_SERVER_USE_TLS": "true", "CONFIG_GRPC_XDS_CLIENT_TLS_CERT": "/certs/tls.crt",
		"CONFIG_GRPC_XDS_CLIENT_TLS_KEY": "/certs/tls.key", "CONFIG_GRPC_XDS_SERVER_TLS_CACERT": "/certs/ca.crt",
		"FORCE_START_WITHOUT_INITIAL_CONFIG": "true", "CONFIG_GRPC_XDS_NODE_METADATA": "zone=a,region=b",
		"CONFIG_GRPC_XDS_CLIENT_ADDITIONAL_HEADERS": "x-token:t1", "XDS_CLIENT_BACKOFF_INITIAL_INTERVAL": "1s",
		"XDS_CLIENT_BACKOFF_MAX_INTERVAL": "8s", "XDS_CLIENT_BACKOFF_RANDOM_FACTOR": "2", "XDS_CLIENT_BACKOFF_JITTER": "false",
		"CONFIG_GRPC_XDS_SERVER_CONNECT_RETRY_INTERVAL": "500ms", "XDS_CLIENT_MAX_MSG_SIZE_IN_BYTES": "8388608",
		"GRPC_MAX_CONNECTION_AGE": "1h", "GRPC_MAX_CONNECTION_AGE_GRACE": "5m",
	}, nil)
	require.NoError(t, err)
	x := c.xds
	assert.Equal(t, "envoy-gateway:18001", x.url)
	assert.Equal(t, "envoy-ratelimit", x.nodeID)
	assert.Equal(t, map[string]string{"zone": "a", "region": "b"}, x.nodeMetadata)
	assert.Equal(t, map[string]string{"x-token": "t1"}, x.headers)
	assert.True(t, x.useTLS)
	assert.Equal(t, "/certs/tls.crt", x.tls.CertFile)
	assert.Equal(t, "/certs/ca.crt", x.tls.CAFile)
	assert.Equal(t, time.Second, x.backoff.Initial)
	assert.Equal(t, 8*time.Second, x.backoff.Max)
	assert.Equal(t, 2.0, x.backoff.Factor)
	assert.False(t, x.backoff.Jitter)
	assert.Equal(t, 500*time.Millisecond, x.connectRetry)
	assert.Equal(t, 8388608, x.maxMsgSize)
	assert.True(t, x.forceStart)
	assert.True(t, c.grpc.useTLS)
	assert.Empty(t, c.grpc.tls.ClientCAFile, "GRPC_SERVER_TLS_CA_CERT asks for no client certificate")
	assert.Equal(t, time.Hour, c.grpc.maxAge)
	assert.Equal(t, 5*time.Minute, c.grpc.maxAgeGrace)

	// The reference's default server; --config wins over CONFIG_TYPE.
	c, err = resolve(nil, map[string]string{"CONFIG_TYPE": "grpc_xds_sotw"}, nil)
	require.NoError(t, err)
	assert.Equal(t, "localhost:18000", c.xds.url)
	assert.Equal(t, "default", c.xds.nodeID)
	assert.False(t, c.xds.useTLS)
	c, err = resolve(map[string]bool{"config": true}, map[string]string{"CONFIG_TYPE": "GRPC_XDS_SOTW"}, func(c *rlsConfig) { c.configPath = "/etc/rl" })
	require.NoError(t, err)
	assert.Empty(t, c.xds.url)

	// GRPC_UDS replaces GRPC_HOST:GRPC_PORT; the count and the cache.
	c, err = resolve(nil, map[string]string{"GRPC_UDS": "/run/rl.sock", "GRPC_PORT": "9000", "STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT": "true",
		"REDIS_URL": "h:1", "REDIS_SOCKET_TYPE": "tcp", "LOCAL_CACHE_SIZE_IN_BYTES": "1048576"}, nil)
	require.NoError(t, err)
	assert.Equal(t, "unix:/run/rl.sock", c.grpcAddr)
	assert.True(t, c.countOnlyAdmitted)
	assert.Equal(t, 1048576/128, c.refusalCache)
	c, err = resolve(nil, map[string]string{"REDIS_URL": "h:1", "REDIS_SOCKET_TYPE": "tcp", "LOCAL_CACHE_SIZE_IN_BYTES": "1000"}, nil)
	require.NoError(t, err)
	assert.Equal(t, 4096, c.refusalCache, "the reference's least: freecache's 512 KiB")
	c, err = resolve(map[string]bool{"refusal-cache": true}, map[string]string{"REDIS_URL": "h:1", "REDIS_SOCKET_TYPE": "tcp",
		"LOCAL_CACHE_SIZE_IN_BYTES": "1048576"}, func(c *rlsConfig) { c.refusalCache = 7 })
	require.NoError(t, err)
	assert.Equal(t, 7, c.refusalCache, "the flag wins")

	// REDIS_TIMEOUT is the store timeout, unless --store-timeout is given;
	// unset, the default stays.
	c, err = resolve(nil, map[string]string{"REDIS_TIMEOUT": "750ms"}, nil)
	require.NoError(t, err)
	assert.Equal(t, 750*time.Millisecond, c.storeTimeout)
	c, err = resolve(map[string]bool{"store-timeout": true}, map[string]string{"REDIS_TIMEOUT": "750ms"}, func(c *rlsConfig) { c.storeTimeout = time.Second })
	require.NoError(t, err)
	assert.Equal(t, time.Second, c.storeTimeout, "the flag wins")
	c, err = resolve(nil, nil, nil)
	require.NoError(t, err)
	assert.Equal(t, flagDefaults().storeTimeout, c.storeTimeout)

	for _, tc := range []struct {
		given map[string]bool
		env   map[string]string
		want  string
	}{
		{nil, map[string]string{"CONFIG_TYPE": "GRPC_XDS_DELTA"}, `CONFIG_TYPE="GRPC_XDS_DELTA": want FILE or GRPC_XDS_SOTW`},
		{map[string]bool{"config": true, "xds": true}, nil, "--config and --xds"},
		{map[string]bool{"force-start": true}, nil, "--force-start applies with --xds"},
		{map[string]bool{"check": true}, map[string]string{"CONFIG_TYPE": "GRPC_XDS_SOTW"}, "--check validates configuration files"},
		{nil, map[string]string{"CONFIG_TYPE": "GRPC_XDS_SOTW", "CONFIG_GRPC_XDS_CLIENT_TLS_CERT": "/c"}, "CONFIG_GRPC_XDS_SERVER_USE_TLS is not true"},
		{nil, map[string]string{"CONFIG_TYPE": "GRPC_XDS_SOTW", "CONFIG_GRPC_XDS_CLIENT_ADDITIONAL_HEADERS": "novalue"}, "CONFIG_GRPC_XDS_CLIENT_ADDITIONAL_HEADERS"},
		{nil, map[string]string{"CONFIG_TYPE": "GRPC_XDS_SOTW", "XDS_CLIENT_BACKOFF_MAX_INTERVAL": "1s"}, "max interval"},
		{nil, map[string]string{"CONFIG_TYPE": "GRPC_XDS_SOTW", "XDS_CLIENT_BACKOFF_INITIAL_INTERVAL": "soon"}, "XDS_CLIENT_BACKOFF_INITIAL_INTERVAL"},
		{nil, map[string]string{"GRPC_SERVER_TLS_CERT": "/c"}, "GRPC_SERVER_USE_TLS is not true"},
		{nil, map[string]string{"GRPC_SERVER_USE_TLS": "true"}, "needs a certificate and its key"},
		{nil, map[string]string{"GRPC_SERVER_USE_TLS": "true", "GRPC_SERVER_TLS_CERT": "/c", "GRPC_SERVER_TLS_KEY": "/k",
			"GRPC_CLIENT_TLS_SAN": "envoy"}, "needs --grpc-tls-client-ca"},
		{nil, map[string]string{"GRPC_MAX_CONNECTION_AGE": "-1s"}, "GRPC_MAX_CONNECTION_AGE"},
		{nil, map[string]string{"REDIS_URL": "h:1", "REDIS_SOCKET_TYPE": "tcp", "REDIS_TLS_CLIENT_CERT": "/c"}, "REDIS_TLS is not true"},
		{nil, map[string]string{"REDIS_URL": "redis://h:1", "REDIS_TLS_CACERT": "/c"}, "does not ask for TLS"},
		{nil, map[string]string{"REDIS_URL": "h:1", "REDIS_SOCKET_TYPE": "tcp", "REDIS_TLS": "true", "REDIS_TLS_CACERT": "/nonexistent"}, "/nonexistent"},
		{nil, map[string]string{"LOCAL_CACHE_SIZE_IN_BYTES": "1048576"}, "LOCAL_CACHE_SIZE_IN_BYTES applies to Redis"},
		{nil, map[string]string{"REDIS_URL": "h:1", "REDIS_SOCKET_TYPE": "tcp", "LOCAL_CACHE_SIZE_IN_BYTES": "-1"}, "LOCAL_CACHE_SIZE_IN_BYTES=-1"},
		{nil, map[string]string{"STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT": "sometimes"}, "STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT"},
		{nil, map[string]string{"REDIS_TIMEOUT": "0s"}, `REDIS_TIMEOUT=0s: want a positive duration`},
		{nil, map[string]string{"REDIS_TIMEOUT": "soon"}, `REDIS_TIMEOUT="soon"`},
		{map[string]bool{"store-timeout": true}, nil, "--store-timeout 0s: want a positive duration"},
	} {
		_, err := resolve(tc.given, tc.env, func(c *rlsConfig) {
			c.check = tc.given["check"]
			if tc.given["store-timeout"] {
				c.storeTimeout = 0
			}
		})
		assert.ErrorContains(t, err, tc.want, "%v %v", tc.given, tc.env)
	}
}

// TestRLSUnixSocketHint: REDIS_URL=host:port without REDIS_SOCKET_TYPE is
// dialled as a Unix socket path, as the reference does; every message that
// names the Redis says so and names the variable that changes it.
func TestRLSUnixSocketHint(t *testing.T) {
	t.Parallel()
	const hint = " (dialled as a Unix socket path: REDIS_SOCKET_TYPE is unset, and the reference's default is unix; set REDIS_SOCKET_TYPE=tcp for host:port)"
	for _, c := range []struct {
		env  map[string]string
		want string
	}{
		{map[string]string{"REDIS_URL": "127.0.0.1:6379"}, "127.0.0.1:6379" + hint},
		{map[string]string{"REDIS_URL": "redis:6379"}, "redis:6379" + hint},
		{map[string]string{"REDIS_URL": "127.0.0.1:6379", "REDIS_SOCKET_TYPE": "unix"}, "127.0.0.1:6379"},
		{map[string]string{"REDIS_URL": "127.0.0.1:6379", "REDIS_SOCKET_TYPE": "tcp"}, "127.0.0.1:6379"},
		{map[string]string{"REDIS_URL": "/var/run/redis.sock"}, "/var/run/redis.sock"},
	} {
		cfg := flagDefaults()
		err := cfg.resolve(map[string]bool{}, "", func(k string) (string, bool) { v, ok := c.env[k]; return v, ok })
		require.NoError(t, err, "%v", c.env)
		assert.Equal(t, c.want, cfg.redisWhere, "%v", c.env)
	}
}

// TestRLSAdditionsFromEnv: a setting the reference does not have is read
// from RLS_ and its flag's name when the flag is not given, so that a
// container run without arguments (Envoy Gateway's) can set it; a bad value
// names its variable. Every flag is an addition with its variable in
// docs/rls.md's tables, or has one of the reference's there, or is --check.
func TestRLSAdditionsFromEnv(t *testing.T) {
	t.Parallel()
	settle := func(args []string, env map[string]string) (*rlsConfig, error) {
		c := &rlsConfig{}
		var rf redisflag.Flags
		fs := flag.NewFlagSet("rls", flag.ContinueOnError)
		c.register(fs, &rf)
		require.NoError(t, fs.Parse(args))
		return c, c.settle(fs, &rf, func(k string) (string, bool) { v, ok := env[k]; return v, ok })
	}
	c, err := settle(nil, map[string]string{"RLS_MAX_KEYS": "1000", "RLS_IETF_HEADERS": "true", "RLS_DRAIN": "2s",
		"RLS_MAX_DESCRIPTOR_BYTES": "2KiB", "RLS_MAX_CONNS_PER_CLIENT": "0", "RLS_RELOAD_INTERVAL": ""})
	require.NoError(t, err)
	assert.Equal(t, 1000, c.maxKeys)
	assert.True(t, c.ietfHeaders)
	assert.Equal(t, 2*time.Second, c.drain)
	assert.Equal(t, int64(2048), c.maxDescriptorBytes)
	assert.Equal(t, 0, c.conns.MaxConnsPerClient)
	assert.Equal(t, time.Second, c.reloadInterval, "empty is unset")
	c, err = settle([]string{"--max-keys", "7"}, map[string]string{"RLS_MAX_KEYS": "1000"})
	require.NoError(t, err)
	assert.Equal(t, 7, c.maxKeys, "the flag wins")
	for env, want := range map[string]string{
		"RLS_MAX_KEYS=many":  `RLS_MAX_KEYS="many": `,
		"RLS_MAX_KEYS=0":     "--max-keys 0: want at least 1 (from RLS_MAX_KEYS)",
		"RLS_IDLE_TIMEOUT=0": "--idle-timeout 0s: want a positive duration (from RLS_IDLE_TIMEOUT)",
		"RLS_DRAIN=-1s":      "--drain -1s: want 0 (none) or a positive duration (from RLS_DRAIN)",
	} {
		k, v, _ := strings.Cut(env, "=")
		_, err := settle(nil, map[string]string{k: v})
		assert.ErrorContains(t, err, want, env)
	}

	md, err := os.ReadFile("../../../docs/rls.md")
	require.NoError(t, err)
	documented := map[string]string{} // flag: its row's variable cell
	inVars := false                   // in a table whose header is | flag | ...variable... |
	for _, line := range strings.Split(string(md), "\n") {
		cells := strings.Split(line, "|")
		switch {
		case !strings.HasPrefix(line, "|"):
			inVars = false
		case len(cells) >= 4 && strings.TrimSpace(cells[1]) == "flag":
			inVars = strings.Contains(cells[2], "variable")
		}
		if !inVars || len(cells) < 4 || !strings.HasPrefix(strings.TrimSpace(cells[1]), "`--") {
			continue
		}
		for _, m := range regexp.MustCompile("`--([a-z-]+)").FindAllStringSubmatch(cells[1], -1) {
			documented[m[1]] = strings.TrimSpace(cells[2])
		}
	}
	additions := map[string]bool{}
	for _, name := range additionFlags {
		additions[name] = true
	}
	fs := flag.NewFlagSet("rls", flag.ContinueOnError)
	flagDefaults().register(fs, new(redisflag.Flags))
	fs.VisitAll(func(f *flag.Flag) {
		cell, ok := documented[f.Name]
		switch {
		case !ok:
			t.Errorf("--%s is in no table of docs/rls.md", f.Name)
		case additions[f.Name]:
			assert.Contains(t, cell, "`"+additionVar(f.Name)+"`", "--%s's variable in docs/rls.md", f.Name)
		case f.Name == "check":
			assert.Empty(t, cell)
		default:
			assert.NotEmpty(t, cell, "--%s: a setting with no variable of the reference's is an addition", f.Name)
		}
	})
}

// TestRLSRedisEnvAsTheReference: REDIS_TYPE=cluster dials TCP without
// REDIS_SOCKET_TYPE (the reference's cluster client ignores it; ours
// refused to start), and REDIS_SENTINEL_AUTH reaches the sentinels (ours
// ignored it, and the sentinels answered NOAUTH).
func TestRLSRedisEnvAsTheReference(t *testing.T) {
	t.Parallel()
	lookup := func(env map[string]string) func(string) (string, bool) {
		return func(k string) (string, bool) { v, ok := env[k]; return v, ok }
	}
	env := map[string]string{"REDIS_TYPE": "cluster", "REDIS_URL": "10.0.0.1:6379,10.0.0.2:6379"}
	_, _, _, err := redisFromEnv(env["REDIS_URL"], redisflag.TLS{}, map[string]bool{}, lookup(env))
	require.NoError(t, err, "cluster without REDIS_SOCKET_TYPE")

	sentinel := redistest.Start(t)
	sentinel.CLI("CONFIG", "SET", "requirepass", "sentinel-secret")
	env = map[string]string{"REDIS_TYPE": "sentinel", "REDIS_SOCKET_TYPE": "tcp", "REDIS_URL": "mymaster," + sentinel.Addr(), "REDIS_SENTINEL_AUTH": "sentinel-secret"}
	newClient, _, _, err := redisFromEnv(env["REDIS_URL"], redisflag.TLS{}, map[string]bool{}, lookup(env))
	require.NoError(t, err)
	c := newClient()
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	// A redis-server is no sentinel: it refuses SENTINEL, but only after
	// the password: NOAUTH here would say the password was never sent.
	err = c.Ping(ctx).Err()
	require.Error(t, err)
	assert.NotContains(t, err.Error(), "NOAUTH")
	assert.NotContains(t, err.Error(), "WRONGPASS")
}
