package rls

import (
	"bufio"
	"io"
	"math"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
)

// ruleStats are the reference's counters of one rule (or detailed key).
type ruleStats struct {
	totalHits, overLimit, nearLimit, withinLimit, shadowMode, overLimitLocalCache atomic.Uint64
}

// metrics are a Service's counters, written by WriteMetrics in the
// Prometheus text format.
type metrics struct {
	rules          sync.Map // string → *ruleStats
	domainNotFound sync.Map // string → *atomic.Uint64
	// ruleSeries bounds the rules' series that requests name (detailed
	// keys, limit overrides), domainSeries the unknown domains: the names
	// come from clients, and a client sending random ones must not grow
	// the metrics without end.
	ruleSeries, domainSeries seriesLimit

	storeErrors, serviceErrors         atomic.Uint64
	storeMisconfigured                 atomic.Uint64
	configLoadSuccess, configLoadError atomic.Uint64
	globalShadowMode                   atomic.Uint64
}

// rule returns the counters of key; dynamic says that a request made the
// key (a detailed_metric or value_to_metric value, a limit override), so
// that it counts against ruleSeries.
func (m *metrics) rule(key string, dynamic bool) *ruleStats {
	if v, ok := m.rules.Load(key); ok {
		return v.(*ruleStats)
	}
	admitted := false
	if dynamic {
		if key, admitted = m.ruleSeries.label(key); !admitted {
			if v, ok := m.rules.Load(key); ok {
				return v.(*ruleStats)
			}
		}
	}
	v, loaded := m.rules.LoadOrStore(key, new(ruleStats))
	if loaded && admitted {
		m.ruleSeries.release(key)
	}
	return v.(*ruleStats)
}

func (m *metrics) notFound(domain string) {
	v, ok := m.domainNotFound.Load(domain)
	if !ok {
		var admitted, loaded bool
		domain, admitted = m.domainSeries.label(domain)
		v, loaded = m.domainNotFound.LoadOrStore(domain, new(atomic.Uint64))
		if loaded && admitted {
			m.domainSeries.release(domain)
		}
	}
	v.(*atomic.Uint64).Add(1)
}

// addSat adds n to c, saturating at the largest uint64: hits_addend is a
// uint64, and a counter that wrapped would read as a reset. (Racing adds
// may lose a little once a counter is saturated: it stays saturated.)
func addSat(c *atomic.Uint64, n uint64) {
	if v := c.Add(n); v < n {
		c.Store(math.MaxUint64)
	}
}

// RuleCounts are the counters of one rule, as the reference names them.
type RuleCounts struct {
	TotalHits, OverLimit, NearLimit, WithinLimit, ShadowMode uint64
	// OverLimitWithLocalCache counts the over-limit hits answered from
	// the refusal cache (included in OverLimit).
	OverLimitWithLocalCache uint64
}

// RuleCounts returns the counters of the rule or metric key (a rule's
// FullKey, or the detailed key of a detailed_metric rule); zero when it has
// had no hits.
func (s *Service) RuleCounts(key string) RuleCounts {
	v, ok := s.metrics.rules.Load(key)
	if !ok {
		return RuleCounts{}
	}
	r := v.(*ruleStats)
	return RuleCounts{
		TotalHits: r.totalHits.Load(), OverLimit: r.overLimit.Load(), NearLimit: r.nearLimit.Load(),
		WithinLimit: r.withinLimit.Load(), ShadowMode: r.shadowMode.Load(),
		OverLimitWithLocalCache: r.overLimitLocalCache.Load(),
	}
}

// StoreErrors is how many calls failed on the store (the reference's
// redis_error).
func (s *Service) StoreErrors() uint64 { return s.metrics.storeErrors.Load() }

// ConfigLoadFailed counts a configuration that failed to load
// (config_load_error); call it when a reload is refused. SetConfig counts
// the successes.
func (s *Service) ConfigLoadFailed() { s.metrics.configLoadError.Add(1) }

