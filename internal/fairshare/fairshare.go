// Package fairshare is max-min fairness (water filling): how a rate is
// split among claimants that each want some part of it. Whoever wants less
// than an equal split gets what it wants; the others share what is left
// equally; a rate nobody wants is spread evenly over everyone. Package
// distributed's lease script splits a fleet's rate among processes with
// it (WaterLevelLua), and package rlqs splits a bucket's limit among the
// Envoys that report it (Level and Shares in Go, WaterLevelLua in its
// Redis script), so that both answer the same question the same way.
package fairshare

import (
	_ "embed"
	"math"
	"slices"
)

// WaterLevelLua defines the Lua function waterLevel(hist, rate) →
// claimants, level, remaining: Level over a histogram of demands in
// buckets of 1/16 octave (a demand d counts as 2^(k/16), k the nearest
// integer to 16·log2(d)), as Redis's HGETALL returns it. Scripts that use
// it put it before their own source.
//
//go:embed waterlevel.lua
var WaterLevelLua string

// Level returns the water level of max-min fair sharing of rate among
// demands: +Inf when the demands sum to no more than rate, and then
// remaining is the rate left over; otherwise the level L at which every
// demand capped at L sums to rate (remaining is then the rate left for
// the demands at or above L). A negative or NaN demand counts as 0, and so
// does a negative or NaN rate.
func Level(rate float64, demands []float64) (level, remaining float64) {
	rate = clean(rate)
	sorted := make([]float64, len(demands))
	for i, d := range demands {
		sorted[i] = clean(d)
	}
	slices.Sort(sorted)
	remaining = rate
	for k, d := range sorted {
		if l := remaining / float64(len(sorted)-k); d > l {
			return l, remaining
		}
		remaining -= d
	}
	return math.Inf(1), max(remaining, 0)
}

// Shares writes into out (grown as needed, and returned) each demand's
// max-min fair share of rate: min(demand, level) when the demands exceed
// the rate together, otherwise the demand plus an equal part of what is
// left over. The shares sum to rate (within rounding) unless demands is
// empty.
func Shares(rate float64, demands []float64, out []float64) []float64 {
	out = slices.Grow(out[:0], len(demands))[:len(demands)]
	level, remaining := Level(rate, demands)
	spare := 0.0
	if math.IsInf(level, 1) && len(demands) > 0 {
		spare = remaining / float64(len(demands))
	}
	for i, d := range demands {
		d = clean(d)
		if math.IsInf(level, 1) {
			out[i] = d + spare
		} else {
			out[i] = min(d, level)
		}
	}
	return out
}

func clean(x float64) float64 {
	if !(x > 0) {
		return 0
	}
	return x
}
