package rls

import (
	"cmp"
	"context"
	_ "embed"
	"fmt"
	"maps"
	"os"
	"regexp"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/go-kit/log"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/statsd_exporter/pkg/mapper"
	"google.golang.org/grpc"

	"github.com/smoothrate/ratelimit/rls"
)

// This file holds the metrics page of rls: the service's counters named
// as envoyproxy/ratelimit names its stats ("ratelimit.service.rate_limit.
// domain.key_value.total_hits"), turned into Prometheus series by
// statsd_exporter's mapper with the reference's default mapping
// (default_mapper.yaml, copied from its src/stats/prom) or the file
// PROMETHEUS_MAPPER_YAML names, as the reference's Prometheus sink does.
// The counters are read when the page is scraped; only the response
// times are observed as calls end.

//go:embed default_mapper.yaml
var defaultMapping string

// newMapper reads the mapping file at path (the reference's default
// mapping when path is empty). The reference ignores a file that does not
// load (and then maps nothing); a file that does not load is an error
// here.
func newMapper(path string) (*mapper.MetricMapper, error) {
	m := &mapper.MetricMapper{Logger: log.NewNopLogger()}
	if path == "" {
		if err := m.InitFromYAMLString(defaultMapping); err != nil {
			return nil, fmt.Errorf("the default metric mapping: %w (a bug)", err)
		}
		return m, nil
	}
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("metric mapping: %w", err)
	}
	if err := m.InitFromYAMLString(string(b)); err != nil {
		return nil, fmt.Errorf("metric mapping %s: %w", path, err)
	}
	return m, nil
}

// serviceMetrics is the prometheus.Collector of rls's page: the service's
// counters, the calls per gRPC method (total_requests) and their response
// times, and ours: calls in flight, store set up wrong.
type serviceMetrics struct {
	svc      *rls.Service
	mapper   *mapper.MetricMapper
	inFlight atomic.Int64
	// connsRefused counts the connections closed over
	// --max-conns-per-client.
	connsRefused atomic.Int64

	requests sync.Map // gRPC method name → *atomic.Uint64
	timers   sync.Map // gRPC method name → prometheus.Observer

	mu       sync.Mutex
	mapped   map[string]mapped            // statsd name and type → its series
	observed map[string]prometheus.Metric // a timer's family name → its histogram or summary
}

func newServiceMetrics(svc *rls.Service, m *mapper.MetricMapper) *serviceMetrics {
	return &serviceMetrics{svc: svc, mapper: m, mapped: map[string]mapped{}, observed: map[string]prometheus.Metric{}}
}

// mapped is where the mapper sends one stat: a family name and labels,
// or nowhere (drop).
type mapped struct {
	drop        bool
	name, help  string // help: the mapping's, or "" for the stat's own
	labelNames  []string
	labelValues []string
	scale       float64
}

// statsd names of the reference's stats (src/stats/manager_impl.go,
// src/metrics), and of ours under the same scope.
const (
	rateLimitScope    = "ratelimit.service.rate_limit."
	shouldRateLimit   = "ratelimit.service.call.should_rate_limit."
	serviceScope      = "ratelimit.service."
	serverScope       = "ratelimit_server."
	statTotalRequests = ".total_requests"
	statResponseTime  = ".response_time"
)

// ruleStats are the counters of a rule, by the name the reference gives
// each, and what each counts.
var ruleStats = []struct {
	name, help string
	get        func(rls.RuleCounts) uint64
}{
	{"total_hits", "Hits on a rate limit rule (hits_addend summed).", func(c rls.RuleCounts) uint64 { return c.TotalHits }},
	{"over_limit", "Hits over a rule's limit.", func(c rls.RuleCounts) uint64 { return c.OverLimit }},
	{"near_limit", "Hits within a rule's limit but past the near-limit ratio (NEAR_LIMIT_RATIO, 0.8).", func(c rls.RuleCounts) uint64 { return c.NearLimit }},
	{"over_limit_with_local_cache", "Over-limit hits answered by the refusal cache.", func(c rls.RuleCounts) uint64 { return c.OverLimitWithLocalCache }},
	{"within_limit", "Hits within a rule's limit.", func(c rls.RuleCounts) uint64 { return c.WithinLimit }},
	{"shadow_mode", "Hits over the limit of a shadow_mode rule, answered OK.", func(c rls.RuleCounts) uint64 { return c.ShadowMode }},
}

