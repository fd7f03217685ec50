package rlqs

// The tests of `ratelimit rlqs` drive the built binary (clitest.Binary) as
// Envoys would: each client is internal/rlqstest's Envoy, which behaves as
// Envoy's rate_limit_quota filter, over real gRPC. They run on the real
// clock: they wait for conditions they can observe (an assignment, a
// line on standard error, a counter on /metrics), polled with a deadline,
// and measure what the Envoys admit over windows of measured time.
// The scenarios measured over seconds run in parallel, at their everyday
// sizes unless RATELIMIT_LONG_TESTS is set (internal/testlong).

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"log"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	rlqsv3 "github.com/envoyproxy/go-control-plane/envoy/service/rate_limit_quota/v3"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"

	"github.com/smoothrate/ratelimit/internal/cli/clitest"
	"github.com/smoothrate/ratelimit/internal/cli/command"
	"github.com/smoothrate/ratelimit/internal/cli/metrics/metricstest"
	"github.com/smoothrate/ratelimit/internal/rlqstest"
	"github.com/smoothrate/ratelimit/internal/testlong"
	librlqs "github.com/smoothrate/ratelimit/rlqs"
)

func TestMain(m *testing.M) { clitest.Main(m) }

// waitLimit bounds every wait for a condition: generous, since the
// machine may be busy; a passing test waits only as long as the condition
// takes.
const waitLimit = 20 * time.Second

// proc is a running `ratelimit rlqs`.
type proc struct {
	*clitest.Proc
	t          *testing.T
	grpcAddr   string
	httpURL    string
	metricsURL string // http://host:port/metrics
}

var banner = regexp.MustCompile(`gRPC on ([^,]+), HTTP on (http://[^,;]+)(?:, metrics on (http://[^;]+))?;`)

// startRLQS starts the binary on free loopback ports with args (after
// --grpc, --http, --metrics and a short --reload-interval, which args may
// override), and waits for its banner.
func startRLQS(t *testing.T, args ...string) *proc {
	t.Helper()
	full := append([]string{"rlqs", "--grpc", "127.0.0.1:0", "--http", "127.0.0.1:0",
		"--metrics", "127.0.0.1:0", "--reload-interval", "50ms", "--drain", "0"}, args...) // TestRLQSDrain sets its own
	p := &proc{Proc: clitest.Start(t, clitest.Binary(t), nil, waitLimit, full...), t: t}
	m := banner.FindStringSubmatch(p.Banner)
	require.NotNil(t, m, "banner %q", p.Banner)
	p.grpcAddr, p.httpURL, p.metricsURL = m[1], m[2], m[3]
	return p
}

// metric reads a series from /metrics: name is a family, whose series
// are summed, or one series, `family{label="value"}`; -1 when the page
// does not answer.
func (p *proc) metric(name string) float64 {
	page, _, err := metricstest.Scrape(p.metricsURL)
	if err != nil {
		return -1
	}
	return page.Value(name)
}

// stop sends SIGTERM and returns the exit status.
func (p *proc) stop() int {
	p.t.Helper()
	p.Signal(p.t, syscall.SIGTERM)
	return p.Wait(p.t, waitLimit)
}

// envoys are the simulated Envoys of a test and the requests they send.
type envoys struct {
	t   *testing.T
	wg  sync.WaitGroup
	all []*rlqstest.Envoy
}

func newEnvoys(t *testing.T) *envoys {
	f := &envoys{t: t}
	t.Cleanup(func() {
		for _, e := range f.all {
			e.Close() // ends its Drive
		}
		f.wg.Wait()
	})
	return f
}

// add makes an Envoy of the domain "edge" with cfg on the server at addr.
func (f *envoys) add(addr string, cfg rlqstest.Config) *rlqstest.Envoy {
	f.t.Helper()
	if cfg.Domain == "" {
		cfg.Domain = "edge"
	}
	conn, err := rlqstest.Dial(addr)
	require.NoError(f.t, err)
	f.t.Cleanup(func() { conn.Close() })
	e := rlqstest.New(conn, cfg)
	f.all = append(f.all, e)
	return e
}

