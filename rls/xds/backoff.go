package xds

import (
	"errors"
	"math"
	"time"
)

// Backoff is the wait between the end of a stream to the xDS server and
// the next attempt, computed as the reference computes it (jpillora/backoff
// with its XDS_CLIENT_BACKOFF_* settings, whose README calls the factor
// "a factor by which the initial interval is multiplied"): the n-th
// consecutive retry (n from 0) waits Initial × Factor^n, at least Initial
// and at most Max; with Jitter, a uniformly random time between Initial
// and that. So a Factor of 1 or less, such as the reference's default
// 0.5, waits Initial every time, and a Factor of 2 doubles the wait at
// each retry up to Max.
//
// Unlike the reference, whose count of retries never goes down, a stream
// that delivered a response starts the count again from 0; and the jitter
// is drawn below the capped wait (the reference draws it below the
// uncapped one, then caps, so that past the cap it mostly waits Max).
type Backoff struct {
	Initial time.Duration // XDS_CLIENT_BACKOFF_INITIAL_INTERVAL
	Max     time.Duration // XDS_CLIENT_BACKOFF_MAX_INTERVAL
	Factor  float64       // XDS_CLIENT_BACKOFF_RANDOM_FACTOR
	Jitter  bool          // XDS_CLIENT_BACKOFF_JITTER
}

func (b Backoff) check() error {
	switch {
	case b.Initial <= 0:
		return errors.New("backoff: initial interval must be positive")
	case b.Max < b.Initial:
		return errors.New("backoff: max interval must not be below the initial interval")
	case !(b.Factor > 0) || math.IsInf(b.Factor, 1):
		return errors.New("backoff: factor must be positive and finite")
	}
	return nil
}

// Wait returns the wait before retry n (n ≥ 0), r drawing the jitter
// uniformly from [0, 1).
func (b Backoff) Wait(n int, r func() float64) time.Duration {
	minf, maxf := float64(b.Initial), float64(b.Max)
	d := minf * math.Pow(b.Factor, float64(n))
	if b.Jitter && d > minf {
		d = minf + r()*(min(d, maxf)-minf)
	}
	switch {
	case !(d >= minf): // NaN too
		return b.Initial
	case d >= maxf:
		return b.Max
	}
	return time.Duration(d)
}