// ipv4 is what the reference's stat names spell with '_' for '.'
// (utils.SanitizeStatName), so that an address in a detailed key stays
// one element of the name.
var ipv4 = regexp.MustCompile(`\d{1,3}\.\d{1,3}\.\d{1,3}\.\d{1,3}`)

var statNameReplacer = strings.NewReplacer(":", "_", "|", "_")

// sanitizeStatName is the reference's utils.SanitizeStatName.
func sanitizeStatName(s string) string {
	return ipv4.ReplaceAllStringFunc(statNameReplacer.Replace(s), func(ip string) string {
		return strings.ReplaceAll(ip, ".", "_")
	})
}

// lookup maps the stat name of type typ, once.
func (m *serviceMetrics) lookup(name string, typ mapper.MetricType) mapped {
	k := string(typ) + " " + name
	if r, ok := m.mapped[k]; ok {
		return r
	}
	var r mapped
	mp, labels, present := m.mapper.GetMapping(name, typ)
	switch {
	case mp != nil && mp.Action == mapper.ActionTypeDrop:
		r.drop = true
	case present && mp.Name == "":
		r.drop = true // the reference's exporter drops it too (empty_metric_name)
	case present:
		r.name, r.help = mapper.EscapeMetricName(mp.Name), mp.HelpText
		r.labelNames = slices.Sorted(maps.Keys(labels))
		for _, l := range r.labelNames {
			r.labelValues = append(r.labelValues, labels[l])
		}
	default:
		r.name = mapper.EscapeMetricName(name)
	}
	if mp != nil && mp.Scale.Set {
		r.scale = mp.Scale.Val
	}
	m.mapped[k] = r
	return r
}

// families gathers one scrape's series by family and labels: several
// stats may map to one series (their values add up, as in the reference's
// exporter), and a family keeps the type and help of its first stat (a
// stat of another type is dropped, as the exporter drops a conflicting
// event).
type families struct {
	byName map[string]*family
	order  []string
}

type family struct {
	typ    prometheus.ValueType // 0: a timer's
	help   string
	series map[string]*sample
	order  []string
}

type sample struct {
	labelNames, labelValues []string
	value                   float64
}

func (fs *families) add(r mapped, typ prometheus.ValueType, help string, v float64) {
	if r.drop {
		return
	}
	if r.scale != 0 {
		v *= r.scale
	}
	f := fs.byName[r.name]
	if f == nil {
		f = &family{typ: typ, help: cmp.Or(r.help, help), series: map[string]*sample{}}
		fs.byName[r.name] = f
		fs.order = append(fs.order, r.name)
	} else if f.typ != typ {
		return
	}
	k := strings.Join(r.labelNames, "\xff") + "\xfe" + strings.Join(r.labelValues, "\xff")
	s := f.series[k]
	if s == nil {
		s = &sample{labelNames: r.labelNames, labelValues: r.labelValues}
		f.series[k] = s
		f.order = append(f.order, k)
	}
	if typ == prometheus.GaugeValue {
		s.value = v
	} else {
		s.value += v
	}
}

// Describe sends nothing: the families are the mapping's, known at
// scrape time (an unchecked collector).
func (m *serviceMetrics) Describe(chan<- *prometheus.Desc) {}

