package proxy

import (
	"flag"
	"io"
	"log"
	"net/http"
	"runtime"
	"strconv"
	"testing"

	"github.com/smoothrate/ratelimit/internal/cli/command"
	"github.com/smoothrate/ratelimit/internal/testlong"
	"github.com/smoothrate/ratelimit/throttle"
)

// TestProxyFloodMemoryBounded sends a flood of requests (100 000 in
// scripts/test, a million in scripts/test-more: internal/testlong), each
// from another client IP (through a trusted proxy's X-Forwarded-For),
// through the proxy's handler in process, and checks that the memory it
// keeps is bounded by --max-keys: with a tenth of the flood, the store
// holds at most that many clients, and the heap grows by about that many
// keys' worth, not the flood's; with the default, nothing is evicted.
func TestProxyFloodMemoryBounded(t *testing.T) {
	flood := testlong.Pick(100_000, 1_000_000)
	for _, maxKeys := range []int{flood / 10, throttle.DefaultMaxKeys} {
		t.Run(strconv.Itoa(maxKeys), func(t *testing.T) {
			// 10 a day: a client's state stays for hours, so no key
			// expires during the flood, however slow the machine, and
			// only eviction can bound the store.
			cfg := testProxyConfig(t, "--listen", "127.0.0.1:0", "--limit", "10/d", "--trusted-proxy", "10.0.0.0/8",
				"--max-keys", strconv.Itoa(maxKeys), "http://127.0.0.1:1")
			store, err := throttle.NewMemoryStore(throttle.WithMaxKeys(maxKeys))
			if err != nil {
				t.Fatal(err)
			}
			h, err := cfg.newProxy(store, "memory", log.New(io.Discard, "", 0))
			if err != nil {
				t.Fatal(err)
			}
			h.forward = http.HandlerFunc(func(http.ResponseWriter, *http.Request) {})
			m := &h.metrics
			before := heapInUse()
			r, _ := http.NewRequest("GET", "http://proxy/", nil)
			r.RemoteAddr = "10.0.0.1:4000"
			w := &nullWriter{h: http.Header{}}
			buf := make([]byte, 0, 32)
			for i := range flood {
				// 100.64.0.0/10 holds 4 million addresses.
				buf = append(buf[:0], "100."...)
				buf = strconv.AppendInt(buf, int64(64+i>>16), 10)
				buf = append(buf, '.')
				buf = strconv.AppendInt(buf, int64(i>>8&0xff), 10)
				buf = append(buf, '.')
				buf = strconv.AppendInt(buf, int64(i&0xff), 10)
				r.Header["X-Forwarded-For"] = []string{string(buf)}
				clear(w.h)
				h.ServeHTTP(w, r)
			}
			after := heapInUse()
			st := store.Stats()
			growth := int64(after) - int64(before)
			t.Logf("%d clients, --max-keys %d: %d keys held, %d evicted, heap in use %+.1f MiB (%.0f bytes per key held)",
				flood, maxKeys, st.Keys, st.Evictions, float64(growth)/(1<<20), float64(growth)/float64(max(st.Keys, 1)))
			if m.allowed.Load() != int64(flood) {
				t.Errorf("%d allowed, want every first request of a client: %d", m.allowed.Load(), flood)
			}
			if st.Keys > maxKeys || st.Keys < min(maxKeys, flood)*9/10 {
				t.Errorf("%d keys held, want at most %d (and close to it)", st.Keys, maxKeys)
			}
			if want := uint64(max(flood-maxKeys, 0)); st.Evictions < want {
				t.Errorf("%d evictions, want at least %d", st.Evictions, want)
			}
			// A key costs well under 512 bytes; a store that kept every
			// client would exceed this bound with --max-keys a tenth of
			// the flood.
			if limit := int64(min(maxKeys, flood)) * 512; growth > limit {
				t.Errorf("heap grew by %d bytes, more than %d for %d keys", growth, limit, min(maxKeys, flood))
			}
			runtime.KeepAlive(store)
		})
	}
}

// testProxyConfig reads proxy's flags as the command line does.
func testProxyConfig(t *testing.T, args ...string) *proxyConfig {
	t.Helper()
	fs := flag.NewFlagSet("proxy", flag.ContinueOnError)
	var f proxyFlags
	f.register(fs)
	words, err := command.ParseInterspersed(fs, args)
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := proxyConfigFrom(&f, fs, words)
	if err != nil {
		t.Fatal(err)
	}
	return cfg
}

func heapInUse() uint64 {
	runtime.GC()
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return ms.HeapInuse
}

type nullWriter struct{ h http.Header }

func (w *nullWriter) Header() http.Header         { return w.h }
func (w *nullWriter) Write(b []byte) (int, error) { return len(b), nil }
func (w *nullWriter) WriteHeader(int)             {}
