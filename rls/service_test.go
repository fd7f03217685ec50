package rls

import (
	"bytes"
	"context"
	"errors"
	"maps"
	"strings"
	"testing"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc/codes"
	grpcstatus "google.golang.org/grpc/status"
)

// The reference's counters (src/limiter/base_limiter.go): with a limit of
// 10 the near-limit threshold is 8; hits past it are near_limit, past the
// limit over_limit, split within one call's hits_addend.
func TestRuleCounts(t *testing.T) {
	cfg := parseYAML(t, `
domain: d
descriptors:
  - key: k
    rate_limit: {unit: minute, requests_per_unit: 10}
  - key: s
    shadow_mode: true
    rate_limit: {unit: minute, requests_per_unit: 10}
  - key: dm
    detailed_metric: true
    rate_limit: {unit: minute, requests_per_unit: 10}
`)
	clock := newTestClock(T0)
	store, _ := NewMemoryStore(WithStoreClock(clock))
	svc, err := New(cfg, store)
	if err != nil {
		t.Fatal(err)
	}
	for _, key := range []string{"k", "s"} {
		for _, hits := range []uint32{7, 2, 3, 1} {
			if _, err := svc.ShouldRateLimit(context.Background(), request("d", hits, desc(key, "v"))); err != nil {
				t.Fatal(err)
			}
		}
	}
	// 7: within 7. 2: 7→9, near 1, within 2. 3: 9→12, over 2, near 1.
	// 1: 12→13, over 1.
	want := RuleCounts{TotalHits: 13, OverLimit: 3, NearLimit: 2, WithinLimit: 9}
	if got := svc.RuleCounts("d.k"); got != want {
		t.Errorf("d.k: %+v, want %+v", got, want)
	}
	want.ShadowMode = 3
	if got := svc.RuleCounts("d.s"); got != want {
		t.Errorf("d.s: %+v, want %+v", got, want)
	}
	// detailed_metric counts per value.
	for _, v := range []string{"a", "a", "b"} {
		if _, err := svc.ShouldRateLimit(context.Background(), request("d", 0, desc("dm", v))); err != nil {
			t.Fatal(err)
		}
	}
	if a, b := svc.RuleCounts("d.dm_a"), svc.RuleCounts("d.dm_b"); a.TotalHits != 2 || b.TotalHits != 1 {
		t.Errorf("detailed: %+v %+v", a, b)
	}
	if _, err := svc.ShouldRateLimit(context.Background(), request("nowhere", 0, desc("k", "v"))); err != nil {
		t.Fatal(err)
	}
	if _, err := svc.ShouldRateLimit(context.Background(), request("", 0, desc("k", "v"))); grpcstatus.Code(err) != codes.Unknown {
		t.Errorf("empty domain: %v", err)
	}
	if _, err := svc.ShouldRateLimit(context.Background(), request("d", 0)); grpcstatus.Code(err) != codes.Unknown {
		t.Errorf("no descriptors: %v", err)
	}
	all := maps.Collect(svc.AllRuleCounts())
	if all["d.k"] != (RuleCounts{TotalHits: 13, OverLimit: 3, NearLimit: 2, WithinLimit: 9}) ||
		all["d.s"].ShadowMode != 3 || all["d.dm_a"].TotalHits != 2 || len(all) != 4 {
		t.Errorf("AllRuleCounts: %+v", all)
	}
	if got := maps.Collect(svc.AllDomainsNotFound()); !maps.Equal(got, map[string]uint64{"nowhere": 1}) {
		t.Errorf("AllDomainsNotFound: %v", got)
	}
	if got := svc.Counts(); got != (Counts{ServiceErrors: 2, ConfigLoadSuccess: 1}) {
		t.Errorf("Counts: %+v", got)
	}
	// WriteMetrics, deprecated, still writes the package's own names.
	var b bytes.Buffer
	if err := svc.WriteMetrics(&b); err != nil {
		t.Fatal(err)
	}
	for _, line := range []string{
		`ratelimit_rls_total_hits{key="d.k"} 13`,
		`ratelimit_rls_over_limit{key="d.k"} 3`,
		`ratelimit_rls_near_limit{key="d.k"} 2`,
		`ratelimit_rls_within_limit{key="d.k"} 9`,
		`ratelimit_rls_shadow_mode{key="d.s"} 3`,
		`ratelimit_rls_total_hits{key="d.dm_a"} 2`,
		`ratelimit_rls_domain_not_found{domain="nowhere"} 1`,
		`ratelimit_rls_service_errors 2`,
		`ratelimit_rls_config_load_success 1`,
		"# TYPE ratelimit_rls_total_hits counter",
	} {
		if !strings.Contains(b.String(), line+"\n") {
			t.Errorf("metrics lack %q", line)
		}
	}
}

