package rls

import (
	"context"
	"fmt"
	"io"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"

	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/smoothrate/ratelimit/internal/cli/clitest"
	"github.com/smoothrate/ratelimit/internal/cli/command"
	"github.com/smoothrate/ratelimit/internal/cli/metrics"
	"github.com/smoothrate/ratelimit/internal/cli/metrics/metricstest"
	"github.com/smoothrate/ratelimit/rls"
)

// metricsConfig has a rule of each kind the stats name apart: one level,
// two levels, three (the default mapping folds the third), detailed,
// shadow, unlimited.
const metricsConfig = `domain: d
descriptors:
  - key: k1
    rate_limit: {unit: day, requests_per_unit: 5}
  - key: k2
    value: v
    descriptors:
      - key: k3
        rate_limit: {unit: day, requests_per_unit: 2}
  - key: a
    descriptors:
      - key: b
        descriptors:
          - key: c
            rate_limit: {unit: day, requests_per_unit: 1}
  - key: det
    detailed_metric: true
    rate_limit: {unit: day, requests_per_unit: 3}
  - key: sh
    shadow_mode: true
    rate_limit: {unit: day, requests_per_unit: 1}
  - key: host
    rate_limit: {unit: day, requests_per_unit: 100}
  - key: free
    rate_limit: {unlimited: true}
`

// metricsCalls makes the calls whose stats testdata/metrics holds, as
// envoyproxy/ratelimit (bench/envoyref's version, USE_PROMETHEUS=true)
// counted them for the same calls (27 gRPC calls).
func metricsCalls(t *testing.T, p *rlsProc) {
	t.Helper()
	ctx := t.Context()
	call := func(req *rlsv3.RateLimitRequest) {
		t.Helper()
		_, err := p.client.ShouldRateLimit(ctx, req)
		if req.Domain != "" {
			require.NoError(t, err)
		}
	}
	repeat := func(n int, domain string, entries ...string) {
		for range n {
			call(request(domain, entries...))
		}
	}
	repeat(7, "d", "k1=x")
	repeat(3, "d", "k2=v", "k3=y")
	repeat(2, "d", "a=1", "b=2", "c=3")
	repeat(4, "d", "det=p")
	repeat(1, "d", "det=q")
	repeat(2, "d", "sh=z")
	repeat(1, "d", "host=example.com")
	repeat(1, "d", "host=10.0.0.1")
	repeat(1, "d", "free=x")
	repeat(1, "nodomain", "k1=x")
	repeat(1, "", "k1=x") // a service error
	// A check without counting, then a limit override of 1 a day, twice.
	zero := request("d", "k1=x")
	zero.Descriptors[0].HitsAddend = wrapperspb.UInt64(0)
	call(zero)
	override := request("d", "k1=y")
	override.Descriptors[0].Limit = &ratelimitv3.RateLimitDescriptor_RateLimitOverride{RequestsPerUnit: 1, Unit: 4}
	call(override)
	call(override)
}

const metricsCallCount = 27

// scrape reads p's metrics page.
func (p *rlsProc) scrape(t *testing.T) (metricstest.Page, []byte) {
	t.Helper()
	page, body, err := metricstest.Scrape(p.metricsURL + p.metricsPath)
	require.NoError(t, err, "%s", body)
	return page, body
}

func readPage(t *testing.T, name string) metricstest.Page {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("testdata", "metrics", name))
	require.NoError(t, err)
	page, err := metricstest.Parse(b)
	require.NoError(t, err)
	return page
}