// Collect reads every counter and sends its series.
func (m *serviceMetrics) Collect(ch chan<- prometheus.Metric) {
	m.mu.Lock()
	defer m.mu.Unlock()
	fs := families{byName: map[string]*family{}}
	for name := range m.observed {
		fs.byName[name] = &family{}
	}
	// The reference flushes a counter once it is not zero: a series
	// appears with its first count.
	counter := func(stat, help string, v uint64) {
		if v != 0 {
			fs.add(m.lookup(stat, mapper.MetricTypeCounter), prometheus.CounterValue, help, float64(v))
		}
	}
	keys := map[string]rls.RuleCounts{}
	for k, c := range m.svc.AllRuleCounts() {
		keys[k] = c
	}
	for _, k := range slices.Sorted(maps.Keys(keys)) {
		base := rateLimitScope + sanitizeStatName(k) + "."
		for _, st := range ruleStats {
			counter(base+st.name, st.help, st.get(keys[k]))
		}
	}
	notFound := maps.Collect(m.svc.AllDomainsNotFound())
	for _, d := range slices.Sorted(maps.Keys(notFound)) {
		counter(rateLimitScope+sanitizeStatName(d)+".domain_not_found", "Descriptors asked about a domain no configuration has.", notFound[d])
	}
	c := m.svc.Counts()
	counter(shouldRateLimit+"redis_error", "Calls that failed: redis_error, the store failed (UNAVAILABLE on an outage or timeout, INTERNAL otherwise); service_error, the call was invalid.", c.StoreErrors)
	counter(shouldRateLimit+"service_error", "Calls that failed: redis_error, the store failed (UNAVAILABLE on an outage or timeout, INTERNAL otherwise); service_error, the call was invalid.", c.ServiceErrors)
	counter(serviceScope+"config_load_success", "Configurations loaded.", c.ConfigLoadSuccess)
	counter(serviceScope+"config_load_error", "Configurations refused (the previous one kept serving).", c.ConfigLoadError)
	counter(serviceScope+"global_shadow_mode", "Calls over a limit answered OK by SHADOW_MODE.", c.GlobalShadowMode)
	var methods []string
	m.requests.Range(func(k, _ any) bool { methods = append(methods, k.(string)); return true })
	slices.Sort(methods)
	for _, meth := range methods {
		v, _ := m.requests.Load(meth)
		counter(serverScope+meth+statTotalRequests, "gRPC calls by method.", v.(*atomic.Uint64).Load())
	}
	// Ours, present from the start.
	fs.add(m.lookup(serviceScope+"store_misconfigured", mapper.MetricTypeCounter), prometheus.CounterValue,
		"Calls answered INTERNAL because the store is set up wrong (among the redis_error ones).", float64(c.StoreMisconfigured))
	fs.add(m.lookup(serviceScope+"calls_in_flight", mapper.MetricTypeGauge), prometheus.GaugeValue,
		"ShouldRateLimit calls (gRPC and /json) being answered.", float64(m.inFlight.Load()))
	fs.add(m.lookup(serviceScope+"connections_refused", mapper.MetricTypeCounter), prometheus.CounterValue,
		"Connections closed as soon as accepted: their client held --max-conns-per-client already.", float64(m.connsRefused.Load()))

	for _, name := range fs.order {
		f := fs.byName[name]
		descs := map[string]*prometheus.Desc{}
		for _, k := range f.order {
			s := f.series[k]
			dk := strings.Join(s.labelNames, "\xff")
			d := descs[dk]
			if d == nil {
				d = prometheus.NewDesc(name, f.help, s.labelNames, nil)
				descs[dk] = d
			}
			if metric, err := prometheus.NewConstMetric(d, f.typ, s.value, s.labelValues...); err == nil {
				ch <- metric
			} else {
				ch <- prometheus.NewInvalidMetric(d, err)
			}
		}
	}
	for _, h := range m.observed {
		ch <- h
	}
}

// intercept is the gRPC interceptor that counts every call by method and
// observes its response time, as the reference's server reporter does
// (src/metrics), in seconds.
func (m *serviceMetrics) intercept(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
	start := time.Now()
	method := methodName(info.FullMethod)
	v, ok := m.requests.Load(method)
	if !ok {
		v, _ = m.requests.LoadOrStore(method, new(atomic.Uint64))
	}
	v.(*atomic.Uint64).Add(1)
	resp, err := handler(ctx, req)
	m.timer(method).Observe(time.Since(start).Seconds())
	return resp, err
}

