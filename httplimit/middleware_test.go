package httplimit

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/smoothrate/ratelimit/internal/keyopt"
	"github.com/smoothrate/ratelimit/throttle"
)

// testClock is a clock the test sets; broken makes it read a time the
// stores reject, which is how these tests make a store fail.
type testClock struct {
	mu     sync.Mutex
	now    time.Time
	broken bool
}

func newTestClock() *testClock {
	return &testClock{now: time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)}
}

func (c *testClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.broken {
		return time.Unix(-1, 0)
	}
	return c.now
}

func (c *testClock) Sleep(ctx context.Context, d time.Duration) error {
	c.Advance(d)
	return ctx.Err()
}

func (c *testClock) Advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(d)
}

func (c *testClock) Break(b bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.broken = b
}

// newLimiter returns a GCRA limiter of 3 per minute over a memory store on
// clk (the system clock when nil).
func newLimiter(t testing.TB, clk *testClock) *throttle.Limiter {
	return newLimiterOn(t, storeOn(clk), throttle.GCRA, throttle.PerMinute(3))
}

func storeOn(clk *testClock) *throttle.MemoryStore {
	if clk == nil {
		return memStore()
	}
	return memStore(throttle.WithStoreClock(clk))
}

// memStore is throttle.NewMemoryStore for tests whose options are right.
func memStore(opts ...throttle.StoreOption) *throttle.MemoryStore {
	s, err := throttle.NewMemoryStore(opts...)
	if err != nil {
		panic(err)
	}
	return s
}

func newLimiterOn(t testing.TB, s throttle.Store, alg throttle.Algorithm, l throttle.Limit) *throttle.Limiter {
	t.Helper()
	lim, err := throttle.New(s, alg, l)
	if err != nil {
		t.Fatal(err)
	}
	return lim
}

// ok is the backend: it answers 200 "ok" and counts its calls.
type ok struct{ calls atomic.Int64 }

func (o *ok) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	o.calls.Add(1)
	_, _ = w.Write(okBody)
}

// okBody is shared so that the backend allocates nothing whether or not
// the compiler sees through the ResponseWriter (it does in the baseline of
// TestAllocations, not behind the middleware).
var okBody = []byte("ok")

func handler(t testing.TB, lim *throttle.Limiter, opts ...Option) (http.Handler, *ok) {
	t.Helper()
	mw, err := New(lim, opts...)
	if err != nil {
		t.Fatal(err)
	}
	backend := &ok{}
	return mw(backend), backend
}

func do(h http.Handler, remote, path string) *httptest.ResponseRecorder {
	r := httptest.NewRequest("GET", path, nil)
	r.RemoteAddr = remote
	w := httptest.NewRecorder()
	h.ServeHTTP(w, r)
	return w
}

// item is one parsed RateLimit list item.
type item struct {
	name string
	r, t int64
	hasT bool
}

var itemRE = regexp.MustCompile(`^"([^"]+)";r=(\d+)(?:;t=(\d+))?$`)

// parseRateLimit parses the RateLimit field strictly, as a client would.
func parseRateLimit(t *testing.T, v string) []item {
	t.Helper()
	var out []item
	for _, s := range regexp.MustCompile(`, `).Split(v, -1) {
		m := itemRE.FindStringSubmatch(s)
		if m == nil {
			t.Fatalf("RateLimit %q: item %q does not parse", v, s)
		}
		it := item{name: m[1]}
		it.r, _ = strconv.ParseInt(m[2], 10, 64)
		if m[3] != "" {
			it.t, _ = strconv.ParseInt(m[3], 10, 64)
			it.hasT = true
		}
		out = append(out, it)
	}
	return out
}

