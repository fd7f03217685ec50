package rlqs

import (
	"context"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"

	"github.com/smoothrate/ratelimit/internal/rlqstest"
)

// harness is one or more Servers and Envoys on an in-memory network, run
// in a testing/synctest bubble (newHarness must be called inside one).
type harness struct {
	t     *testing.T
	net   rlqstest.Network
	srv   *Server
	grpc  *grpc.Server
	conns []*grpc.ClientConn
	envs  []*rlqstest.Envoy
	wg    sync.WaitGroup
}

func newHarness(t *testing.T, config string, store Store, opts ...Option) *harness {
	t.Helper()
	h := &harness{t: t}
	h.start(mustConfig(t, config), store, opts...)
	t.Cleanup(h.close)
	return h
}

// start serves a new Server on the network.
func (h *harness) start(cfg *Config, store Store, opts ...Option) {
	h.t.Helper()
	srv, err := New(cfg, store, opts...)
	if err != nil {
		h.t.Fatal(err)
	}
	h.srv = srv
	h.grpc = h.net.Serve(srv)
}

// stop shuts the Server down gracefully and stops its gRPC server as a
// program does: GracefulStop, which writes out what the streams sent.
func (h *harness) stop() {
	h.t.Helper()
	if err := h.srv.Shutdown(context.Background()); err != nil {
		h.t.Error(err)
	}
	h.grpc.GracefulStop()
}

// envoy makes an Envoy of the domain "edge" with a 1 s reporting interval
// unless cfg says otherwise.
func (h *harness) envoy(cfg rlqstest.Config) *rlqstest.Envoy {
	if cfg.Domain == "" {
		cfg.Domain = "edge"
	}
	conn := h.net.Dial()
	h.conns = append(h.conns, conn)
	e := rlqstest.New(conn, cfg)
	h.envs = append(h.envs, e)
	return e
}

func (h *harness) close() {
	h.wg.Wait()
	for _, e := range h.envs {
		e.Close()
	}
	for _, c := range h.conns {
		_ = c.Close()
	}
	if h.srv != nil {
		_ = h.srv.Shutdown(context.Background())
	}
	if h.grpc != nil {
		h.grpc.Stop()
	}
}

// load makes e send requests into id, evenly spaced at rate(now) per
// second, from now until end, in a goroutine of its own.
func (h *harness) load(e *rlqstest.Envoy, id map[string]string, rate func(time.Time) float64, end time.Time) {
	h.wg.Add(1)
	go func() {
		defer h.wg.Done()
		for now := time.Now(); now.Before(end); now = time.Now() {
			r := rate(now)
			if r <= 0 {
				time.Sleep(10 * time.Millisecond)
				continue
			}
			e.Request(id)
			time.Sleep(time.Duration(float64(time.Second) / r))
		}
	}()
}

func constant(r float64) func(time.Time) float64 { return func(time.Time) float64 { return r } }

// allowedDuring returns what each envoy allowed of id while f ran.
func allowedDuring(envs []*rlqstest.Envoy, id map[string]string, f func()) []uint64 {
	before := make([]uint64, len(envs))
	for i, e := range envs {
		before[i] = e.Totals(id).Allowed
	}
	f()
	out := make([]uint64, len(envs))
	for i, e := range envs {
		out[i] = e.Totals(id).Allowed - before[i]
	}
	return out
}
