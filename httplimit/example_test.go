package httplimit_test

import (
	"fmt"
	"log"
	"net/http"
	"net/http/httptest"

	"github.com/smoothrate/ratelimit/clocktest"
	"github.com/smoothrate/ratelimit/httplimit"
	"github.com/smoothrate/ratelimit/throttle"
)

// Two requests per minute per client IP, in front of a handler. In a real
// program the last lines are http.ListenAndServe(":8080", limit(hello)).
func Example() {
	store, err := throttle.NewMemoryStore()
	if err != nil {
		log.Fatal(err)
	}
	lim, err := throttle.New(store, throttle.GCRA, throttle.PerMinute(2))
	if err != nil {
		log.Fatal(err)
	}
	limit, err := httplimit.New(lim)
	if err != nil {
		log.Fatal(err)
	}
	hello := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { fmt.Fprintln(w, "hello") })
	h := limit(hello)

	for range 3 {
		w := httptest.NewRecorder()
		h.ServeHTTP(w, httptest.NewRequest("GET", "/", nil))
		fmt.Println(w.Code, w.Header().Get("RateLimit-Policy"), w.Header().Get("Retry-After") != "")
	}
	// Output:
	// 200 "default";q=2;w=60 false
	// 200 "default";q=2;w=60 false
	// 429 "default";q=2;w=60 true
}

// Per client and, more strictly, per client and route; exports cost 5.
// Behind a load balancer at 10.0.0.0/8 that appends to X-Forwarded-For.
// (The fake clock keeps the printed seconds exact; a server leaves it out.)
func ExampleWithLimit() {
	store, _ := throttle.NewMemoryStore(throttle.WithStoreClock(clocktest.NewFake()))
	perClient, _ := throttle.New(store, throttle.GCRA, throttle.PerMinute(100))
	perRoute, _ := throttle.New(store, throttle.GCRA, throttle.PerMinute(10))
	limit, err := httplimit.New(perClient,
		httplimit.WithName("client"),
		httplimit.WithLimit("route", perRoute, httplimit.IP(), httplimit.Route()),
		httplimit.WithCost(func(r *http.Request) int {
			if r.URL.Path == "/export" {
				return 5
			}
			return 1
		}),
		httplimit.WithTrustedProxies("10.0.0.0/8"),
	)
	if err != nil {
		log.Fatal(err)
	}
	h := limit(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {}))
	for range 3 {
		r := httptest.NewRequest("GET", "/export", nil)
		r.RemoteAddr = "10.1.2.3:5555"
		r.Header.Set("X-Forwarded-For", "203.0.113.50")
		w := httptest.NewRecorder()
		h.ServeHTTP(w, r)
		fmt.Println(w.Code, w.Header().Get("RateLimit"))
	}
	// Output:
	// 200 "client";r=95;t=3, "route";r=5;t=30
	// 200 "client";r=90;t=6, "route";r=0;t=60
	// 429 "client";r=90, "route";r=0;t=30
}