// WriteMetrics writes every counter in the Prometheus text exposition
// format (version 0.0.4), for a /metrics endpoint:
//
//	ratelimit_rls_total_hits{key="domain.key_value"} 12
//
// Per rule (key is the rule's full key, as the reference's stats name it):
// total_hits, over_limit, near_limit, within_limit, shadow_mode and
// over_limit_with_local_cache; for the service: store_errors (the
// reference's redis_error), service_errors, config_load_success,
// config_load_error, global_shadow_mode, and domain_not_found per domain.
// The series that requests name (detailed keys, limit overrides, unknown
// domains) past WithMetricSeriesLimit are written as key="(other)" and
// domain="(other)".
func (s *Service) WriteMetrics(w io.Writer) error {
	bw := bufio.NewWriter(w)
	m := &s.metrics
	type kv struct {
		key string
		r   *ruleStats
	}
	var rules []kv
	m.rules.Range(func(k, v any) bool {
		rules = append(rules, kv{k.(string), v.(*ruleStats)})
		return true
	})
	sort.Slice(rules, func(i, j int) bool { return rules[i].key < rules[j].key })
	perRule := []struct {
		name, help string
		get        func(*ruleStats) uint64
	}{
		{"total_hits", "Hits on the rule (hits_addend summed).", func(r *ruleStats) uint64 { return r.totalHits.Load() }},
		{"over_limit", "Hits over the rule's limit.", func(r *ruleStats) uint64 { return r.overLimit.Load() }},
		{"near_limit", "Hits within the limit but above the near-limit ratio.", func(r *ruleStats) uint64 { return r.nearLimit.Load() }},
		{"within_limit", "Hits within the limit.", func(r *ruleStats) uint64 { return r.withinLimit.Load() }},
		{"shadow_mode", "Hits over the limit of a shadow_mode rule (answered OK).", func(r *ruleStats) uint64 { return r.shadowMode.Load() }},
		{"over_limit_with_local_cache", "Over-limit hits answered by the refusal cache.", func(r *ruleStats) uint64 { return r.overLimitLocalCache.Load() }},
	}
	for _, c := range perRule {
		header(bw, "ratelimit_rls_"+c.name, c.help)
		for _, r := range rules {
			bw.WriteString("ratelimit_rls_" + c.name + `{key="` + escapeLabel(r.key) + `"} `)
			bw.WriteString(strconv.FormatUint(c.get(r.r), 10))
			bw.WriteByte('\n')
		}
	}
	var domains []string
	m.domainNotFound.Range(func(k, _ any) bool { domains = append(domains, k.(string)); return true })
	sort.Strings(domains)
	header(bw, "ratelimit_rls_domain_not_found", "Descriptors asked about a domain no configuration has.")
	for _, d := range domains {
		v, _ := m.domainNotFound.Load(d)
		bw.WriteString(`ratelimit_rls_domain_not_found{domain="` + escapeLabel(d) + `"} `)
		bw.WriteString(strconv.FormatUint(v.(*atomic.Uint64).Load(), 10))
		bw.WriteByte('\n')
	}
	for _, c := range []struct {
		name, help string
		v          *atomic.Uint64
	}{
		{"store_errors", "Calls the store failed: UNAVAILABLE on an outage or timeout, INTERNAL otherwise.", &m.storeErrors},
		{"store_misconfigured", "Calls answered INTERNAL because the store is set up wrong (counted in store_errors too).", &m.storeMisconfigured},
		{"service_errors", "Calls refused as invalid (empty domain or no descriptors).", &m.serviceErrors},
		{"config_load_success", "Configurations loaded.", &m.configLoadSuccess},
		{"config_load_error", "Configurations refused (the previous one kept).", &m.configLoadError},
		{"global_shadow_mode", "Calls over the limit answered OK by the global shadow mode.", &m.globalShadowMode},
	} {
		header(bw, "ratelimit_rls_"+c.name, c.help)
		bw.WriteString("ratelimit_rls_" + c.name + " " + strconv.FormatUint(c.v.Load(), 10) + "\n")
	}
	return bw.Flush()
}

func header(w *bufio.Writer, name, help string) {
	w.WriteString("# HELP " + name + " " + help + "\n# TYPE " + name + " counter\n")
}

var labelEscaper = strings.NewReplacer(`\`, `\\`, `"`, `\"`, "\n", `\n`)

func escapeLabel(s string) string { return labelEscaper.Replace(s) }
