package rlqs

import (
	"math/rand/v2"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/smoothrate/ratelimit/internal/rlqstest"
)

// TestBound checks the bound of docs/rlqs.md on random histories: Envoys
// whose demands jump every few seconds, that leave (closing their
// streams) and join, on one bucket of R = 50/s. At every 100 ms, what all
// Envoys admitted since the start is at most R·T plus the capacities
// (max_tokens) of all the token buckets they applied. The Envoys deny
// without an assignment, so that everything they admit was assigned.
func TestBound(t *testing.T) {
	for seed := range uint64(4) {
		synctest.Test(t, func(t *testing.T) {
			runBound(t, rand.New(rand.NewPCG(seed, 11)))
		})
	}
}

func runBound(t *testing.T, rng *rand.Rand) {
	const R = 50.0
	h := newHarness(t, `
domain: edge
buckets:
  - bucket_id: {route: api}
    requests_per_unit: 50
    unit: second
`, nil)
	cfg := rlqstest.Config{NoAssignment: blanketStrategy(DenyAll)}
	start := time.Now()
	end := start.Add(30 * time.Second)
	var mu sync.Mutex
	demand := map[*rlqstest.Envoy]float64{}
	var envs []*rlqstest.Envoy
	stopped := map[*rlqstest.Envoy]bool{}
	add := func() {
		e := h.envoy(cfg)
		mu.Lock()
		envs = append(envs, e)
		demand[e] = rng.Float64() * 40
		mu.Unlock()
		h.load(e, api, func(time.Time) float64 {
			mu.Lock()
			defer mu.Unlock()
			if stopped[e] {
				return 0
			}
			return demand[e]
		}, end)
	}
	for range 3 {
		add()
	}
	worst := -1e9
	for now := time.Now(); now.Before(end); now = time.Now() {
		time.Sleep(100 * time.Millisecond)
		if rng.IntN(20) == 0 { // every 2 s on average
			mu.Lock()
			switch k := rng.IntN(6); {
			case k == 0 && len(envs) < 6:
				mu.Unlock()
				add()
				mu.Lock()
			case k == 1 && len(envs)-len(stopped) > 1:
				e := envs[rng.IntN(len(envs))]
				if !stopped[e] {
					stopped[e] = true
					go e.Close()
				}
			default:
				demand[envs[rng.IntN(len(envs))]] = rng.Float64() * 40
			}
			mu.Unlock()
		}
		mu.Lock()
		admitted, capacity := 0.0, 0.0
		for _, e := range envs {
			tot := e.Totals(api)
			admitted += float64(tot.Allowed)
			capacity += float64(tot.Capacity)
		}
		mu.Unlock()
		T := time.Since(start).Seconds()
		if excess := admitted - R*T; excess > capacity {
			t.Fatalf("at %.1f s: admitted %.0f > R·T %.0f + capacities %.0f", T, admitted, R*T, capacity)
		} else {
			worst = max(worst, excess-capacity)
		}
	}
	t.Logf("largest admitted − R·T − capacities: %.1f", worst)
}
