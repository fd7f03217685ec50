package xds

import (
	"testing"
	"time"
)

func TestBackoffWait(t *testing.T) {
	never := func() float64 { t.Fatal("jitter drawn"); return 0 }
	for _, c := range []struct {
		name string
		b    Backoff
		r    func() float64
		want []time.Duration
	}{
		// The reference's defaults: a factor below 1 never grows.
		{"defaults", DefaultBackoff, never, []time.Duration{10 * time.Second, 10 * time.Second, 10 * time.Second}},
		{"doubling", Backoff{Initial: time.Second, Max: 5 * time.Second, Factor: 2}, never,
			[]time.Duration{time.Second, 2 * time.Second, 4 * time.Second, 5 * time.Second, 5 * time.Second}},
		{"jitter at 0", Backoff{Initial: time.Second, Max: time.Minute, Factor: 2, Jitter: true}, func() float64 { return 0 },
			[]time.Duration{time.Second, time.Second, time.Second}},
		// Uniform between Initial and Initial×Factor^n (capped at Max).
		{"jitter at one half", Backoff{Initial: time.Second, Max: 5 * time.Second, Factor: 2, Jitter: true}, func() float64 { return 0.5 },
			[]time.Duration{time.Second, 1500 * time.Millisecond, 2500 * time.Millisecond, 3 * time.Second, 3 * time.Second}},
	} {
		for n, want := range c.want {
			if got := c.b.Wait(n, c.r); got != want {
				t.Errorf("%s: retry %d waits %v, want %v", c.name, n, got, want)
			}
		}
	}
	// A retry count far past the cap neither overflows nor goes below.
	b := Backoff{Initial: time.Second, Max: time.Hour, Factor: 10}
	if got := b.Wait(1000, nil); got != time.Hour {
		t.Errorf("retry 1000 waits %v", got)
	}
}