// drive makes e send rate requests a second into id until e is closed.
func (f *envoys) drive(e *rlqstest.Envoy, id map[string]string, rate float64) {
	f.wg.Go(func() { e.Drive(context.Background(), id, rate) })
}

// eventually polls cond until it holds, at most limit, and returns how
// long that took; the test fails (with what's description) if it never
// does.
func eventually(t *testing.T, limit time.Duration, what func() string, cond func() bool) time.Duration {
	t.Helper()
	start := time.Now()
	for !cond() {
		if time.Since(start) > limit {
			t.Fatalf("not within %v: %s", limit, what())
		}
		time.Sleep(20 * time.Millisecond) // a poll, bounded above
	}
	return time.Since(start)
}

// rates returns what each Envoy runs for id now: its token bucket's rate
// per second, or -1 without an assignment from the server.
func rates(es []*rlqstest.Envoy, id map[string]string) []float64 {
	out := make([]float64, len(es))
	for i, e := range es {
		st := e.State(id)
		out[i] = st.Rate
		if !st.Assigned {
			out[i] = -1
		}
	}
	return out
}

// runningNear reports whether every Envoy runs an assignment of id whose
// rate is within [lo·want, hi·want] of its want.
func runningNear(es []*rlqstest.Envoy, id map[string]string, want []float64, lo, hi float64) bool {
	for i, r := range rates(es, id) {
		if r < want[i]*lo || r > want[i]*hi {
			return false
		}
	}
	return true
}

// window is what Envoys admitted of one bucket over a window of measured
// time.
type window struct {
	secs float64
	// allowed is what each admitted; capacity the max_tokens of the
	// token bucket it ran at the window's start and of every one it
	// applied during it: what it could admit beyond its rate (each new
	// token bucket starts full).
	allowed, capacity []float64
}

// measure measures what each Envoy admits of id over d (the requests go
// on meanwhile).
func measure(es []*rlqstest.Envoy, id map[string]string, d time.Duration) window {
	w := window{allowed: make([]float64, len(es)), capacity: make([]float64, len(es))}
	before := make([]rlqstest.Totals, len(es))
	for i, e := range es {
		before[i] = e.Totals(id)
		w.capacity[i] = float64(e.State(id).Strategy.GetTokenBucket().GetMaxTokens())
	}
	start := time.Now()
	time.Sleep(d)
	w.secs = time.Since(start).Seconds()
	for i, e := range es {
		after := e.Totals(id)
		w.allowed[i] = float64(after.Allowed - before[i].Allowed)
		w.capacity[i] += float64(after.Capacity - before[i].Capacity)
	}
	return w
}

// fleet is the window of all the Envoys together, as one.
func (w window) fleet() window {
	return window{secs: w.secs, allowed: []float64{sum(w.allowed)}, capacity: []float64{sum(w.capacity)}}
}

// strict is w with no allowance for the token buckets' capacities.
func (w window) strict() window {
	w.capacity = make([]float64, len(w.allowed))
	return w
}

// stalledTol is how far below its rate an Envoy may admit in the everyday
// runs. The Envoys are goroutines of the test process, which a machine
// busy with the whole suite stalls for tenths of a second: requests come
// late, in bunches that a token bucket holding a quarter second of its
// rate turns away, and a bucket left full meanwhile loses its refill. What
// the server assigned is checked apart (runningNear), and the upper bound,
// what the assignments allow, stays tight; the long runs hold both sides
// to the same tolerance.
const stalledTol = 0.3