func TestAllowThenRefuseThenRetryAfter(t *testing.T) {
	clk := newTestClock()
	h, backend := handler(t, newLimiter(t, clk))
	for i := range 3 {
		w := do(h, "198.51.100.4:1000", "/")
		if w.Code != 200 {
			t.Fatalf("request %d: %d", i, w.Code)
		}
		if got := w.Header().Get("RateLimit-Policy"); got != `"default";q=3;w=60` {
			t.Errorf("RateLimit-Policy %q", got)
		}
		// GCRA 3/min: each request is paid back 20 s later; after i+1
		// requests the bucket is full again in (i+1)·20 s.
		want := fmt.Sprintf(`"default";r=%d;t=%d`, 2-i, 20*(i+1))
		if got := w.Header().Get("RateLimit"); got != want {
			t.Errorf("request %d: RateLimit %q, want %q", i, got, want)
		}
		if w.Header().Get("Retry-After") != "" {
			t.Errorf("Retry-After on a 200")
		}
	}
	w := do(h, "198.51.100.4:1000", "/")
	if w.Code != http.StatusTooManyRequests {
		t.Fatalf("4th request: %d", w.Code)
	}
	if got := w.Header().Get("Retry-After"); got != "20" {
		t.Errorf("Retry-After %q, want 20", got)
	}
	if got := w.Header().Get("RateLimit"); got != `"default";r=0;t=20` {
		t.Errorf("RateLimit on 429 %q", got)
	}
	if got := w.Header().Get("Content-Type"); got != "application/problem+json" {
		t.Errorf("Content-Type %q", got)
	}
	var p struct {
		Type     string   `json:"type"`
		Status   int      `json:"status"`
		Violated []string `json:"violated-policies"`
	}
	if err := json.Unmarshal(w.Body.Bytes(), &p); err != nil {
		t.Fatalf("problem body %q: %v", w.Body, err)
	}
	if p.Type != quotaExceeded || p.Status != 429 || len(p.Violated) != 1 || p.Violated[0] != "default" {
		t.Errorf("problem %+v", p)
	}
	// Another client is not affected.
	if w := do(h, "198.51.100.5:1000", "/"); w.Code != 200 {
		t.Errorf("other client: %d", w.Code)
	}
	// One second early is still too early; on time is admitted.
	clk.Advance(19 * time.Second)
	if w := do(h, "198.51.100.4:1000", "/"); w.Code != 429 {
		t.Errorf("1 s before Retry-After: %d", w.Code)
	}
	clk.Advance(time.Second)
	if w := do(h, "198.51.100.4:1000", "/"); w.Code != 200 {
		t.Errorf("at Retry-After: %d", w.Code)
	}
	if got := backend.calls.Load(); got != 5 {
		t.Errorf("backend saw %d requests, want 5", got)
	}
}

// TestRetryAfterIsHonest checks, for every algorithm and fractional waits,
// that a client waiting Retry-After seconds is admitted on its next try
// and that Retry-After is never below a t the RateLimit field announces.
func TestRetryAfterIsHonest(t *testing.T) {
	algs := []throttle.Algorithm{throttle.GCRA, throttle.TokenBucket, throttle.LeakyBucket, throttle.FixedWindow, throttle.SlidingWindow, throttle.SlidingLog}
	for _, alg := range algs {
		t.Run(alg.String(), func(t *testing.T) {
			clk := newTestClock()
			clk.Advance(123456789 * time.Microsecond) // off any second boundary
			lim := newLimiterOn(t, storeOn(clk), alg, throttle.Limit{Count: 7, Period: 9500 * time.Millisecond})
			h, _ := handler(t, lim)
			refusals := 0
			for step := range 200 {
				w := do(h, "192.0.2.1:1", "/")
				items := parseRateLimit(t, w.Header().Get("RateLimit"))
				if w.Code == 200 {
					clk.Advance(time.Duration(step%5) * 300 * time.Millisecond)
					continue
				}
				refusals++
				ra, err := strconv.ParseInt(w.Header().Get("Retry-After"), 10, 64)
				if err != nil || ra < 1 {
					t.Fatalf("step %d: Retry-After %q", step, w.Header().Get("Retry-After"))
				}
				if !items[0].hasT || items[0].t > ra {
					t.Fatalf("step %d: t=%d (present %v) later than Retry-After %d", step, items[0].t, items[0].hasT, ra)
				}
				clk.Advance(time.Duration(ra) * time.Second)
				if w := do(h, "192.0.2.1:1", "/"); w.Code != 200 {
					t.Fatalf("step %d: refused again after waiting Retry-After %d s", step, ra)
				}
			}
			if refusals == 0 {
				t.Fatal("never refused: the test checked nothing")
			}
		})
	}
}

func TestXRateLimitHeadersOnAllowed(t *testing.T) {
	h, _ := handler(t, newLimiter(t, newTestClock()), WithXRateLimitHeaders())
	w := do(h, "192.0.2.1:1", "/")
	// GCRA 3/min after one request: 2 left, full again in 20 s (seconds
	// from now, not a Unix time).
	if w.Code != 200 || w.Header().Get("X-RateLimit-Limit") != "3" || w.Header().Get("X-RateLimit-Remaining") != "2" ||
		w.Header().Get("X-RateLimit-Reset") != "20" || w.Header().Get("RateLimit") != `"default";r=2;t=20` {
		t.Errorf("%d %v", w.Code, w.Header())
	}
}