func TestMetricLabelsEscaped(t *testing.T) {
	svc, err := New(parseYAML(t, "domain: d\ndescriptors:\n  - key: k\n    detailed_metric: true\n    rate_limit: {unit: second, requests_per_unit: 1}\n"), nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := svc.ShouldRateLimit(context.Background(), request("d", 0, desc("k", "a\"b\\c\nd"))); err != nil {
		t.Fatal(err)
	}
	var b bytes.Buffer
	svc.WriteMetrics(&b)
	if want := `ratelimit_rls_total_hits{key="d.k_a\"b\\c\nd"} 1`; !strings.Contains(b.String(), want) {
		t.Errorf("metrics lack %s:\n%s", want, b.String())
	}
}

func headerMap(hs []*corev3.HeaderValue) map[string]string {
	m := map[string]string{}
	for _, h := range hs {
		m[h.Key] = h.Value
	}
	return m
}

// LIMIT_RESPONSE_HEADERS_ENABLED: the descriptor closest to its limit, an
// over-limit one first.
func TestRateLimitHeaders(t *testing.T) {
	clock := newTestClock(T0)
	store, _ := NewMemoryStore(WithStoreClock(clock))
	svc, err := New(mustLoad(t, "testdata/config"), store, WithRateLimitHeaders("", "", ""))
	if err != nil {
		t.Fatal(err)
	}
	got, _ := svc.ShouldRateLimit(context.Background(), request("test-domain", 0, desc("key2", "h"), desc("key3", "h"), desc("nothing", "x")))
	want := map[string]string{"RateLimit-Limit": "1", "RateLimit-Remaining": "0", "RateLimit-Reset": "2800"}
	if h := headerMap(got.ResponseHeadersToAdd); len(h) != 3 || h["RateLimit-Limit"] != want["RateLimit-Limit"] || h["RateLimit-Remaining"] != "0" || h["RateLimit-Reset"] != "2800" {
		t.Errorf("headers %v, want %v", h, want)
	}
	got, _ = svc.ShouldRateLimit(context.Background(), request("test-domain", 0, desc("key2", "h"), desc("key3", "h")))
	if h := headerMap(got.ResponseHeadersToAdd); h["RateLimit-Limit"] != "1" || h["RateLimit-Remaining"] != "0" {
		t.Errorf("over: headers %v", h)
	}
	got, _ = svc.ShouldRateLimit(context.Background(), request("test-domain", 0, desc("key2", "h")))
	if h := headerMap(got.ResponseHeadersToAdd); h["RateLimit-Limit"] != "20" || h["RateLimit-Remaining"] != "17" || h["RateLimit-Reset"] != "40" {
		t.Errorf("one descriptor: headers %v", h)
	}
	got, _ = svc.ShouldRateLimit(context.Background(), request("test-domain", 0, desc("nothing", "x"), desc("key6", "u")))
	if len(got.ResponseHeadersToAdd) != 0 {
		t.Errorf("no limit: headers %v", got.ResponseHeadersToAdd)
	}
	named, _ := New(mustLoad(t, "testdata/config"), store, WithRateLimitHeaders("X-Limit", "X-Left", "X-Reset"))
	got, _ = named.ShouldRateLimit(context.Background(), request("test-domain", 0, desc("key2", "h")))
	if h := headerMap(got.ResponseHeadersToAdd); h["X-Limit"] != "20" || h["X-Left"] != "16" || h["X-Reset"] != "40" {
		t.Errorf("named headers %v", h)
	}
}

// The IETF fields, as httplimit writes them.
func TestIETFHeaders(t *testing.T) {
	clock := newTestClock(T0)
	store, _ := NewMemoryStore(WithStoreClock(clock))
	svc, err := New(parseYAML(t, `
domain: d
descriptors:
  - key: user
    rate_limit: {unit: minute, requests_per_unit: 2, name: per-user}
  - key: route
    rate_limits:
      - {unit: second, requests_per_unit: 10}
      - {unit: hour, requests_per_unit: 100}
`), store, WithIETFHeaders())
	if err != nil {
		t.Fatal(err)
	}
	req := request("d", 0, desc("user", "u"), desc("route", "r"))
	got, _ := svc.ShouldRateLimit(context.Background(), req)
	h := headerMap(got.ResponseHeadersToAdd)
	if want := `"per-user";q=2;w=60, "d.route";q=10;w=1, "d.route#1";q=100;w=3600`; h["RateLimit-Policy"] != want {
		t.Errorf("policy %q, want %q", h["RateLimit-Policy"], want)
	}
	if want := `"per-user";r=1;t=40, "d.route";r=9;t=1, "d.route#1";r=99;t=2800`; h["RateLimit"] != want {
		t.Errorf("RateLimit %q, want %q", h["RateLimit"], want)
	}
	svc.ShouldRateLimit(context.Background(), req)
	got, _ = svc.ShouldRateLimit(context.Background(), req)
	h = headerMap(got.ResponseHeadersToAdd)
	if want := `"per-user";r=0;t=40, "d.route";r=7, "d.route#1";r=97`; h["RateLimit"] != want || h["Retry-After"] != "40" {
		t.Errorf("refused: RateLimit %q Retry-After %q, want %q and 40", h["RateLimit"], h["Retry-After"], want)
	}
	if sfString("a\"b\\c\x01é") != `"a\"b\\c???"` {
		t.Errorf("sfString %s", sfString("a\"b\\c\x01é"))
	}
}

// SetConfig swaps the configuration while the counters stay.
func TestSetConfig(t *testing.T) {
	clock := newTestClock(T0)
	store, _ := NewMemoryStore(WithStoreClock(clock))
	svc, err := New(parseYAML(t, "domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unit: minute, requests_per_unit: 2}\n"), store)
	if err != nil {
		t.Fatal(err)
	}
	req := request("d", 0, desc("k", "v"))
	svc.ShouldRateLimit(context.Background(), req)
	svc.ShouldRateLimit(context.Background(), req)
	got, _ := svc.ShouldRateLimit(context.Background(), req)
	checkResponse(t, "before", got, response(over, status(over, "", 2, mnt, 0, 40)))
	if err := svc.SetConfig(parseYAML(t, "domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unit: minute, requests_per_unit: 5}\n")); err != nil {
		t.Fatal(err)
	}
	got, _ = svc.ShouldRateLimit(context.Background(), req)
	checkResponse(t, "after raising the limit, the window keeps its 3", got, response(ok, status(ok, "", 5, mnt, 1, 40)))
	if err := svc.SetConfig(nil); !errors.Is(err, ErrInvalidOption) {
		t.Errorf("nil config: %v", err)
	}
	svc.ConfigLoadFailed()
	var b bytes.Buffer
	svc.WriteMetrics(&b)
	if !strings.Contains(b.String(), "ratelimit_rls_config_load_success 2\n") || !strings.Contains(b.String(), "ratelimit_rls_config_load_error 1\n") {
		t.Errorf("config load counters:\n%s", b.String())
	}
	empty, _ := New(nil, nil)
	if _, err := empty.ShouldRateLimit(context.Background(), req); grpcstatus.Code(err) != codes.Unknown {
		t.Errorf("no configuration: %v", err)
	}
}

// Calls and reloads at once (go test -race).
func TestConcurrentCallsAndReloads(t *testing.T) {
	cfgs := []*Config{
		parseYAML(t, "domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unit: second, requests_per_unit: 1000}\n"),
		parseYAML(t, "domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unit: second, requests_per_unit: 10, algorithm: gcra}\n"),
	}
	svc, err := New(cfgs[0], nil)
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		for i := 0; i < 200; i++ {
			svc.SetConfig(cfgs[i%2])
		}
	}()
	for i := 0; i < 4; i++ {
		t.Run("", func(t *testing.T) {
			t.Parallel()
			for j := 0; j < 200; j++ {
				if _, err := svc.ShouldRateLimit(context.Background(), request("d", 0, desc("k", "v"), desc("k", "w"))); err != nil {
					t.Error(err)
					return
				}
			}
		})
	}
	<-done
}

