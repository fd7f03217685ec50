package rlqs

import (
	"math"
	"math/rand/v2"
	"testing"
	"time"
)

func TestEncodeRate(t *testing.T) {
	for _, tc := range []struct {
		rate  float64
		burst time.Duration
		want  tokenBucket
	}{
		{100, time.Second, tokenBucket{maxTokens: 100, tokensPerFill: 100, fillInterval: time.Second}},
		{1234.5, 250 * time.Millisecond, tokenBucket{maxTokens: 308, tokensPerFill: 1234, fillInterval: time.Second}},
		{33.3, 0, tokenBucket{maxTokens: 1, tokensPerFill: 333, fillInterval: 10 * time.Second}},
		{5.0 / 60, 250 * time.Millisecond, tokenBucket{maxTokens: 1, tokensPerFill: 833, fillInterval: 10000 * time.Second}},
		{1e-5, 0, tokenBucket{maxTokens: 1, tokensPerFill: 10, fillInterval: 1e6 * time.Second}},
	} {
		got, ok := encodeRate(tc.rate, tc.burst, tokenBucket{})
		if !ok || got != tc.want {
			t.Errorf("encodeRate(%v, %v) = %+v, %v; want %+v", tc.rate, tc.burst, got, ok, tc.want)
		}
	}
	for _, r := range []float64{0, -1, math.NaN(), 1e-7} {
		if tb, ok := encodeRate(r, time.Second, tokenBucket{}); ok {
			t.Errorf("encodeRate(%v) = %+v, want none (DENY_ALL)", r, tb)
		}
	}
}

// TestEncodeRateBounds: on random rates, the bucket's rate is never above
// the one asked for, and within 1 % of it from 1e-4 requests per second;
// the fill interval is whole seconds.
func TestEncodeRateBounds(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	for range 100000 {
		r := math.Pow(10, rng.Float64()*12-4)
		tb, ok := encodeRate(r, time.Duration(rng.IntN(2000))*time.Millisecond, tokenBucket{})
		if !ok {
			t.Fatalf("rate %v: none", r)
		}
		if got := tb.rate(); got > r || got < r*0.99 {
			t.Fatalf("rate %v: bucket %+v runs at %v", r, tb, got)
		}
		if tb.fillInterval%time.Second != 0 || tb.maxTokens < 1 {
			t.Fatalf("rate %v: bucket %+v", r, tb)
		}
	}
}

// TestEncodeRateEnvoyTellsApart: a bucket whose rate differs from the one
// before always differs in what Envoy compares (max_tokens,
// tokens_per_fill, the nanoseconds of fill_interval), or Envoy would keep
// running the old one.
func TestEncodeRateEnvoyTellsApart(t *testing.T) {
	prev, _ := encodeRate(50, 0, tokenBucket{}) // 50 per 1 s, max 1
	next, ok := encodeRate(5, 0, prev)          // 500 per 10 s would look the same
	if !ok || next.sameForEnvoy(prev) || next.rate() > 5 {
		t.Fatalf("prev %+v, next %+v", prev, next)
	}
	prev = tokenBucket{maxTokens: 1, tokensPerFill: 1, fillInterval: 1e6 * time.Second}
	next, _ = encodeRate(1.5e-6, 0, prev) // 1 per 10^6 s again, but other seconds
	if next.sameForEnvoy(prev) && next.fillInterval != prev.fillInterval {
		t.Fatalf("prev %+v, next %+v", prev, next)
	}
	rng := rand.New(rand.NewPCG(5, 6))
	for range 100000 {
		burst := time.Duration(rng.IntN(3)) * 100 * time.Millisecond
		prev, _ := encodeRate(math.Pow(10, rng.Float64()*6-3), burst, tokenBucket{})
		next, ok := encodeRate(math.Pow(10, rng.Float64()*6-3), burst, prev)
		if ok && next.sameForEnvoy(prev) && next.rate() != prev.rate() {
			t.Fatalf("prev %+v (%v/s), next %+v (%v/s)", prev, prev.rate(), next, next.rate())
		}
	}
}
