package keyopt

import (
	"testing"
	"time"

	"github.com/smoothrate/ratelimit/throttle"
)

func TestFields(t *testing.T) {
	store, err := throttle.NewMemoryStore()
	if err != nil {
		t.Fatal(err)
	}
	perSec, err := throttle.New(store, throttle.GCRA, throttle.PerSecond(10))
	if err != nil {
		t.Fatal(err)
	}
	odd, err := throttle.New(store, throttle.GCRA, throttle.Limit{Count: 3, Period: 1500 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	limits := []Limit[part]{{Name: "a", Lim: perSec}, {Name: "b", Lim: odd}}
	// A period that is not whole seconds is rounded up, q unchanged.
	if got, want := Policy(limits), `"a";q=10;w=1, "b";q=3;w=2`; got != want {
		t.Errorf("Policy = %s, want %s", got, want)
	}
	q := Quoted(limits)
	ds := []throttle.Decision{
		{Allowed: true, Remaining: 4, ResetAfter: 1100 * time.Millisecond, RetryAfter: 0},
		{Allowed: false, Remaining: -1, RetryAfter: 300 * time.Millisecond},
	}
	if got, want := string(AppendRateLimit(nil, q, ds, true)), `"a";r=4;t=2, "b";r=0;t=0`; got != want {
		t.Errorf("passed: %s, want %s", got, want)
	}
	// Refused: t only on the limit that refused, at least 1.
	if got, want := string(AppendRateLimit(nil, q, ds, false)), `"a";r=4, "b";r=0;t=1`; got != want {
		t.Errorf("refused: %s, want %s", got, want)
	}
	ds[1].RetryAfter = throttle.Never
	if got, want := string(AppendRateLimit(nil, q, ds, false)), `"a";r=4, "b";r=0`; got != want {
		t.Errorf("never passes: %s, want %s", got, want)
	}
	for d, want := range map[time.Duration]int64{-time.Second: 0, 0: 0, 1: 1, time.Second: 1, time.Second + 1: 2} {
		if got := CeilSeconds(d); got != want {
			t.Errorf("CeilSeconds(%v) = %d, want %d", d, got, want)
		}
	}
}