func TestOptionsErrors(t *testing.T) {
	for name, o := range map[string]Option{
		"negative timeout": WithStoreTimeout(-time.Second),
		"ratio 0":          WithNearLimitRatio(0),
		"ratio 2":          WithNearLimitRatio(2),
		"nil":              nil,
	} {
		if _, err := New(nil, nil, o); !errors.Is(err, ErrInvalidOption) {
			t.Errorf("%s: %v", name, err)
		}
	}
	for name, o := range map[string]StoreOption{
		"nil clock":     WithStoreClock(nil),
		"nil clock ptr": WithStoreClock((*testClock)(nil)),
		"prefix":        WithKeyPrefix("{x}"),
		"cache 0":       WithRefusalCache(0),
		"max keys 0":    WithMaxKeys(0),
		"nil":           nil,
	} {
		if _, err := NewMemoryStore(o); !errors.Is(err, ErrInvalidOption) {
			t.Errorf("%s: %v", name, err)
		}
	}
	if _, err := NewMemoryStore(WithRefusalCache(10)); !errors.Is(err, ErrInvalidOption) {
		t.Errorf("refusal cache on memory: %v", err)
	}
	if _, err := NewMemoryStore(WithKeyPrefix("x:")); !errors.Is(err, ErrInvalidOption) {
		t.Errorf("key prefix on memory: %v", err)
	}
	if _, err := NewRedisStore(nil); !errors.Is(err, ErrInvalidOption) {
		t.Errorf("nil client: %v", err)
	}
	// A request's own limit with no unit: an error, not a crash.
	svc, _ := New(parseYAML(t, "domain: d\n"), nil)
	d := desc("k", "v")
	d = withLimit(d, 1, rlsv3.RateLimitResponse_RateLimit_UNKNOWN)
	if _, err := svc.ShouldRateLimit(context.Background(), request("d", 0, d)); grpcstatus.Code(err) != codes.InvalidArgument {
		t.Errorf("override without unit: %v", err)
	}
}

