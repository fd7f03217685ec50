package proxy

import (
	"io"
	"sync/atomic"

	"github.com/smoothrate/ratelimit/internal/cli/metrics"
)

// proxyMetrics are the proxy's counters, served in the Prometheus text
// format (version 0.0.4) without a client library: a few counters do not
// justify a dependency.
type proxyMetrics struct {
	allowed, refused, storeErrors, backendErrors, connsRefused atomic.Int64
	// --queue and --dry-run (queue.go)
	held, heldGone, dryRefused, dryHeld atomic.Int64
}

// write writes the counters in the Prometheus text format.
func (m *proxyMetrics) write(out io.Writer) {
	w := metrics.Writer{W: out}
	w.Family("ratelimit_proxy_requests_total", "counter", "Requests by what the limiter decided: allowed (forwarded, including those let through while failing open) or refused (answered 429).")
	w.Sample(`ratelimit_proxy_requests_total{decision="allowed"}`, m.allowed.Load())
	w.Sample(`ratelimit_proxy_requests_total{decision="refused"}`, m.refused.Load())
	w.Family("ratelimit_proxy_store_errors_total", "counter", "Requests whose limit could not be checked because the store (Redis) failed.")
	w.Sample("ratelimit_proxy_store_errors_total", m.storeErrors.Load())
	w.Family("ratelimit_proxy_backend_errors_total", "counter", "Requests the backend did not answer (answered 502, or 504 after --upstream-timeout).")
	w.Sample("ratelimit_proxy_backend_errors_total", m.backendErrors.Load())
	w.Family("ratelimit_proxy_connections_refused_total", "counter", "Connections closed at once because their client already had --max-conns-per-client open.")
	w.Sample("ratelimit_proxy_connections_refused_total", m.connsRefused.Load())
	w.Family("ratelimit_proxy_held_total", "counter", "Requests held (--queue) before being forwarded, and those whose client went away while held.")
	w.Sample(`ratelimit_proxy_held_total{outcome="forwarded"}`, m.held.Load()-m.heldGone.Load())
	w.Sample(`ratelimit_proxy_held_total{outcome="client_gone"}`, m.heldGone.Load())
	w.Family("ratelimit_proxy_dry_run_total", "counter", "With --dry-run: requests forwarded that would have been refused or held.")
	w.Sample(`ratelimit_proxy_dry_run_total{would="refuse"}`, m.dryRefused.Load())
	w.Sample(`ratelimit_proxy_dry_run_total{would="hold"}`, m.dryHeld.Load())
}