func TestPolicyWindowRoundsUp(t *testing.T) {
	lim := newLimiterOn(t, memStore(), throttle.GCRA, throttle.Limit{Count: 10, Period: 1500 * time.Millisecond})
	h, _ := handler(t, lim, WithName("api"))
	if got := do(h, "192.0.2.1:1", "/").Header().Get("RateLimit-Policy"); got != `"api";q=10;w=2` {
		t.Errorf("RateLimit-Policy %q", got)
	}
}

func TestSeveralLimitsCountedTogether(t *testing.T) {
	clk := newTestClock()
	store := storeOn(clk)
	perIP := newLimiterOn(t, store, throttle.FixedWindow, throttle.PerMinute(5))
	perRoute := newLimiterOn(t, store, throttle.FixedWindow, throttle.PerMinute(2))
	h, backend := handler(t, perIP, WithName("ip"), WithLimit("route", perRoute, IP(), Route()), WithXRateLimitHeaders())
	for i := range 2 {
		if w := do(h, "192.0.2.1:1", "/expensive"); w.Code != 200 {
			t.Fatalf("request %d: %d", i, w.Code)
		}
	}
	w := do(h, "192.0.2.1:1", "/expensive")
	if w.Code != 429 {
		t.Fatalf("third on the route: %d", w.Code)
	}
	items := parseRateLimit(t, w.Header().Get("RateLimit"))
	if len(items) != 2 || items[0].name != "ip" || items[0].r != 3 || items[0].hasT ||
		items[1].name != "route" || items[1].r != 0 || !items[1].hasT {
		t.Errorf("RateLimit %q", w.Header().Get("RateLimit"))
	}
	if got := w.Header().Get("RateLimit-Policy"); got != `"ip";q=5;w=60, "route";q=2;w=60` {
		t.Errorf("RateLimit-Policy %q", got)
	}
	if got, want := w.Header().Get("Retry-After"), strconv.FormatInt(items[1].t, 10); got != want {
		t.Errorf("Retry-After %q, want %q", got, want)
	}
	if w.Header().Get("X-RateLimit-Limit") != "2" || w.Header().Get("X-RateLimit-Remaining") != "0" ||
		w.Header().Get("X-RateLimit-Reset") != w.Header().Get("Retry-After") {
		t.Errorf("X-RateLimit-* %v", w.Header())
	}
	if body := w.Body.String(); !regexp.MustCompile(`"violated-policies":\["route"\]`).MatchString(body) {
		t.Errorf("body %s", body)
	}
	// The refused request was not counted per IP: 3 more elsewhere pass.
	for i := range 3 {
		if w := do(h, "192.0.2.1:1", fmt.Sprintf("/other%d", i)); w.Code != 200 {
			t.Fatalf("other route %d: %d", i, w.Code)
		}
	}
	if w := do(h, "192.0.2.1:1", "/other9"); w.Code != 429 {
		t.Errorf("6th request of the IP: %d", w.Code)
	}
	if got := backend.calls.Load(); got != 5 {
		t.Errorf("backend calls %d", got)
	}
}

func TestCostByRoute(t *testing.T) {
	lim := newLimiterOn(t, storeOn(newTestClock()), throttle.FixedWindow, throttle.PerMinute(10))
	h, _ := handler(t, lim, WithCost(func(r *http.Request) int {
		if r.URL.Path == "/export" {
			return 4
		}
		return 1
	}))
	for _, tc := range []struct {
		path string
		code int
		r    string
	}{{"/export", 200, "6"}, {"/export", 200, "2"}, {"/export", 429, "2"}, {"/", 200, "1"}, {"/", 200, "0"}, {"/", 429, "0"}} {
		w := do(h, "192.0.2.1:1", tc.path)
		items := parseRateLimit(t, w.Header().Get("RateLimit"))
		if w.Code != tc.code || strconv.FormatInt(items[0].r, 10) != tc.r {
			t.Errorf("%s: %d %q, want %d r=%s", tc.path, w.Code, w.Header().Get("RateLimit"), tc.code, tc.r)
		}
	}
}

func TestCostAboveLimitNeverPasses(t *testing.T) {
	h, _ := handler(t, newLimiter(t, newTestClock()), WithCost(func(*http.Request) int { return 4 }))
	w := do(h, "192.0.2.1:1", "/")
	if w.Code != 429 || w.Header().Get("Retry-After") != "" {
		t.Fatalf("%d, Retry-After %q", w.Code, w.Header().Get("Retry-After"))
	}
	if items := parseRateLimit(t, w.Header().Get("RateLimit")); items[0].hasT || items[0].r != 3 {
		t.Errorf("RateLimit %q", w.Header().Get("RateLimit"))
	}
}

