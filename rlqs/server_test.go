package rlqs

import (
	"testing"
	"testing/synctest"
	"time"

	"github.com/smoothrate/ratelimit/internal/rlqstest"
)

const apiConfig = `
domain: edge
buckets:
  - bucket_id: {route: api}
    requests_per_unit: 100
    unit: second
`

var api = map[string]string{"route": "api"}

func TestOneEnvoy(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h := newHarness(t, apiConfig, nil)
		e := h.envoy(rlqstest.Config{})
		start := time.Now()
		h.load(e, api, constant(300), start.Add(11*time.Second))
		time.Sleep(time.Second)
		got := allowedDuring(h.envs, api, func() { time.Sleep(10 * time.Second) })
		st := e.State(api)
		t.Logf("allowed %v in 10 s; state %+v; stats %+v", got, st, h.srv.Stats())
		if got[0] < 960 || got[0] > 1010 {
			t.Errorf("allowed %d in 10 s at 100/s", got[0])
		}
		h.wg.Wait()
	})
}

// TestUnequalDemands: four Envoys with unequal demands share one bucket's
// 100/s. Over 20 s of simulated time the fleet admits R within 5 %, and
// each Envoy its max-min share within 10 %: 10, 30, 30 and 30 of demands
// 10, 30, 60 and 90.
func TestUnequalDemands(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h := newHarness(t, apiConfig, nil)
		demands := []float64{10, 30, 60, 90}
		shares := []float64{10, 30, 30, 30}
		var envs []*rlqstest.Envoy
		for range demands {
			envs = append(envs, h.envoy(rlqstest.Config{}))
		}
		const T = 20 * time.Second
		got := allowedDuring(envs, api, func() {
			end := time.Now().Add(T)
			for i, e := range envs {
				h.load(e, api, constant(demands[i]), end)
			}
			h.wg.Wait()
		})
		total := 0.0
		for i, n := range got {
			total += float64(n)
			rate := float64(n) / T.Seconds()
			t.Logf("envoy %d: demand %v, admitted %.2f/s, share %v; %+v", i, demands[i], rate, shares[i], envs[i].Totals(api))
			if rate < shares[i]*0.9 || rate > shares[i]*1.1 {
				t.Errorf("envoy %d admitted %.2f/s, max-min share %v", i, rate, shares[i])
			}
		}
		if r := total / T.Seconds(); r < 95 || r > 105 {
			t.Errorf("the fleet admitted %.2f/s of 100/s", r)
		}
	})
}