// within checks that each Envoy admitted its want per second over the
// window: at most want·T·(1 + tol) plus the capacity of its token buckets
// (the bound: rate × time + capacities), and at least want·T·(1 − tol),
// or want·T·(1 − stalledTol) in the everyday runs.
func within(t *testing.T, what string, w window, want []float64, tol float64) {
	t.Helper()
	below := tol
	if !testlong.Enabled() {
		below = max(tol, stalledTol)
	}
	rates := make([]float64, len(w.allowed))
	for i := range w.allowed {
		rates[i] = w.allowed[i] / w.secs
	}
	for i := range w.allowed {
		lo, hi := want[i]*w.secs*(1-below), want[i]*w.secs*(1+tol)+w.capacity[i]
		if w.allowed[i] < lo || w.allowed[i] > hi {
			t.Errorf("%s: Envoy %d admitted %.0f in %.2f s (%.2f/s), want %.0f to %.0f (%.2f/s −%.0f%% +%.0f%%, plus %.0f of capacity); all: %.2f/s",
				what, i, w.allowed[i], w.secs, rates[i], lo, hi, want[i], below*100, tol*100, w.capacity[i], rates)
			return
		}
	}
	t.Logf("%s: %.2f/s (want %.2f −%.0f%% +%.0f%%, plus capacities %.0f over %.2f s)", what, rates, want, below*100, tol*100, w.capacity, w.secs)
}

func sum(xs []float64) float64 {
	s := 0.0
	for _, x := range xs {
		s += x
	}
	return s
}

func writeFile(t *testing.T, path, content string) {
	t.Helper()
	require.NoError(t, os.WriteFile(path, []byte(content), 0o644))
}

// limitConfig is a file of one bucket, {route: api}, of n a second.
func limitConfig(n int) string {
	return fmt.Sprintf("domain: edge\nbuckets:\n  - bucket_id: {route: api}\n    requests_per_unit: %d\n    unit: second\n", n)
}

var api = map[string]string{"route": "api"}

// writeConfig writes limitConfig(n) into a new directory and returns its
// path.
func writeConfig(t *testing.T, n int) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "rlqs.yaml")
	writeFile(t, path, limitConfig(n))
	return path
}

// TestRLQSCheck: --check exits 0 for a valid file, and 2 with one line
// naming the file and the problem for an invalid one, a missing one and
// one that is not a regular file.
func TestRLQSCheck(t *testing.T) {
	good := writeConfig(t, 100)
	var stdout, stderr bytes.Buffer
	assert.Equal(t, command.ExitOK, Run([]string{"--config", good, "--check"}, nil, &stdout, &stderr), stderr.String())
	assert.Equal(t, "ratelimit rlqs: "+good+" is valid: domain edge, 1 bucket entry, others allow_all\n", stdout.String())

	bad := filepath.Join(t.TempDir(), "bad.yaml")
	writeFile(t, bad, "domain: edge\nbuckets:\n  - bucket_id: {route: api}\n    requests_per_unit: 1\n    unit: fortnight\n")
	for _, tc := range []struct{ path, want string }{
		{bad, "unit 'fortnight' is not second, minute, hour or day"},
		{filepath.Join(t.TempDir(), "missing.yaml"), "no such file or directory"},
		{t.TempDir(), "a directory, not a file"},
	} {
		stdout.Reset()
		stderr.Reset()
		assert.Equal(t, command.ExitUsage, Run([]string{"--config", tc.path, "--check"}, nil, &stdout, &stderr), tc.path)
		line := stderr.String()
		assert.Equal(t, 1, strings.Count(line, "\n"), "one line: %q", line)
		assert.True(t, strings.HasPrefix(line, "ratelimit rlqs: "+tc.path+": "), "%q", line)
		assert.Contains(t, line, tc.want)
		assert.Empty(t, stdout.String())
	}

	// The binary's exit statuses are the same.
	bin := clitest.Binary(t)
	_, _, code := clitest.Run(t, bin, "", "rlqs", "--config", good, "--check")
	assert.Equal(t, command.ExitOK, code)
	_, errOut, code := clitest.Run(t, bin, "", "rlqs", "--config", bad, "--check")
	assert.Equal(t, command.ExitUsage, code, errOut)
}