// methodName is a gRPC method's name without its service, as the
// reference's splitMethodName gives it ("unknown" for a malformed one).
func methodName(full string) string {
	_, name, ok := strings.Cut(strings.TrimPrefix(full, "/"), "/")
	if !ok {
		return "unknown"
	}
	return name
}

type noObserver struct{}

func (noObserver) Observe(float64) {}

// timer returns the observer of method's response times: a histogram or a
// summary as the mapping says (the reference's default mapping asks for a
// histogram with Prometheus's default buckets).
func (m *serviceMetrics) timer(method string) prometheus.Observer {
	if o, ok := m.timers.Load(method); ok {
		return o.(prometheus.Observer)
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if o, ok := m.timers.Load(method); ok {
		return o.(prometheus.Observer)
	}
	o := m.newTimer(serverScope + method + statResponseTime)
	m.timers.Store(method, o)
	return o
}

// newTimer makes the observer of the timer stat, as statsd_exporter's
// registry makes it; m.mu is held.
func (m *serviceMetrics) newTimer(stat string) prometheus.Observer {
	r := m.lookup(stat, mapper.MetricTypeObserver)
	if r.drop {
		return noObserver{}
	}
	if _, taken := m.observed[r.name]; taken {
		return noObserver{} // two methods mapped to one name: the first keeps it
	}
	mp, _, _ := m.mapper.GetMapping(stat, mapper.MetricTypeObserver)
	defaults := m.mapper.Defaults
	typ := defaults.ObserverType
	if mp != nil && mp.ObserverType != "" {
		typ = mp.ObserverType
	}
	help := cmp.Or(r.help, "Time to answer a gRPC call, by method.")
	constLabels := prometheus.Labels{}
	for i, l := range r.labelNames {
		constLabels[l] = r.labelValues[i]
	}
	var metric interface {
		prometheus.Metric
		prometheus.Observer
	}
	if typ == mapper.ObserverTypeHistogram {
		ho := defaults.HistogramOptions
		if mp != nil && mp.HistogramOptions != nil {
			if len(mp.HistogramOptions.Buckets) > 0 {
				ho.Buckets = mp.HistogramOptions.Buckets
			}
			if mp.HistogramOptions.NativeHistogramBucketFactor > 0 {
				ho.NativeHistogramBucketFactor = mp.HistogramOptions.NativeHistogramBucketFactor
			}
			if mp.HistogramOptions.NativeHistogramMaxBuckets > 0 {
				ho.NativeHistogramMaxBuckets = mp.HistogramOptions.NativeHistogramMaxBuckets
			}
		}
		metric = prometheus.NewHistogram(prometheus.HistogramOpts{Name: r.name, Help: help, ConstLabels: constLabels,
			Buckets: ho.Buckets, NativeHistogramBucketFactor: ho.NativeHistogramBucketFactor, NativeHistogramMaxBucketNumber: ho.NativeHistogramMaxBuckets})
	} else {
		so := defaults.SummaryOptions
		if mp != nil && mp.SummaryOptions != nil {
			so = *mp.SummaryOptions
		}
		quantiles := defaults.SummaryOptions.Quantiles
		if mp != nil && mp.SummaryOptions != nil && len(mp.SummaryOptions.Quantiles) > 0 {
			quantiles = mp.SummaryOptions.Quantiles
		}
		objectives := map[float64]float64{}
		for _, q := range quantiles {
			objectives[q.Quantile] = q.Error
		}
		metric = prometheus.NewSummary(prometheus.SummaryOpts{Name: r.name, Help: help, ConstLabels: constLabels,
			Objectives: objectives, MaxAge: so.MaxAge, AgeBuckets: so.AgeBuckets, BufCap: so.BufCap})
	}
	if r.scale != 0 {
		m.observed[r.name] = metric
		return scaled{metric, r.scale}
	}
	m.observed[r.name] = metric
	return metric
}

// scaled observes values times a mapping's scale.
type scaled struct {
	o     prometheus.Observer
	scale float64
}

func (s scaled) Observe(v float64) { s.o.Observe(v * s.scale) }
