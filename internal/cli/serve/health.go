package serve

import (
	"io"
	"net/http"
	"sort"
	"strings"
	"sync"
	"sync/atomic"

	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
)

// Health is what a service reports on its HTTP health check and on the
// standard gRPC health service: serving while every condition it was told
// to wait for holds (the store answering, a first configuration) and it is
// not stopping, as envoyproxy/ratelimit's health checker holds its
// components. Stopping is for good: once a command is told to stop, its
// health stays failed while it drains. The zero value is not usable: make
// one with NewHealth. It is safe for concurrent use.
type Health struct {
	grpc     *health.Server
	services []string
	ok       atomic.Bool // read on every health check, without the lock

	mu       sync.Mutex
	unmet    map[string]bool
	stopping bool
}

// NewHealth returns a Health that is serving, reported for each of
// services on the gRPC health service (and for "", the server as a
// whole).
func NewHealth(services ...string) *Health {
	h := &Health{grpc: health.NewServer(), services: append([]string{""}, services...), unmet: map[string]bool{}}
	h.update()
	return h
}

// GRPC is the gRPC health service to register on the command's server.
func (h *Health) GRPC() *health.Server { return h.grpc }

// Set says whether condition holds. While any condition does not, the
// service is not serving.
func (h *Health) Set(condition string, holds bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if holds {
		delete(h.unmet, condition)
	} else {
		h.unmet[condition] = true
	}
	h.update()
}

// Stopping turns the health to failure for good: the command is stopping.
func (h *Health) Stopping() {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.stopping = true
	h.update()
}

// OK reports whether the service is serving.
func (h *Health) OK() bool { return h.ok.Load() }

// Unmet names what keeps the service from serving ("stopping" once it
// is), in order; empty while it serves.
func (h *Health) Unmet() []string {
	h.mu.Lock()
	defer h.mu.Unlock()
	var names []string
	for c := range h.unmet {
		names = append(names, c)
	}
	sort.Strings(names)
	if h.stopping {
		names = append(names, "stopping")
	}
	return names
}

// update publishes the state; h.mu is held.
func (h *Health) update() {
	ok := len(h.unmet) == 0 && !h.stopping
	h.ok.Store(ok)
	st := healthpb.HealthCheckResponse_NOT_SERVING
	if ok {
		st = healthpb.HealthCheckResponse_SERVING
	}
	for _, s := range h.services {
		h.grpc.SetServingStatus(s, st)
	}
}

// ServeHTTP answers a health check as envoyproxy/ratelimit's /healthcheck
// does: 200 "OK" while serving, else 500 (with what is awaited in the
// body, for a person reading it).
func (h *Health) ServeHTTP(w http.ResponseWriter, _ *http.Request) {
	if h.OK() {
		io.WriteString(w, "OK")
		return
	}
	w.WriteHeader(http.StatusInternalServerError)
	io.WriteString(w, "not serving: "+strings.Join(h.Unmet(), ", ")+"\n")
}
