package httplimit

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/smoothrate/ratelimit/throttle"
)

// The middleware's own cost is BenchmarkServe minus BenchmarkAllowN: the
// same decisions on the same 10 000 keys, with and without the HTTP layer
// (client IP, key, headers). bench/httpbench compares it with the peers.

const benchClients = 10_000

func benchLimiter(b *testing.B) *throttle.Limiter {
	// State that lives for the whole run, as on a busy server: a second of
	// debt per request, a bucket no benchmark fills.
	return newLimiterOn(b, memStore(), throttle.GCRA, throttle.Limit{Count: 1000, Period: 1000 * time.Second, Burst: 1 << 30})
}

func BenchmarkAllowN(b *testing.B) {
	lim := benchLimiter(b)
	keys := make([]string, benchClients)
	for i := range keys {
		keys[i] = fmt.Sprintf("default:10.0.%d.%d", i>>8, i&0xff)
	}
	ctx := context.Background()
	i := 0
	b.ReportAllocs()
	for b.Loop() {
		if _, err := lim.AllowN(ctx, keys[i], 1); err != nil {
			b.Fatal(err)
		}
		if i++; i == len(keys) {
			i = 0
		}
	}
}

func BenchmarkServe(b *testing.B) {
	for _, name := range []string{"ip", "x-ratelimit"} {
		b.Run(name, func(b *testing.B) {
			var opts []Option
			if name == "x-ratelimit" {
				opts = append(opts, WithXRateLimitHeaders())
			}
			h, _ := handler(b, benchLimiter(b), opts...)
			addrs := make([]string, benchClients)
			for i := range addrs {
				addrs[i] = fmt.Sprintf("10.0.%d.%d:5000", i>>8, i&0xff)
			}
			r := httptest.NewRequest("GET", "/", nil)
			w := &discard{h: http.Header{}}
			i := 0
			b.ReportAllocs()
			for b.Loop() {
				clear(w.h)
				r.RemoteAddr = addrs[i]
				h.ServeHTTP(w, r)
				if i++; i == len(addrs) {
					i = 0
				}
			}
		})
	}
}
