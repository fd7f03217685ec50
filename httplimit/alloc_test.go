package httplimit

import (
	"context"
	"net/http"
	"net/http/httptest"
	"regexp"
	"testing"
	"time"

	"github.com/smoothrate/ratelimit/throttle"
)

// TestAllocations holds the middleware to its budget: at most two
// allocations per allowed request on top of the handler's own.
func TestAllocations(t *testing.T) {
	lim := newLimiterOn(t, memStore(), throttle.GCRA, throttle.Limit{Count: 1 << 30, Period: time.Second})
	for name, opts := range map[string][]Option{
		"ip":                 nil,
		"ipv6":               nil,
		"trusted proxy":      {WithTrustedProxies("10.0.0.0/8")},
		"x-ratelimit fields": {WithXRateLimitHeaders()},
	} {
		t.Run(name, func(t *testing.T) {
			backend := &ok{}
			mw, err := New(lim, opts...)
			if err != nil {
				t.Fatal(err)
			}
			h := mw(backend)
			r := httptest.NewRequest("GET", "/", nil)
			r.RemoteAddr = "192.0.2.1:1"
			if name == "ipv6" {
				r.RemoteAddr = "[2001:db8::1]:1"
			}
			if name == "trusted proxy" {
				r.RemoteAddr = "10.0.0.1:1"
				r.Header.Set("X-Forwarded-For", "6.6.6.6, 198.51.100.4")
			}
			w := &discard{h: http.Header{}}
			h.ServeHTTP(w, r) // the key exists from now on
			base := testing.AllocsPerRun(200, func() { clear(w.h); backend.ServeHTTP(w, r) })
			with := testing.AllocsPerRun(200, func() { clear(w.h); h.ServeHTTP(w, r) })
			t.Logf("base %v with %v", base, with)
			if with-base > 2 {
				t.Errorf("%v allocations added per request, want at most 2", with-base)
			}
		})
	}
}

// TestAllocationsSeveralLimits: with several limits the middleware still
// adds two allocations (all keys share one, the headers one) to what
// throttle.AllowAll itself costs.
func TestAllocationsSeveralLimits(t *testing.T) {
	store := memStore()
	l := throttle.Limit{Count: 1 << 30, Period: time.Second}
	lims := []*throttle.Limiter{newLimiterOn(t, store, throttle.GCRA, l), newLimiterOn(t, store, throttle.GCRA, l), newLimiterOn(t, store, throttle.GCRA, l)}
	backend := &ok{}
	mw, err := New(lims[0], WithLimit("route", lims[1], IP(), Route()), WithLimit("global", lims[2], Global()))
	if err != nil {
		t.Fatal(err)
	}
	h := mw(backend)
	r := httptest.NewRequest("GET", "/a", nil)
	r.RemoteAddr = "192.0.2.1:1"
	w := &discard{h: http.Header{}}
	h.ServeHTTP(w, r)
	if got := w.h.Get("RateLimit"); !regexp.MustCompile(`^"default";r=\d+;t=\d+, "route";r=\d+;t=\d+, "global";r=\d+;t=\d+$`).MatchString(got) {
		t.Fatalf("RateLimit %q", got)
	}
	checks := []throttle.Check{{Limiter: lims[0], Key: "default:192.0.2.1", N: 1}, {Limiter: lims[1], Key: "route:192.0.2.1|/a", N: 1}, {Limiter: lims[2], Key: "global:*", N: 1}}
	ctx := context.Background()
	base := testing.AllocsPerRun(200, func() { _, _ = throttle.AllowAll(ctx, checks...) })
	with := testing.AllocsPerRun(200, func() { clear(w.h); h.ServeHTTP(w, r) })
	t.Logf("AllowAll alone %v allocations, through the middleware %v", base, with)
	if with-base > 2 {
		t.Errorf("%v allocations added to AllowAll's, want at most 2", with-base)
	}
}

// discard is a ResponseWriter that keeps its header map between requests,
// so that AllocsPerRun sees the middleware's allocations only.
type discard struct{ h http.Header }

func (d *discard) Header() http.Header         { return d.h }
func (d *discard) Write(b []byte) (int, error) { return len(b), nil }
func (d *discard) WriteHeader(int)             {}
