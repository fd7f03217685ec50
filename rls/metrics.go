package rls

import (
	"bufio"
	"io"
	"iter"
	"math"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
)

// ruleStats are the reference's counters of one rule (or detailed key).
type ruleStats struct {
	totalHits, overLimit, nearLimit, withinLimit, shadowMode, overLimitLocalCache atomic.Uint64
}

// metrics are a Service's counters. The library keeps and bounds them;
// how they are exposed (names, labels, a Prometheus registry) is the
// caller's: see AllRuleCounts, AllDomainsNotFound and Counts.
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

// rule returns the counters of key, a rule's key in domain; dynamic says
// that a request made the key (a detailed_metric or value_to_metric
// value, a limit override), so that it counts against ruleSeries and
// folds into the domain's OtherRuleKey past it.
func (m *metrics) rule(domain, key string, dynamic bool) *ruleStats {
	if v, ok := m.rules.Load(key); ok {
		return v.(*ruleStats)
	}
	admitted := false
	if dynamic {
		if key, admitted = m.ruleSeries.label(key, OtherRuleKey(domain)); !admitted {
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
		domain, admitted = m.domainSeries.label(domain, otherSeries)
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
	// TotalHits counts every hit (hits_addend summed) on the rule;
	// OverLimit the hits past its limit, NearLimit those within it but
	// past the near-limit ratio, WithinLimit those within it (near ones
	// included), ShadowMode the over-limit hits of a shadow_mode rule
	// (answered OK).
	TotalHits, OverLimit, NearLimit, WithinLimit, ShadowMode uint64
	// OverLimitWithLocalCache counts the over-limit hits answered from
	// the refusal cache (included in OverLimit).
	OverLimitWithLocalCache uint64
}

func (r *ruleStats) counts() RuleCounts {
	return RuleCounts{
		TotalHits: r.totalHits.Load(), OverLimit: r.overLimit.Load(), NearLimit: r.nearLimit.Load(),
		WithinLimit: r.withinLimit.Load(), ShadowMode: r.shadowMode.Load(),
		OverLimitWithLocalCache: r.overLimitLocalCache.Load(),
	}
}

// RuleCounts returns the counters of the rule or metric key (a rule's
// FullKey, or the detailed key of a detailed_metric rule); zero when it has
// had no hits.
func (s *Service) RuleCounts(key string) RuleCounts {
	v, ok := s.metrics.rules.Load(key)
	if !ok {
		return RuleCounts{}
	}
	return v.(*ruleStats).counts()
}

// AllRuleCounts yields the counters of every rule that has been asked
// about, by stats key, as the reference names its stats: the domain and
// the descriptor's entries, "domain.key_value.key" (a rule's FullKey), or
// for detailed_metric and value_to_metric rules and limit overrides the
// request's values. Keys that requests name past WithMetricSeriesLimit
// are counted together under their domain's OtherRuleKey. The order is
// unspecified; each RuleCounts is read at the time it is yielded.
func (s *Service) AllRuleCounts() iter.Seq2[string, RuleCounts] {
	return func(yield func(string, RuleCounts) bool) {
		s.metrics.rules.Range(func(k, v any) bool {
			return yield(k.(string), v.(*ruleStats).counts())
		})
	}
}

// AllDomainsNotFound yields, for each domain that calls named and no
// configuration has, the descriptors asked about it (the reference's
// domain_not_found). Domains past WithMetricSeriesLimit are counted
// together under "(other)". The order is unspecified.
func (s *Service) AllDomainsNotFound() iter.Seq2[string, uint64] {
	return func(yield func(string, uint64) bool) {
		s.metrics.domainNotFound.Range(func(k, v any) bool {
			return yield(k.(string), v.(*atomic.Uint64).Load())
		})
	}
}

// OtherRuleKey is the stats key under which domain's rule keys named by
// requests are counted together past WithMetricSeriesLimit:
// "domain.(other)", so that it reads as one more rule of the domain.
func OtherRuleKey(domain string) string { return domain + "." + otherSeries }

// Counts are the counters of a Service as a whole.
type Counts struct {
	// StoreErrors counts the calls the store failed: UNAVAILABLE on an
	// outage or timeout, INTERNAL otherwise (the reference's
	// redis_error). StoreMisconfigured counts those of a store set up
	// wrong, among them.
	StoreErrors, StoreMisconfigured uint64
	// ServiceErrors counts the calls refused as invalid: an empty domain,
	// no descriptors, no configuration, too many descriptors, a limit
	// override without a unit (the reference's service_error).
	ServiceErrors uint64
	// ConfigLoadSuccess counts the configurations loaded (New and
	// SetConfig), ConfigLoadError those refused (ConfigLoadFailed).
	ConfigLoadSuccess, ConfigLoadError uint64
	// GlobalShadowMode counts the calls over a limit answered OK by
	// WithGlobalShadowMode.
	GlobalShadowMode uint64
}

// Counts returns the service's counters.
func (s *Service) Counts() Counts {
	m := &s.metrics
	return Counts{
		StoreErrors: m.storeErrors.Load(), StoreMisconfigured: m.storeMisconfigured.Load(),
		ServiceErrors:     m.serviceErrors.Load(),
		ConfigLoadSuccess: m.configLoadSuccess.Load(), ConfigLoadError: m.configLoadError.Load(),
		GlobalShadowMode: m.globalShadowMode.Load(),
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
// format (version 0.0.4), under this package's own names:
//
//	ratelimit_rls_total_hits{key="domain.key_value"} 12
//
// Per rule (key is the rule's stats key, see AllRuleCounts): total_hits,
// over_limit, near_limit, within_limit, shadow_mode and
// over_limit_with_local_cache; for the service: store_errors,
// store_misconfigured, service_errors, config_load_success,
// config_load_error, global_shadow_mode, and domain_not_found per domain.
//
// Deprecated: the names are not the reference's. `ratelimit rls` serves
// the reference's Prometheus names (ratelimit_service_rate_limit_total_hits
// {domain,key1,key2} and the rest, see docs/rls.md); a program of its own
// reads the counters with AllRuleCounts, AllDomainsNotFound and Counts
// and exposes them with the metrics library it uses.
func (s *Service) WriteMetrics(w io.Writer) error {
	bw := bufio.NewWriter(w)
	type kv struct {
		key string
		c   RuleCounts
	}
	var rules []kv
	for k, c := range s.AllRuleCounts() {
		rules = append(rules, kv{k, c})
	}
	slices.SortFunc(rules, func(a, b kv) int { return strings.Compare(a.key, b.key) })
	perRule := []struct {
		name, help string
		get        func(RuleCounts) uint64
	}{
		{"total_hits", "Hits on the rule (hits_addend summed).", func(r RuleCounts) uint64 { return r.TotalHits }},
		{"over_limit", "Hits over the rule's limit.", func(r RuleCounts) uint64 { return r.OverLimit }},
		{"near_limit", "Hits within the limit but above the near-limit ratio.", func(r RuleCounts) uint64 { return r.NearLimit }},
		{"within_limit", "Hits within the limit.", func(r RuleCounts) uint64 { return r.WithinLimit }},
		{"shadow_mode", "Hits over the limit of a shadow_mode rule (answered OK).", func(r RuleCounts) uint64 { return r.ShadowMode }},
		{"over_limit_with_local_cache", "Over-limit hits answered by the refusal cache.", func(r RuleCounts) uint64 { return r.OverLimitWithLocalCache }},
	}
	for _, c := range perRule {
		header(bw, "ratelimit_rls_"+c.name, c.help)
		for _, r := range rules {
			bw.WriteString("ratelimit_rls_" + c.name + `{key="` + escapeLabel(r.key) + `"} `)
			bw.WriteString(strconv.FormatUint(c.get(r.c), 10))
			bw.WriteByte('\n')
		}
	}
	type dv struct {
		domain string
		n      uint64
	}
	var domains []dv
	for d, n := range s.AllDomainsNotFound() {
		domains = append(domains, dv{d, n})
	}
	slices.SortFunc(domains, func(a, b dv) int { return strings.Compare(a.domain, b.domain) })
	header(bw, "ratelimit_rls_domain_not_found", "Descriptors asked about a domain no configuration has.")
	for _, d := range domains {
		bw.WriteString(`ratelimit_rls_domain_not_found{domain="` + escapeLabel(d.domain) + `"} `)
		bw.WriteString(strconv.FormatUint(d.n, 10))
		bw.WriteByte('\n')
	}
	n := s.Counts()
	for _, c := range []struct {
		name, help string
		v          uint64
	}{
		{"store_errors", "Calls the store failed: UNAVAILABLE on an outage or timeout, INTERNAL otherwise.", n.StoreErrors},
		{"store_misconfigured", "Calls answered INTERNAL because the store is set up wrong (counted in store_errors too).", n.StoreMisconfigured},
		{"service_errors", "Calls refused as invalid (empty domain or no descriptors).", n.ServiceErrors},
		{"config_load_success", "Configurations loaded.", n.ConfigLoadSuccess},
		{"config_load_error", "Configurations refused (the previous one kept).", n.ConfigLoadError},
		{"global_shadow_mode", "Calls over the limit answered OK by the global shadow mode.", n.GlobalShadowMode},
	} {
		header(bw, "ratelimit_rls_"+c.name, c.help)
		bw.WriteString("ratelimit_rls_" + c.name + " " + strconv.FormatUint(c.v, 10) + "\n")
	}
	return bw.Flush()
}

func header(w *bufio.Writer, name, help string) {
	w.WriteString("# HELP " + name + " " + help + "\n# TYPE " + name + " counter\n")
}

var labelEscaper = strings.NewReplacer(`\`, `\\`, `"`, `\"`, "\n", `\n`)

func escapeLabel(s string) string { return labelEscaper.Replace(s) }
