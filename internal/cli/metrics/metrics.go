// Package metrics is what the serving commands (proxy, rls) share to serve
// their counters to Prometheus: a registry that holds Go's runtime and
// process collectors beside the command's own, and its page on an address
// of its own, written by the Prometheus client library
// (github.com/prometheus/client_golang).
package metrics

import (
	"fmt"
	"log"
	"net"
	"net/http"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/smoothrate/ratelimit/internal/cli/serve"
)

// DefaultPath is where the page is served unless a command says otherwise.
const DefaultPath = "/metrics"

// NewRegistry returns a registry with Go's runtime collector (go_*) and
// the process collector (process_*), as the Prometheus client's default
// registry has them, and cs.
func NewRegistry(cs ...prometheus.Collector) (*prometheus.Registry, error) {
	reg := prometheus.NewRegistry()
	all := append([]prometheus.Collector{
		collectors.NewGoCollector(),
		collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}),
	}, cs...)
	for _, c := range all {
		if err := reg.Register(c); err != nil {
			return nil, fmt.Errorf("metrics: %w", err)
		}
	}
	return reg, nil
}

// Handler serves GET path (DefaultPath when empty): the registry's
// families in the format the scraper asks for, and
// promhttp_metric_handler_requests_total and _in_flight about the page
// itself, as promhttp.Handler does for the default registry. A collector
// that fails is logged on errLog and the rest is served.
func Handler(reg *prometheus.Registry, path string, errLog *log.Logger) http.Handler {
	if path == "" {
		path = DefaultPath
	}
	opts := promhttp.HandlerOpts{ErrorHandling: promhttp.ContinueOnError}
	if errLog != nil {
		opts.ErrorLog = errLog
	}
	mux := http.NewServeMux()
	mux.Handle("GET "+path, promhttp.InstrumentMetricHandler(reg, promhttp.HandlerFor(reg, opts)))
	return mux
}

// Server is the server of Handler(reg, path, errLog), logging its errors
// on errLog.
func Server(reg *prometheus.Registry, path string, errLog *log.Logger) *http.Server {
	return &http.Server{Handler: Handler(reg, path, errLog), ReadHeaderTimeout: serve.ReadHeaderTimeout, ErrorLog: errLog}
}

// Banner is what a command's start-up line says of its metrics on ln at
// path (DefaultPath when empty).
func Banner(ln net.Listener, path string) string {
	if path == "" {
		path = DefaultPath
	}
	return fmt.Sprintf(", metrics on http://%s%s", ln.Addr(), path)
}
