package main

import (
	"fmt"
	"net/http"
	"sync/atomic"
)

// proxyMetrics are the proxy's counters, served in the Prometheus text
// format (version 0.0.4) without a client library: a few counters do not
// justify a dependency.
type proxyMetrics struct {
	allowed, refused, storeErrors, backendErrors, connsRefused atomic.Int64
	// --queue and --dry-run (proxy_queue.go)
	held, heldGone, dryRefused, dryHeld atomic.Int64
}

func (m *proxyMetrics) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("Content-Type", "text/plain; version=0.0.4; charset=utf-8")
	fmt.Fprintf(w, `# HELP ratelimit_proxy_requests_total Requests by what the limiter decided: allowed (forwarded, including those let through while failing open) or refused (answered 429).
# TYPE ratelimit_proxy_requests_total counter
ratelimit_proxy_requests_total{decision="allowed"} %d
ratelimit_proxy_requests_total{decision="refused"} %d
# HELP ratelimit_proxy_store_errors_total Requests whose limit could not be checked because the store (Redis) failed.
# TYPE ratelimit_proxy_store_errors_total counter
ratelimit_proxy_store_errors_total %d
# HELP ratelimit_proxy_backend_errors_total Requests the backend did not answer (answered 502, or 504 after --upstream-timeout).
# TYPE ratelimit_proxy_backend_errors_total counter
ratelimit_proxy_backend_errors_total %d
# HELP ratelimit_proxy_connections_refused_total Connections closed at once because their client already had --max-conns-per-client open.
# TYPE ratelimit_proxy_connections_refused_total counter
ratelimit_proxy_connections_refused_total %d
# HELP ratelimit_proxy_held_total Requests held (--queue) before being forwarded, and those whose client went away while held.
# TYPE ratelimit_proxy_held_total counter
ratelimit_proxy_held_total{outcome="forwarded"} %d
ratelimit_proxy_held_total{outcome="client_gone"} %d
# HELP ratelimit_proxy_dry_run_total With --dry-run: requests forwarded that would have been refused or held.
# TYPE ratelimit_proxy_dry_run_total counter
ratelimit_proxy_dry_run_total{would="refuse"} %d
ratelimit_proxy_dry_run_total{would="hold"} %d
`, m.allowed.Load(), m.refused.Load(), m.storeErrors.Load(), m.backendErrors.Load(), m.connsRefused.Load(),
		m.held.Load()-m.heldGone.Load(), m.heldGone.Load(), m.dryRefused.Load(), m.dryHeld.Load())
}
