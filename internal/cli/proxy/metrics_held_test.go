package proxy

import (
	"context"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
)

// heldCounters reads ratelimit_proxy_held_total by outcome.
func heldCounters(t *testing.T, m *proxyMetrics) map[string]float64 {
	t.Helper()
	ch := make(chan prometheus.Metric, 32)
	m.Collect(ch)
	close(ch)
	out := map[string]float64{}
	for mt := range ch {
		if mt.Desc() != heldDesc {
			continue
		}
		var pb dto.Metric
		if err := mt.Write(&pb); err != nil {
			t.Fatal(err)
		}
		out[pb.GetLabel()[0].GetValue()] = pb.GetCounter().GetValue()
	}
	return out
}

// TestHeldForwardedNeverGoesDown: held_total{outcome="forwarded"} counts
// a held request once it is forwarded, so it never goes down: it counted
// it when it began to wait, less those whose client had gone, and went
// down when a client left (Prometheus reads that as a reset).
func TestHeldForwardedNeverGoesDown(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h, m, _ := queueServer(t, "--limit", "10/s", "--burst", "1", "--queue", "1")
		send(h, context.Background())
		ctx, cancel := context.WithCancel(context.Background())
		var wg sync.WaitGroup
		wg.Go(func() { send(h, ctx) })
		time.Sleep(30 * time.Millisecond) // held until 100 ms
		during := heldCounters(t, m)
		cancel()
		wg.Wait()
		after := heldCounters(t, m)
		if during["forwarded"] != 0 || after["forwarded"] != 0 || after["client_gone"] != 1 {
			t.Errorf("while held: %v; after its client left: %v; want nothing forwarded, one gone", during, after)
		}
	})
}