// TestRLSMetricsAsReference: started as the reference is (USE_PROMETHEUS,
// PROMETHEUS_ADDR, no flag), the page has, for the same calls, every
// ratelimit_service_rate_limit_* series of the reference's with its value
// and type, and no other; its service series (errors, requests, response
// times, configurations loaded), ours, and Go's and the process's.
func TestRLSMetricsAsReference(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	writeFile(t, filepath.Join(dir, "d.yaml"), metricsConfig)
	p := launchRLS(t, []string{"USE_PROMETHEUS=true", "PROMETHEUS_ADDR=127.0.0.1:0"},
		[]string{"rls", "--config", dir, "--grpc", "127.0.0.1:0", "--http", "127.0.0.1:0"})
	require.Equal(t, "/metrics", p.metricsPath)
	metricsCalls(t, p)
	page, body := p.scrape(t)

	want := readPage(t, "default.txt")
	assert.Empty(t, metricstest.Diff(want, page, "ratelimit_service_rate_limit_"), "%s", body)

	service := page.Series("ratelimit_service_")
	for series, v := range map[string]float64{
		`ratelimit_service_should_rate_limit_error{err_type="service_error"}`:                   1,
		`ratelimit_service_total_requests{grpc_method="ShouldRateLimit"}`:                       metricsCallCount,
		`ratelimit_service_response_time_seconds_count{grpc_method="ShouldRateLimit"}`:          metricsCallCount,
		`ratelimit_service_response_time_seconds_bucket{grpc_method="ShouldRateLimit",le="10"}`: metricsCallCount,
		"ratelimit_service_config_load_success":                                                 1,
		"ratelimit_service_calls_in_flight":                                                     0,
		"ratelimit_service_store_misconfigured":                                                 0,
		"ratelimit_service_connections_refused":                                                 0,
	} {
		got, ok := service[series]
		assert.True(t, ok && got == v, "%s = %v (present %v), want %v", series, got, ok, v)
	}
	for name, typ := range map[string]string{
		"ratelimit_service_should_rate_limit_error": "counter",
		"ratelimit_service_total_requests":          "counter",
		"ratelimit_service_response_time_seconds":   "histogram",
		"ratelimit_service_config_load_success":     "counter",
		"ratelimit_service_calls_in_flight":         "gauge",
		"ratelimit_service_store_misconfigured":     "counter",
		"ratelimit_service_connections_refused":     "counter",
		"go_goroutines":                             "gauge",
		"go_memstats_alloc_bytes":                   "gauge",
		"go_gc_duration_seconds":                    "summary",
		"process_resident_memory_bytes":             "gauge",
		"process_cpu_seconds_total":                 "counter",
	} {
		assert.Equal(t, typ, page.Type(name), "%s", name)
	}
	// The reference's histogram buckets: Prometheus's defaults.
	var les []string
	for series := range page.Series("ratelimit_service_response_time_seconds") {
		if _, le, ok := strings.Cut(series, `le="`); ok {
			les = append(les, strings.TrimSuffix(le, `"}`))
		}
	}
	assert.ElementsMatch(t, []string{"0.005", "0.01", "0.025", "0.05", "0.1", "0.25", "0.5", "1", "2.5", "5", "10", "+Inf"}, les)
	// A counter of the reference's appears with its first count.
	assert.Empty(t, page.Type("ratelimit_service_config_load_error"))
}

// TestRLSMetricsMapping: PROMETHEUS_MAPPER_YAML renames, relabels, drops
// and scales the series as the reference's mapper does with the same file
// (testdata/metrics/mapping.txt is the reference's page for it): stats no
// mapping matches keep their escaped names. PROMETHEUS_PATH moves the page.
func TestRLSMetricsMapping(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	writeFile(t, filepath.Join(dir, "d.yaml"), metricsConfig)
	mapping, err := filepath.Abs(filepath.Join("testdata", "metrics", "mapping.yaml"))
	require.NoError(t, err)
	p := launchRLS(t, []string{"USE_PROMETHEUS=true", "PROMETHEUS_ADDR=127.0.0.1:0", "PROMETHEUS_MAPPER_YAML=" + mapping,
		"PROMETHEUS_PATH=/stats/prometheus"},
		[]string{"rls", "--config", dir, "--grpc", "127.0.0.1:0", "--http", "127.0.0.1:0"})
	require.Equal(t, "/stats/prometheus", p.metricsPath)
	metricsCalls(t, p)
	page, body := p.scrape(t)
	want := readPage(t, "mapping.txt")
	// rl_time_ms times the calls: the reference observes whole milliseconds.
	for _, prefix := range []string{"ratelimit_service_rate_limit_", "rl_hits", "rl_over", "rl_loads", "dropped"} {
		assert.Empty(t, metricstest.Diff(want, page, prefix), "%s: %s", prefix, body)
	}
	assert.Equal(t, "Hits by rule.", page["rl_hits"].GetHelp(), "the mapping's help")
	assert.Equal(t, "summary", page.Type("rl_time_ms"), "the mapping's observer_type")
	assert.Equal(t, float64(metricsCallCount), page.Series("rl_time_ms")[`rl_time_ms_count{method="ShouldRateLimit"}`])
	assert.Empty(t, page.Type("ratelimit_service_response_time_seconds"))
}

// TestRLSMetricsMappingRefused: a mapping file that does not load stops
// the command at start (the reference ignores it and maps nothing).
func TestRLSMetricsMappingRefused(t *testing.T) {
	t.Parallel()
	bin := clitest.Binary(t)
	dir := t.TempDir()
	cfg := filepath.Join(dir, "d.yaml")
	writeFile(t, cfg, metricsConfig)
	bad := filepath.Join(dir, "bad.yaml")
	writeFile(t, bad, "mappings:\n  - match: \"a.*\"\n    name: \"not a name\"\n")
	for _, c := range []struct{ arg, want string }{
		{"--metrics-mapping=" + bad, "metric mapping " + bad + ": metric name 'not a name'"},
		{"--metrics-mapping=" + filepath.Join(dir, "missing.yaml"), "metric mapping: open " + filepath.Join(dir, "missing.yaml")},
	} {
		stderr, code := clitest.RunToExit(t, bin, nil, rlsWait, "rls", "--config", cfg, "--grpc", "127.0.0.1:0",
			"--http", "127.0.0.1:0", "--metrics", "127.0.0.1:0", c.arg)
		assert.Equal(t, command.ExitUsage, code, "%s: %s", c.arg, stderr)
		assert.Contains(t, stderr, c.want)
	}
}