// TestRLQSFlagErrors: bad flags are one line and exit status 2, before
// anything is served.
func TestRLQSFlagErrors(t *testing.T) {
	cfg := writeConfig(t, 100)
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{}, "--config needs a FILE"},
		{[]string{"--config", cfg, "--grpc", "nope"}, `--grpc "nope": want host:port`},
		{[]string{"--config", cfg, "--metrics", "9090"}, `--metrics "9090": want host:port`},
		{[]string{"--config", cfg, "--reload-interval", "0s"}, "--reload-interval 0s"},
		{[]string{"--config", cfg, "--settle-time", "-1s"}, "--settle-time -1s: want a positive duration"},
		{[]string{"--config", cfg, "--max-buckets-per-stream", "0"}, "--max-buckets-per-stream 0: want 1 or more"},
		{[]string{"--config", cfg, "--allocation-interval", "2m"}, "--allocation-interval 2m0s: want a positive duration of at most a minute"},
		{[]string{"--config", cfg, "--store-timeout", "1s"}, "--store-timeout applies to replicas sharing a Redis"},
		{[]string{"--config", cfg, "--server-id", "a"}, "--server-id applies to replicas sharing a Redis"},
		{[]string{"--config", cfg, "--redis-password-file", "/x"}, "only applies with --redis"},
		{[]string{"--config", cfg, "--redis", "http://x"}, `--redis "http://x"`},
		{[]string{"--config", cfg, "--redis", "redis://:hunter2@127.0.0.1:1/x"}, `--redis "redis://:xxxxx@127.0.0.1:1/x"`},
		{[]string{"--config", cfg, "extra"}, `unexpected argument "extra"`},
		{[]string{"--config", cfg, "--no-such-flag"}, "flag provided but not defined"},
	} {
		var stdout, stderr bytes.Buffer
		code := Run(tc.args, nil, &stdout, &stderr)
		assert.Equal(t, command.ExitUsage, code, "%q", tc.args)
		assert.Equal(t, 1, strings.Count(stderr.String(), "\n"), "%q: %q", tc.args, stderr.String())
		assert.Contains(t, stderr.String(), tc.want, "%q", tc.args)
		assert.NotContains(t, stderr.String(), "hunter2")
	}
}

// TestRLQSServeErrors: a --server-id the library refuses and an invalid
// file are exit status 2; an address taken is 1.
func TestRLQSServeErrors(t *testing.T) {
	bin := clitest.Binary(t)
	cfg := writeConfig(t, 100)
	bad := filepath.Join(t.TempDir(), "bad.yaml")
	writeFile(t, bad, "domain: edge\nbuckets: 3\n")
	p := startRLQS(t, "--config", cfg)
	for _, tc := range []struct {
		args []string
		code int
		want string
	}{
		{[]string{"--config", bad}, command.ExitUsage, "buckets must be a list"},
		{[]string{"--config", cfg, "--redis", "redis://127.0.0.1:1/0", "--server-id", "a b"}, command.ExitUsage, "server id"},
		{[]string{"--config", cfg, "--grpc", p.grpcAddr}, command.ExitFail, "--grpc: listen tcp " + p.grpcAddr},
	} {
		stderr, code := clitest.RunToExit(t, bin, nil, waitLimit, append([]string{"rlqs", "--http", "127.0.0.1:0", "--grpc", "127.0.0.1:0"}, tc.args...)...)
		assert.Equal(t, tc.code, code, "%q: %s", tc.args, stderr)
		assert.Contains(t, stderr, tc.want, "%q", tc.args)
	}
}

