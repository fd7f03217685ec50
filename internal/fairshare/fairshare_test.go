package fairshare

import (
	"math"
	"math/rand/v2"
	"testing"
)

func TestShares(t *testing.T) {
	inf := math.Inf(1)
	for _, tc := range []struct {
		name    string
		rate    float64
		demands []float64
		want    []float64
	}{
		{"none", 10, nil, []float64{}},
		{"one wants less: gets it and the spare", 10, []float64{4}, []float64{10}},
		{"uncontended: spare spread evenly", 90, []float64{10, 20, 30}, []float64{20, 30, 40}},
		{"contended: small ones met, the rest split", 100, []float64{10, 60, 80}, []float64{10, 45, 45}},
		{"all above an equal split", 90, []float64{50, 60, 70}, []float64{30, 30, 30}},
		{"unknown demand is infinite", 100, []float64{inf, 20}, []float64{80, 20}},
		{"exactly the rate", 30, []float64{10, 20}, []float64{10, 20}},
		{"negative and NaN count as zero", 10, []float64{-1, math.NaN()}, []float64{5, 5}},
		{"zero rate", 0, []float64{1, 2}, []float64{0, 0}},
	} {
		got := Shares(tc.rate, tc.demands, nil)
		if len(got) != len(tc.want) {
			t.Fatalf("%s: %v, want %v", tc.name, got, tc.want)
		}
		for i := range got {
			if math.Abs(got[i]-tc.want[i]) > 1e-9 {
				t.Errorf("%s: %v, want %v", tc.name, got, tc.want)
				break
			}
		}
	}
}

// TestSharesAreMaxMin checks the defining properties on random inputs:
// the shares sum to the rate; no share exceeds its demand when the rate is
// contended; and no share could grow without shrinking one that is no
// larger (every share below its demand is the largest share).
func TestSharesAreMaxMin(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	for range 2000 {
		n := 1 + rng.IntN(20)
		demands := make([]float64, n)
		sum := 0.0
		for i := range demands {
			demands[i] = rng.ExpFloat64() * 10
			sum += demands[i]
		}
		rate := rng.Float64() * 2 * sum
		s := Shares(rate, demands, nil)
		total, top := 0.0, 0.0
		for _, x := range s {
			total += x
			top = max(top, x)
		}
		if math.Abs(total-rate) > 1e-9*max(1, rate) {
			t.Fatalf("demands %v rate %v: shares %v sum to %v", demands, rate, s, total)
		}
		if rate >= sum {
			continue
		}
		for i, x := range s {
			if x > demands[i]+1e-9 {
				t.Fatalf("share %v above demand %v", x, demands[i])
			}
			if x < demands[i]-1e-9 && x < top-1e-9 {
				t.Fatalf("demands %v rate %v: share %d (%v) is below its demand and below another share (%v)", demands, rate, i, x, top)
			}
		}
	}
}

func TestLevel(t *testing.T) {
	if l, r := Level(10, []float64{1, 2}); !math.IsInf(l, 1) || r != 7 {
		t.Errorf("Level = %v, %v; want +Inf, 7", l, r)
	}
	if l, r := Level(10, []float64{1, 20, 30}); l != 4.5 || r != 9 {
		t.Errorf("Level = %v, %v; want 4.5, 9", l, r)
	}
}
