package httplimit

import (
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/smoothrate/ratelimit/throttle"
)

// TestDecisionHandler: the handler gets every decided request, with each
// limit's key and decision in order and the headers already set, in place
// of the middleware's own answer; the refusal hook is not called.
func TestDecisionHandler(t *testing.T) {
	clk := newTestClock()
	store := storeOn(clk)
	perIP := newLimiterOn(t, store, throttle.GCRA, throttle.Limit{Count: 2, Period: 60e9})
	perRoute := newLimiterOn(t, store, throttle.GCRA, throttle.Limit{Count: 5, Period: 60e9})
	type call struct {
		keys    []string
		allowed []bool
		policy  string
	}
	var calls []call
	refusals := 0
	mw, err := New(perIP,
		WithLimit("route", perRoute, Route()),
		WithRefusalHook(func(*http.Request, throttle.Decision) { refusals++ }),
		WithDecisionHandler(func(w http.ResponseWriter, r *http.Request, next http.Handler, keys []string, ds []throttle.Decision) {
			c := call{keys: keys, policy: w.Header().Get("RateLimit-Policy")}
			for _, d := range ds {
				c.allowed = append(c.allowed, d.Allowed)
			}
			calls = append(calls, c)
			if throttle.Decisions(ds).Allowed() {
				next.ServeHTTP(w, r)
				return
			}
			w.WriteHeader(http.StatusServiceUnavailable) // its own answer
		}))
	if err != nil {
		t.Fatal(err)
	}
	var backend ok
	h := mw(&backend)
	codes := []int{}
	for range 3 {
		w := httptest.NewRecorder()
		r := httptest.NewRequest("GET", "/a", nil)
		r.RemoteAddr = "192.0.2.7:4000"
		h.ServeHTTP(w, r)
		codes = append(codes, w.Code)
	}
	if want := []int{200, 200, 503}; codes[0] != want[0] || codes[1] != want[1] || codes[2] != want[2] {
		t.Errorf("codes %v, want %v", codes, want)
	}
	if len(calls) != 3 || backend.calls.Load() != 2 || refusals != 0 {
		t.Fatalf("%d calls, %d reached the backend, %d refusal hooks; want 3, 2, 0", len(calls), backend.calls.Load(), refusals)
	}
	last := calls[2]
	if len(last.keys) != 2 || last.keys[0] != "default:192.0.2.7" || last.keys[1] != "route:/a" {
		t.Errorf("keys %q", last.keys)
	}
	if len(last.allowed) != 2 || last.allowed[0] || !last.allowed[1] {
		t.Errorf("decisions allowed %v, want [false true]", last.allowed)
	}
	if last.policy == "" {
		t.Error("RateLimit-Policy not set when the handler runs")
	}
	if _, err := New(perIP, WithDecisionHandler(nil)); err == nil {
		t.Error("a nil decision handler accepted")
	}
}
