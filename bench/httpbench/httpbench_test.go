package httpbench

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"runtime"
	"sync/atomic"
	"testing"
	"time"

	"github.com/didip/tollbooth/v7"
	"github.com/go-chi/httprate"
	sethhttplimit "github.com/sethvargo/go-limiter/httplimit"
	"github.com/sethvargo/go-limiter/memorystore"
	ulule "github.com/ulule/limiter/v3"
	"github.com/ulule/limiter/v3/drivers/middleware/stdlib"
	ululememory "github.com/ulule/limiter/v3/drivers/store/memory"

	"github.com/smoothrate/ratelimit/httplimit"
	"github.com/smoothrate/ratelimit/throttle"
)

// clients is how many distinct client IPs the requests cycle through.
const clients = 10_000

// addrs are the clients' RemoteAddrs. The benchmarks reuse one request and
// set its RemoteAddr from these: a server hands the middleware a request it
// has just parsed, hot in the cache; cycling through 10 000 cold request
// objects would measure cache misses that every middleware pays alike.
func addrs() []string {
	as := make([]string, clients)
	for i := range as {
		as[i] = fmt.Sprintf("10.%d.%d.%d:40000", i>>16, i>>8&0xff, i&0xff)
	}
	return as
}

func request() *http.Request {
	r := httptest.NewRequest("GET", "/api/items", nil)
	r.Header.Set("User-Agent", "bench")
	r.Header.Set("Accept", "*/*")
	return r
}

// writer is a ResponseWriter that keeps its header map from one request to
// the next (cleared), so that the benchmarks measure the middleware, not
// httptest.ResponseRecorder's allocations.
type writer struct {
	h    http.Header
	code int
}

func (w *writer) Header() http.Header         { return w.h }
func (w *writer) Write(b []byte) (int, error) { return len(b), nil }
func (w *writer) WriteHeader(code int)        { w.code = code }

var body = []byte("ok")

// app is the handler every middleware wraps.
var app = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { _, _ = w.Write(body) })

// middlewares builds each library's middleware with a limit no request
// reaches, keyed by client IP (RemoteAddr), and state that lives for the
// whole run (hour-long windows, or a bucket that takes hours to refill):
// with a limit that refills within microseconds a store may rightly
// forget a key between two of its requests, and the benchmark would
// measure key creation instead of the steady state of a busy server.
var middlewares = []struct {
	name string
	wrap func(b *testing.B, h http.Handler) http.Handler
}{
	{"none", func(b *testing.B, h http.Handler) http.Handler { return h }},
	{"ours", func(b *testing.B, h http.Handler) http.Handler {
		st, err := throttle.NewMemoryStore()
		if err != nil {
			b.Fatal(err)
		}
		lim, err := throttle.New(st, throttle.GCRA, throttle.Limit{Count: 1000, Period: 1000 * time.Second, Burst: 1 << 30})
		if err != nil {
			b.Fatal(err)
		}
		mw, err := httplimit.New(lim)
		if err != nil {
			b.Fatal(err)
		}
		return mw(h)
	}},
	{"httprate", func(b *testing.B, h http.Handler) http.Handler {
		return httprate.LimitByIP(1<<30, time.Hour)(h)
	}},
	{"ulule", func(b *testing.B, h http.Handler) http.Handler {
		lim := ulule.New(ululememory.NewStore(), ulule.Rate{Period: time.Hour, Limit: 1 << 30})
		return stdlib.NewMiddleware(lim).Handler(h)
	}},
	{"sethvargo", func(b *testing.B, h http.Handler) http.Handler {
		store, err := memorystore.New(&memorystore.Config{Tokens: 1 << 30, Interval: time.Hour})
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { _ = store.Close(context.Background()) })
		mw, err := sethhttplimit.NewMiddleware(store, sethhttplimit.IPKeyFunc())
		if err != nil {
			b.Fatal(err)
		}
		return mw.Handle(h)
	}},
	{"tollbooth", func(b *testing.B, h http.Handler) http.Handler {
		lmt := tollbooth.NewLimiter(1<<30, nil)
		lmt.SetIPLookups([]string{"RemoteAddr"})
		return tollbooth.LimitHandler(lmt, h)
	}},
}

// BenchmarkMiddleware is one request through each middleware, clients
// taking turns; every request is allowed (checked after warming up).
func BenchmarkMiddleware(b *testing.B) {
	as := addrs()
	for _, m := range middlewares {
		b.Run(m.name, func(b *testing.B) {
			h := m.wrap(b, app)
			w := &writer{h: http.Header{}}
			r := request()
			for _, a := range as { // every key exists from now on
				clear(w.h)
				w.code = 200
				r.RemoteAddr = a
				h.ServeHTTP(w, r)
				if w.code != 200 {
					b.Fatalf("%s refused a request: %d", m.name, w.code)
				}
			}
			b.ReportAllocs()
			i := 0
			for b.Loop() {
				clear(w.h)
				r.RemoteAddr = as[i]
				h.ServeHTTP(w, r)
				if i++; i == len(as) {
					i = 0
				}
			}
		})
	}
}

// BenchmarkMiddlewareParallel is BenchmarkMiddleware from every
// processor at once: what a busy server asks of the store's locks. The
// goroutines walk the clients from offsets spread evenly over them, not
// in step from the first: two processors asking for the same client at
// the same instant, request after request, is no server's traffic (it
// meets every store's lock for that key on every request).
func BenchmarkMiddlewareParallel(b *testing.B) {
	as := addrs()
	for _, m := range middlewares {
		b.Run(m.name, func(b *testing.B) {
			h := m.wrap(b, app)
			var next atomic.Int64
			b.ReportAllocs()
			b.RunParallel(func(pb *testing.PB) {
				w := &writer{h: http.Header{}}
				r := request()
				i := int(next.Add(1)-1) * len(as) / runtime.GOMAXPROCS(0) % len(as)
				for pb.Next() {
					clear(w.h)
					r.RemoteAddr = as[i]
					h.ServeHTTP(w, r)
					if i++; i == len(as) {
						i = 0
					}
				}
			})
		})
	}
}

// BenchmarkProxy is a request through a reverse proxy (httputil, as
// `ratelimit proxy` serves) to a backend, both on loopback, over keep-alive
// connections, with and without the limiter; ns/op is the inverse of the
// throughput of all processors together. The client runs in the same
// process, so the figures include its reading of the two RateLimit fields
// (most of the allocations the limiter seems to add here).
func BenchmarkProxy(b *testing.B) {
	backend := httptest.NewServer(app)
	defer backend.Close()
	target, _ := url.Parse(backend.URL)
	for _, m := range middlewares[:2] {
		b.Run(m.name, func(b *testing.B) {
			rp := httputil.NewSingleHostReverseProxy(target)
			rp.Transport = &http.Transport{MaxIdleConnsPerHost: 256}
			proxy := httptest.NewServer(m.wrap(b, rp))
			defer proxy.Close()
			client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 256}}
			b.ReportAllocs()
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					resp, err := client.Get(proxy.URL + "/api/items")
					if err != nil {
						b.Error(err)
						return
					}
					_, _ = io.Copy(io.Discard, resp.Body)
					resp.Body.Close()
					if resp.StatusCode != 200 {
						b.Errorf("status %d", resp.StatusCode)
						return
					}
				}
			})
		})
	}
}