// TestRLSMetricsMappingOptional: PROMETHEUS_MAPPER_YAML naming a file that
// does not exist (Envoy Gateway always sets it, and mounts the file from an
// optional ConfigMap) falls back to the reference's default mapping with a
// warning, where the --metrics-mapping flag refuses to start.
func TestRLSMetricsMappingOptional(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	writeFile(t, filepath.Join(dir, "d.yaml"), metricsConfig)
	missing := filepath.Join(dir, "statsd", "conf.yaml")
	p := launchRLS(t, []string{"USE_PROMETHEUS=true", "PROMETHEUS_ADDR=127.0.0.1:0", "PROMETHEUS_MAPPER_YAML=" + missing},
		[]string{"rls", "--config", dir, "--grpc", "127.0.0.1:0", "--http", "127.0.0.1:0"})
	p.waitStderr(t, "PROMETHEUS_MAPPER_YAML="+missing+" does not exist: the reference's default metric mapping is used")
	metricsCalls(t, p)
	page, body := p.scrape(t)
	assert.Empty(t, metricstest.Diff(readPage(t, "default.txt"), page, "ratelimit_service_rate_limit_"), "%s", body)
}

// TestServiceMetricsFold: the series that requests name past
// WithMetricSeriesLimit are one series of their domain, key1="(other)",
// whose counts are whole; an IPv4 address in a stat key is one element
// of the name, as the reference sanitizes it.
func TestServiceMetricsFold(t *testing.T) {
	t.Parallel()
	cfg, err := rls.ParseConfig([]rls.File{{Name: "d.yaml", Content: []byte(`domain: d
descriptors:
  - key: ra
    detailed_metric: true
    rate_limit: {unit: day, requests_per_unit: 100}
`)}})
	require.NoError(t, err)
	svc, err := rls.New(cfg, nil, rls.WithMetricSeriesLimit(2, 1<<20))
	require.NoError(t, err)
	for i := range 5 {
		req := request("d", fmt.Sprintf("ra=10.0.0.%d", i))
		req.HitsAddend = uint32(i + 1)
		_, err := svc.ShouldRateLimit(context.Background(), req)
		require.NoError(t, err)
	}
	m, err := newMapper("")
	require.NoError(t, err)
	reg, err := metrics.NewRegistry(newServiceMetrics(svc, m))
	require.NoError(t, err)
	rec := httptest.NewRecorder()
	metrics.Handler(reg, "", nil).ServeHTTP(rec, httptest.NewRequest("GET", "/metrics", nil))
	body, _ := io.ReadAll(rec.Body)
	page, err := metricstest.Parse(body)
	require.NoError(t, err, "%s", body)
	assert.Equal(t, map[string]float64{
		`ratelimit_service_rate_limit_total_hits{domain="d",key1="ra_10_0_0_0"}`: 1,
		`ratelimit_service_rate_limit_total_hits{domain="d",key1="ra_10_0_0_1"}`: 2,
		`ratelimit_service_rate_limit_total_hits{domain="d",key1="(other)"}`:     3 + 4 + 5,
	}, page.Series("ratelimit_service_rate_limit_total_hits"), "%s", body)
}

// TestMethodName: the gRPC method as the reference's splitMethodName
// names it.
func TestMethodName(t *testing.T) {
	t.Parallel()
	for full, want := range map[string]string{
		"/envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit": "ShouldRateLimit",
		"/grpc.health.v1.Health/Check":                                 "Check",
		"nothing":                                                      "unknown",
	} {
		assert.Equal(t, want, methodName(full), full)
	}
}

// TestDefaultMapping pins what the reference's mapping makes of the stats
// the docs name: a deeper rule's over_limit_with_local_cache adds up in
// _over_limit (its regular expressions are not anchored), a one-level
// rule's and a domain_not_found keep their escaped names.
func TestDefaultMapping(t *testing.T) {
	t.Parallel()
	m, err := newMapper("")
	require.NoError(t, err)
	sm := newServiceMetrics(nil, m)
	for stat, want := range map[string]string{
		"ratelimit.service.rate_limit.d.a.b.over_limit_with_local_cache": `ratelimit_service_rate_limit_over_limit{domain="d",key1="a",key2="b"}`,
		"ratelimit.service.rate_limit.d.a.b.c.total_hits":                `ratelimit_service_rate_limit_total_hits{domain="d",key1="a",key2="b"}`,
		"ratelimit.service.rate_limit.d.k.over_limit_with_local_cache":   "ratelimit_service_rate_limit_d_k_over_limit_with_local_cache",
		"ratelimit.service.rate_limit.(other).domain_not_found":          "ratelimit_service_rate_limit__other__domain_not_found",
		"ratelimit.service.call.should_rate_limit.redis_error":           `ratelimit_service_should_rate_limit_error{err_type="redis_error"}`,
	} {
		r := sm.lookup(stat, "counter")
		got := r.name
		if len(r.labelNames) > 0 {
			var pairs []string
			for i, l := range r.labelNames {
				pairs = append(pairs, fmt.Sprintf("%s=%q", l, r.labelValues[i]))
			}
			got += "{" + strings.Join(pairs, ",") + "}"
		}
		assert.Equal(t, want, got, stat)
	}
}