// TestCostAboveOneLimitNeverPasses: a request that one limit can never
// pass (its cost is above that limit) and another refuses for a while is
// refused without Retry-After, as with the first limit alone: a client
// that waited the second's wait would be refused again, forever.
func TestCostAboveOneLimitNeverPasses(t *testing.T) {
	clk := newTestClock()
	store, err := throttle.NewMemoryStore(throttle.WithStoreClock(clk))
	if err != nil {
		t.Fatal(err)
	}
	small, err := throttle.New(store, throttle.GCRA, throttle.PerMinute(10))
	if err != nil {
		t.Fatal(err)
	}
	big, err := throttle.New(store, throttle.GCRA, throttle.PerMinute(100))
	if err != nil {
		t.Fatal(err)
	}
	h, _ := handler(t, small, WithLimit("big", big), WithCost(func(*http.Request) int { return 50 }))
	if _, err := big.AllowN(t.Context(), "big:192.0.2.1", 95); err != nil { // "big" has 5 left
		t.Fatal(err)
	}
	w := do(h, "192.0.2.1:1", "/")
	if w.Code != 429 || w.Header().Get("Retry-After") != "" || strings.Contains(w.Body.String(), "retry after") {
		t.Errorf("%d, Retry-After %q, body %q; want 429 without a time to retry", w.Code, w.Header().Get("Retry-After"), w.Body.String())
	}
}

func TestKeys(t *testing.T) {
	type user struct{}
	fromCtx := FromContext(func(ctx context.Context) (string, bool) {
		u, ok := ctx.Value(user{}).(string)
		return u, ok
	})
	mux := http.NewServeMux()
	lim := newLimiter(t, nil)
	c, err := build(lim, []Option{WithKey(Header("x-api-key"), fromCtx, Route(), Global())})
	if err != nil {
		t.Fatal(err)
	}
	m := &middleware{config: c}
	var got string
	mux.HandleFunc("GET /items/{id}", func(w http.ResponseWriter, r *http.Request) { got = m.key(&c.Limits[0], r) })
	r := httptest.NewRequest("GET", "/items/7", nil)
	r.RemoteAddr = "192.0.2.1:1"
	r.Header.Set("X-Api-Key", "k1")
	mux.ServeHTTP(httptest.NewRecorder(), r.WithContext(context.WithValue(r.Context(), user{}, "alice")))
	if want := "default:=k1|=alice|GET /items/{id}|*"; got != want {
		t.Errorf("key %q, want %q", got, want)
	}
	// Without the header and the user, the client IP stands in.
	r = httptest.NewRequest("GET", "/x", nil)
	r.RemoteAddr = "192.0.2.1:1"
	if got, want := m.key(&c.Limits[0], r), "default:ip=192.0.2.1|ip=192.0.2.1|/x|*"; got != want {
		t.Errorf("key %q, want %q", got, want)
	}
}

func TestNegativeCostIsAnErrorNotAPass(t *testing.T) {
	var hooked error
	h, backend := handler(t, newLimiter(t, newTestClock()), WithFailOpen(),
		WithCost(func(*http.Request) int { return -1 }),
		WithErrorHook(func(r *http.Request, err error) { hooked = err }))
	if w := do(h, "192.0.2.1:1", "/"); w.Code != 500 || backend.calls.Load() != 0 {
		t.Errorf("negative cost: %d, backend %d", w.Code, backend.calls.Load())
	}
	if !errors.Is(hooked, throttle.ErrInvalidCost) {
		t.Errorf("hook got %v", hooked)
	}
}

func TestLongKeyPartsAreHashed(t *testing.T) {
	lim := newLimiter(t, nil)
	c, err := build(lim, []Option{WithKey(Header("X-Api-Key"), Route())})
	if err != nil {
		t.Fatal(err)
	}
	m := &middleware{config: c}
	long := strings.Repeat("k", 100000)
	r := httptest.NewRequest("GET", "/"+long, nil)
	r.Header.Set("X-Api-Key", long)
	k1 := m.key(&c.Limits[0], r)
	r.Header.Set("X-Api-Key", long[1:]+"j")
	k2 := m.key(&c.Limits[0], r)
	if len(k1) > 120 || k1 == k2 || !strings.Contains(k1, "sha256:") {
		t.Errorf("keys %q and %q: want short, distinct, hashed", k1, k2)
	}
	r.Header.Set("X-Api-Key", strings.Repeat("k", keyopt.MaxPart))
	if got := m.key(&c.Limits[0], r); !strings.HasPrefix(got, "default:="+strings.Repeat("k", keyopt.MaxPart)+"|") {
		t.Errorf("a %d-byte part should be kept as is: %q", keyopt.MaxPart, got)
	}
}