// TestRLQSHealthAndMetrics: /healthcheck answers OK and the gRPC health
// service SERVING; /metrics has the server's counters (an Envoy's stream,
// its reports and assignment; a stream of an unknown domain refused) and
// Go's runtime and process collectors.
func TestRLQSHealthAndMetrics(t *testing.T) {
	p := startRLQS(t, "--config", writeConfig(t, 100))
	resp, err := http.Get(p.httpURL + "/healthcheck")
	require.NoError(t, err)
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	assert.Equal(t, http.StatusOK, resp.StatusCode)
	assert.Equal(t, "OK", string(b))

	conn, err := rlqstest.Dial(p.grpcAddr)
	require.NoError(t, err)
	defer conn.Close()
	hc, err := healthpb.NewHealthClient(conn).Check(t.Context(),
		&healthpb.HealthCheckRequest{Service: rlqsv3.RateLimitQuotaService_ServiceDesc.ServiceName})
	require.NoError(t, err)
	assert.Equal(t, healthpb.HealthCheckResponse_SERVING, hc.Status)

	f := newEnvoys(t)
	e := f.add(p.grpcAddr, rlqstest.Config{})
	e.Request(api)
	eventually(t, waitLimit, func() string { return fmt.Sprintf("%+v", e.State(api)) }, func() bool { return e.State(api).Assigned })
	other := f.add(p.grpcAddr, rlqstest.Config{Domain: "elsewhere"})
	other.Request(api)
	eventually(t, waitLimit, func() string { return p.Stderr.String() }, func() bool {
		return p.metric(`ratelimit_rlqs_streams_refused_total{reason="unknown_domain"}`) >= 1
	})
	assert.Equal(t, 1.0, p.metric("ratelimit_rlqs_streams"))
	assert.Equal(t, 1.0, p.metric("ratelimit_rlqs_buckets"))
	assert.Equal(t, 1.0, p.metric("ratelimit_rlqs_subscriptions"))
	assert.GreaterOrEqual(t, p.metric("ratelimit_rlqs_report_messages_total"), 1.0)
	assert.GreaterOrEqual(t, p.metric(`ratelimit_rlqs_bucket_reports_total{result="accepted"}`), 1.0)
	assert.Equal(t, 0.0, p.metric(`ratelimit_rlqs_bucket_reports_total{result="refused"}`))
	assert.GreaterOrEqual(t, p.metric(`ratelimit_rlqs_actions_total{action="assignment"}`), 1.0)
	assert.Equal(t, 1.0, p.metric(`ratelimit_rlqs_config_loads_total{result="success"}`))
	assert.Equal(t, 0.0, p.metric(`ratelimit_rlqs_config_loads_total{result="error"}`))
	assert.Equal(t, 0.0, p.metric("ratelimit_rlqs_store_calls_total"), "alone: no store")
	assert.Greater(t, p.metric("go_goroutines"), 0.0)
	assert.Greater(t, p.metric("process_start_time_seconds"), 0.0)
	assert.Equal(t, command.ExitOK, p.stop(), p.Stderr.String())
}

// TestRLQSReload: a good change is loaded (the Envoy's share follows the
// new limit), a bad one keeps the previous configuration, says why and is
// counted; a file being written is loaded only once it reads the same at
// two looks.
func TestRLQSReload(t *testing.T) {
	t.Parallel()
	path := writeConfig(t, 50)
	p := startRLQS(t, "--config", path)
	f := newEnvoys(t)
	e := f.add(p.grpcAddr, rlqstest.Config{})
	f.drive(e, api, 100)
	follow := func(want float64) {
		t.Helper()
		took := eventually(t, waitLimit, func() string {
			return fmt.Sprintf("rate %.2f, want %.2f; stderr: %s", rates(f.all, api), want, p.Stderr.String())
		},
			func() bool { return runningNear(f.all, api, []float64{want}, 0.97, 1.03) })
		t.Logf("running %.2f/s after %v", want, took)
	}
	follow(49.5) // 99 % of the limit, alone

	writeFile(t, path, limitConfig(20))
	follow(19.8)
	p.WaitStderr(t, "configuration reloaded: domain edge, 1 bucket entry", waitLimit)
	assert.Equal(t, 2.0, p.metric(`ratelimit_rlqs_config_loads_total{result="success"}`))

	writeFile(t, path, "domain: edge\nbuckets:\n  - bucket_id: {route: api}\n    requests_per_unit: 5\n    unit: fortnight\n")
	eventually(t, waitLimit, p.Stderr.String, func() bool {
		return p.metric(`ratelimit_rlqs_config_loads_total{result="error"}`) == 1
	})
	p.WaitStderr(t, "the configuration does not load, keeping the previous one: "+path+": buckets[1]: unit 'fortnight'", waitLimit)
	assert.True(t, runningNear(f.all, api, []float64{19.8}, 0.97, 1.03), "kept: %.2f", rates(f.all, api))
	assert.Equal(t, 2.0, p.metric(`ratelimit_rlqs_config_loads_total{result="success"}`))
	writeFile(t, path, limitConfig(30))
	follow(29.7)
}