// A flood of distinct descriptors stays within WithMaxKeys.
func TestMemoryStoreBounded(t *testing.T) {
	clock := newTestClock(T0)
	store, err := NewMemoryStore(WithStoreClock(clock), WithMaxKeys(640))
	if err != nil {
		t.Fatal(err)
	}
	svc, err := New(parseYAML(t, "domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unit: day, requests_per_unit: 5}\n"), store)
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 20000; i++ {
		if _, err := svc.ShouldRateLimit(context.Background(), request("d", 0, desc("k", itoa(int64(i))))); err != nil {
			t.Fatal(err)
		}
	}
	n := store.Stats().Windows
	if n > 640 || n < 320 {
		t.Errorf("%d counters for a bound of 640", n)
	}
}

// Unknown domains come from clients: their counters are bounded.
func TestDomainNotFoundBounded(t *testing.T) {
	svc, err := New(parseYAML(t, "domain: d\n"), nil)
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i < DefaultMaxMetricSeries+100; i++ {
		svc.ShouldRateLimit(context.Background(), request("nowhere"+itoa(int64(i)), 0, desc("k", "v")))
	}
	n := 0
	svc.metrics.domainNotFound.Range(func(_, _ any) bool { n++; return true })
	if n != DefaultMaxMetricSeries+1 {
		t.Errorf("%d domains counted apart, want %d and %q", n, DefaultMaxMetricSeries, otherSeries)
	}
	if got := maps.Collect(svc.AllDomainsNotFound())[otherSeries]; got != 100 {
		t.Errorf("%d unknown domains past the bound counted together, want 100", got)
	}
}