func TestStoreFailure(t *testing.T) {
	for _, open := range []bool{false, true} {
		t.Run(fmt.Sprintf("open=%v", open), func(t *testing.T) {
			clk := newTestClock()
			var hooked atomic.Int64
			opts := []Option{WithErrorHook(func(r *http.Request, err error) {
				if errors.Is(err, throttle.ErrInvalidTime) {
					hooked.Add(1)
				}
			})}
			if open {
				opts = append(opts, WithFailOpen())
			} else {
				opts = append(opts, WithFailClosed(1500*time.Millisecond))
			}
			h, backend := handler(t, newLimiter(t, clk), opts...)
			clk.Break(true)
			w := do(h, "192.0.2.1:1", "/")
			if hooked.Load() != 1 {
				t.Errorf("error hook called %d times", hooked.Load())
			}
			// A clock out of range is no outage: failing open or not,
			// it gets 503 (TestFailOpenOnlyOnOutage has the outages).
			if w.Code != 503 || backend.calls.Load() != 0 {
				t.Errorf("fail open %v: %d, backend %d", open, w.Code, backend.calls.Load())
			}
			if !open && w.Header().Get("Retry-After") != "2" {
				t.Errorf("fail closed: Retry-After %q", w.Header().Get("Retry-After"))
			}
			clk.Break(false)
			if w := do(h, "192.0.2.1:1", "/"); w.Code != 200 || w.Header().Get("RateLimit") == "" {
				t.Errorf("after recovery: %d %v", w.Code, w.Header())
			}
		})
	}
}

func TestHooksAndDenyHandler(t *testing.T) {
	var refused []throttle.Decision
	h, _ := handler(t, newLimiter(t, newTestClock()),
		WithRefusalHook(func(r *http.Request, d throttle.Decision) { refused = append(refused, d) }),
		WithDenyHandler(func(w http.ResponseWriter, r *http.Request, d throttle.Decision) {
			w.WriteHeader(http.StatusTeapot)
		}))
	for range 3 {
		do(h, "192.0.2.1:1", "/")
	}
	w := do(h, "192.0.2.1:1", "/")
	if w.Code != http.StatusTeapot || w.Header().Get("Retry-After") != "20" {
		t.Errorf("deny handler: %d, Retry-After %q", w.Code, w.Header().Get("Retry-After"))
	}
	if len(refused) != 1 || refused[0].RetryAfter != 20*time.Second {
		t.Errorf("refusal hook saw %+v", refused)
	}
}

func TestBadOptions(t *testing.T) {
	lim := newLimiter(t, nil)
	other := newLimiterOn(t, memStore(), throttle.GCRA, throttle.PerSecond(1))
	for name, opts := range map[string][]Option{
		"nil option":          {nil},
		"bad CIDR":            {WithTrustedProxies("10.0.0.0/33")},
		"not an address":      {WithTrustedProxies("proxy.local")},
		"bad name":            {WithName(`a"b`)},
		"empty name":          {WithName("")},
		"duplicate name":      {WithLimit(DefaultName, other)},
		"nil limiter":         {WithLimit("x", nil)},
		"no key parts":        {WithKey()},
		"zero key part":       {WithKey(KeyPart{})},
		"empty header":        {WithKey(Header(""))},
		"header with a space": {WithKey(Header("X-Api-Key "))},
		"header with a colon": {WithKey(Header("X-Api-Key:"))},
		"two stores":          {WithLimit("other", other)},
		"nil context fn":      {WithKey(FromContext(nil))},
		"bad prefix":          {WithIPPrefix(0, 64)},
		"bad fail closed":     {WithFailClosed(0)},
		"open and closed":     {WithFailOpen(), WithFailClosed(time.Second)},
		"nil cost":            {WithCost(nil)},
		"nil hook":            {WithErrorHook(nil)},
		"bad header kind":     {WithForwardingHeader(9)},
	} {
		if _, err := New(lim, opts...); !errors.Is(err, ErrInvalidOption) {
			t.Errorf("%s: err %v, want ErrInvalidOption", name, err)
		}
	}
	if _, err := New(nil); !errors.Is(err, ErrInvalidOption) {
		t.Errorf("nil limiter: %v", err)
	}
}
