package proxy

import (
	"sync/atomic"

	"github.com/prometheus/client_golang/prometheus"
)

// proxyMetrics are the proxy's counters: atomics on the hot path, read by
// Collect when the page is scraped.
type proxyMetrics struct {
	allowed, refused, storeErrors, backendErrors, connsRefused atomic.Int64
	// --queue and --dry-run (queue.go)
	heldForwarded, heldGone, dryRefused, dryHeld atomic.Int64
}

var (
	requestsDesc = prometheus.NewDesc("ratelimit_proxy_requests_total",
		"Requests by what the limiter decided: allowed (forwarded, including those let through while failing open) or refused (answered 429).",
		[]string{"decision"}, nil)
	storeErrorsDesc = prometheus.NewDesc("ratelimit_proxy_store_errors_total",
		"Requests whose limit could not be checked because the store (Redis) failed.", nil, nil)
	backendErrorsDesc = prometheus.NewDesc("ratelimit_proxy_backend_errors_total",
		"Requests the backend did not answer (answered 502, or 504 after --upstream-timeout).", nil, nil)
	connsRefusedDesc = prometheus.NewDesc("ratelimit_proxy_connections_refused_total",
		"Connections closed at once because their client already had --max-conns-per-client open.", nil, nil)
	heldDesc = prometheus.NewDesc("ratelimit_proxy_held_total",
		"Requests held (--queue) before being forwarded, and those whose client went away while held.",
		[]string{"outcome"}, nil)
	dryRunDesc = prometheus.NewDesc("ratelimit_proxy_dry_run_total",
		"With --dry-run: requests forwarded that would have been refused or held.",
		[]string{"would"}, nil)
)

// Describe sends the proxy's families' descriptions.
func (m *proxyMetrics) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{requestsDesc, storeErrorsDesc, backendErrorsDesc, connsRefusedDesc, heldDesc, dryRunDesc} {
		ch <- d
	}
}

// Collect reads the counters.
func (m *proxyMetrics) Collect(ch chan<- prometheus.Metric) {
	counter := func(d *prometheus.Desc, v int64, labelValues ...string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.CounterValue, float64(v), labelValues...)
	}
	counter(requestsDesc, m.allowed.Load(), "allowed")
	counter(requestsDesc, m.refused.Load(), "refused")
	counter(storeErrorsDesc, m.storeErrors.Load())
	counter(backendErrorsDesc, m.backendErrors.Load())
	counter(connsRefusedDesc, m.connsRefused.Load())
	counter(heldDesc, m.heldForwarded.Load(), "forwarded")
	counter(heldDesc, m.heldGone.Load(), "client_gone")
	counter(dryRunDesc, m.dryRefused.Load(), "refuse")
	counter(dryRunDesc, m.dryHeld.Load(), "hold")
}