// TestRLQSReloadSIGHUP: with looks too rare to notice, SIGHUP loads the
// file at once.
func TestRLQSReloadSIGHUP(t *testing.T) {
	path := writeConfig(t, 50)
	p := startRLQS(t, "--config", path, "--reload-interval", "1h")
	writeFile(t, path, limitConfig(7))
	p.Signal(t, syscall.SIGHUP)
	eventually(t, waitLimit, p.Stderr.String, func() bool {
		return p.metric(`ratelimit_rlqs_config_loads_total{result="success"}`) == 2
	})
	p.WaitStderr(t, "configuration reloaded", waitLimit)
	f := newEnvoys(t)
	e := f.add(p.grpcAddr, rlqstest.Config{})
	e.Request(api)
	eventually(t, waitLimit, func() string { return fmt.Sprintf("%+v", e.State(api)) },
		func() bool { return runningNear(f.all, api, []float64{6.93}, 0.97, 1.03) })
}

// TestConfigWatcherSettles: a change is loaded at the second look that
// reads it the same, not at the first (a file being written); one changed
// again between two looks waits again; SIGHUP (force) loads at once; a
// file that does not load is reported once, counted, and kept out.
func TestConfigWatcherSettles(t *testing.T) {
	path := writeConfig(t, 10)
	cfg, err := readConfig(path).parse(path)
	require.NoError(t, err)
	srv, err := librlqs.New(cfg, nil)
	require.NoError(t, err)
	t.Cleanup(func() { srv.Shutdown(context.Background()) })
	var logs clitest.LockedBuffer
	var failed atomic.Uint64
	w := newConfigWatcher(path, srv, readConfig(path), log.New(&logs, "", 0), &failed)
	loads := func() uint64 { return srv.Stats().ConfigLoads }

	writeFile(t, path, limitConfig(20)+"  - bucket_id: {route: b}\n    requests_per_unit: 1\n    unit: second\n")
	w.look(false)
	assert.Equal(t, uint64(1), loads(), "loaded at its first look")
	writeFile(t, path, limitConfig(30))
	w.look(false)
	assert.Equal(t, uint64(1), loads(), "changed again: waits another look")
	w.look(false)
	assert.Equal(t, uint64(2), loads(), "read the same twice: loaded")
	assert.Equal(t, 1, srv.Config().Buckets(), "the file as it reads now")
	w.look(false)
	assert.Equal(t, uint64(2), loads(), "unchanged: not loaded again")

	writeFile(t, path, "domain: edge\nbuckets: 3\n")
	w.look(true)
	assert.Equal(t, uint64(1), failed.Load(), "forced: tried at once, failed")
	w.look(false)
	w.look(false)
	assert.Equal(t, uint64(1), failed.Load(), "reported once")
	assert.Equal(t, 1, strings.Count(logs.String(), "does not load"), logs.String())
	w.look(true)
	assert.Equal(t, uint64(2), failed.Load(), "SIGHUP tries again")
	assert.Equal(t, uint64(2), loads())
	assert.Equal(t, cfg.Domain(), srv.Config().Domain())
}

// TestRLQSMaxConcurrentStreams: one connection holds at most 1024 streams
// (an Envoy's streams each hold up to --max-buckets-per-stream buckets),
// or --grpc-max-concurrent-streams, and the server says so in its HTTP/2
// settings. The bound and the handshake's are serve.GRPCOptions
// (TestGRPCOptions).
func TestRLQSMaxConcurrentStreams(t *testing.T) {
	t.Parallel()
	cfg := writeConfig(t, 100)
	for _, c := range []struct {
		args []string
		want uint32
	}{{nil, 1024}, {[]string{"--grpc-max-concurrent-streams", "7"}, 7}} {
		p := startRLQS(t, append([]string{"--config", cfg}, c.args...)...)
		got, ok := clitest.MaxStreams(t, p.grpcAddr)
		assert.True(t, ok && got == c.want, "%v: SETTINGS_MAX_CONCURRENT_STREAMS %d (set: %v), want %d", c.args, got, ok, c.want)
	}
}
