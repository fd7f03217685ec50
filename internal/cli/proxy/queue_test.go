package proxy

import (
	"context"
	"flag"
	"fmt"
	"io"
	"log"
	"math/big"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/smoothrate/ratelimit/internal/cli/command"
	"github.com/smoothrate/ratelimit/internal/redistest"
	"github.com/smoothrate/ratelimit/throttle"
)

// nginxLimit is ngx_http_limit_req_module's arithmetic for one limit_req
// directive and one key, line by line from its lookup and account
// functions: the model the proxy's holds are checked against, in explicit
// whole milliseconds.
type nginxLimit struct {
	rate, burst, delay int64 // rate: requests per 1000 s; burst, delay: thousandths of a request
	excess, last       int64
	exists             bool
}

// newNginxLimit is `limit_req_zone rate=Nr/s` with `limit_req burst=B
// delay=D` (nodelay: D = B).
func newNginxLimit(perSecond, b, d int) *nginxLimit {
	return &nginxLimit{rate: int64(perSecond) * 1000, burst: int64(b) * 1000, delay: int64(d) * 1000}
}

func (l *nginxLimit) excessAt(now int64) (excess, ms int64) {
	ms = now - l.last
	if ms < -60000 {
		ms = 1
	} else if ms < 0 {
		ms = 0
	}
	return max(0, l.excess-l.rate*ms/1000+1000), ms
}

// nginxDecide is ngx_http_limit_req_handler for limits applied in one
// location: refused (nothing changes), or admitted and held delay ms.
func nginxDecide(limits []*nginxLimit, now int64) (refused bool, delay int64) {
	// lookup: every limit must admit; only the last one writes then.
	for i, l := range limits {
		if !l.exists {
			continue // a new key's excess is 0
		}
		if excess, _ := l.excessAt(now); excess > l.burst {
			return true, 0
		}
		_ = i
	}
	// account: each limit writes its new excess; the longest delay wins.
	for _, l := range limits {
		var excess int64
		if !l.exists {
			l.exists, l.excess, l.last = true, 0, now
		} else {
			var ms int64
			excess, ms = l.excessAt(now)
			l.excess = excess
			if ms != 0 {
				l.last = now
			}
		}
		if excess > l.delay {
			delay = max(delay, (excess-l.delay)*1000/l.rate)
		}
	}
	return false, delay
}

// stepClock is a clock set by the test.
type stepClock struct {
	mu  sync.Mutex
	now time.Time
}

func (c *stepClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}
func (c *stepClock) set(t time.Time) {
	c.mu.Lock()
	c.now = t
	c.mu.Unlock()
}

// ourSide decides as the proxy does: the limits of --limit/--burst/--queue
// over one store, atomically, and holdFor.
type ourSide struct {
	q     *queueConfig
	lims  []*throttle.Limiter
	clock *stepClock
	key   string
}

func newOurSide(t *testing.T, f queueFlags, store throttle.Store, clock *stepClock, key string) *ourSide {
	t.Helper()
	f.status = http.StatusTooManyRequests
	q, err := parseQueueFlags(&f, throttle.GCRA)
	if err != nil {
		t.Fatal(err)
	}
	if q == nil { // one plain limit: the proxy's usual path decides alike
		q = &queueConfig{status: http.StatusTooManyRequests}
		l, _ := parseLimit(f.limits[0])
		l.Burst = l.Count
		if len(f.bursts) > 0 {
			fmt.Sscan(f.bursts[0], &l.Burst)
		}
		q.limits = []queuedLimit{{text: f.limits[0], limit: l, atOnce: l.Burst}}
	}
	s := &ourSide{q: q, clock: clock, key: key}
	for _, l := range q.limits {
		lim, err := throttle.New(store, throttle.GCRA, l.limit)
		if err != nil {
			t.Fatal(err)
		}
		s.lims = append(s.lims, lim)
	}
	return s
}

func (s *ourSide) decide(t *testing.T, now time.Time) (refused bool, delay time.Duration) {
	t.Helper()
	s.clock.set(now)
	checks := make([]throttle.Check, len(s.lims))
	for i, lim := range s.lims {
		checks[i] = throttle.Check{Limiter: lim, Key: fmt.Sprintf("%s:%d", s.key, i), N: 1}
	}
	ds, err := throttle.AllowAll(context.Background(), checks...)
	if err != nil {
		t.Fatal(err)
	}
	if !ds.Allowed() {
		return true, 0
	}
	return false, holdFor(s.q.limits, ds)
}

// nginxCase is one location's limit_req directives and the same as our
// flags.
type nginxCase struct {
	name  string
	rates []int // r/s per limit
	b, d  []int // nginx's burst and delay per limit
}

func (c nginxCase) flags() queueFlags {
	var f queueFlags
	for i, r := range c.rates {
		f.limits = append(f.limits, fmt.Sprintf("%d/s", r))
		f.bursts = append(f.bursts, fmt.Sprint(c.d[i]+1))
		f.queues = append(f.queues, fmt.Sprint(c.b[i]-c.d[i]))
	}
	return f
}

func (c nginxCase) nginx() []*nginxLimit {
	var ls []*nginxLimit
	for i, r := range c.rates {
		ls = append(ls, newNginxLimit(r, c.b[i], c.d[i]))
	}
	return ls
}

// TestHoldIsNginxs sends random arrival schedules, in whole milliseconds,
// through the model of nginx's C code and through our limits (memory store,
// and Redis when a server is at hand): every request must be refused by
// both, or admitted by both and held for the same whole milliseconds.
func TestHoldIsNginxs(t *testing.T) {
	t.Parallel()
	cases := []nginxCase{
		{"burst=5 nodelay", []int{10}, []int{5}, []int{5}},
		{"burst=6 delay=2", []int{10}, []int{6}, []int{2}},
		{"burst=4", []int{10}, []int{4}, []int{0}},
		{"no burst", []int{10}, []int{0}, []int{0}},
		{"3r/s burst=3", []int{3}, []int{3}, []int{0}},
		{"7r/s burst=9 delay=4", []int{7}, []int{9}, []int{4}},
		{"333r/s burst=20 delay=5", []int{333}, []int{20}, []int{5}},
		{"1000r/s burst=50", []int{1000}, []int{50}, []int{0}},
		{"1r/s burst=2", []int{1}, []int{2}, []int{0}},
		{"two limits", []int{10, 3}, []int{4, 2}, []int{1, 0}},
		{"three limits", []int{20, 7, 1}, []int{8, 3, 5}, []int{8, 0, 2}},
	}
	stores := map[string]func(*stepClock) throttle.Store{
		"memory": func(c *stepClock) throttle.Store { return must(throttle.NewMemoryStore(throttle.WithStoreClock(c))) },
	}
	if !testing.Short() || os.Getenv("CI") != "" { // a server: never left out under CI
		srv := redistest.Start(t)
		rc := redis.NewClient(&redis.Options{Addr: srv.Addr()})
		t.Cleanup(func() { rc.Close() })
		// Not a test of the call timeout: a round trip on a loaded
		// machine, under the race detector, can outlast the default
		// 50 ms.
		stores["redis"] = func(c *stepClock) throttle.Store {
			return must(throttle.NewRedisStore(rc, throttle.WithStoreClock(c), throttle.WithCallTimeout(time.Minute)))
		}
	}
	base := time.UnixMilli(1_700_000_000_000)
	for storeName, newStore := range stores {
		for ci, c := range cases {
			t.Run(storeName+"/"+c.name, func(t *testing.T) {
				rng := rand.New(rand.NewPCG(uint64(ci), 23))
				requests := 400
				if storeName == "redis" {
					requests = 150
				}
				clock := &stepClock{now: base}
				ours := newOurSide(t, c.flags(), newStore(clock), clock, fmt.Sprintf("k%d-%d", ci, rng.Int()))
				theirs := c.nginx()
				interval := 1000 / c.rates[0] // about the rate, with bursts and pauses
				now := int64(0)
				held, refused := 0, 0
				for i := range requests {
					switch rng.IntN(10) {
					case 0:
						now += int64(rng.IntN(6 * interval))
					case 1, 2, 3:
					default:
						now += int64(rng.IntN(interval + 1))
					}
					wantRefused, wantDelay := nginxDecide(theirs, now)
					gotRefused, gotDelay := ours.decide(t, base.Add(time.Duration(now)*time.Millisecond))
					if gotRefused != wantRefused || gotDelay != time.Duration(wantDelay)*time.Millisecond {
						t.Fatalf("request %d at %d ms: nginx refused=%v delay=%d ms, ours refused=%v delay=%v",
							i, now, wantRefused, wantDelay, gotRefused, gotDelay)
					}
					if wantRefused {
						refused++
					} else if wantDelay > 0 {
						held++
					}
				}
				// The schedules must exercise all three outcomes where
				// the directives allow them.
				if refused == 0 || (held == 0 && c.b[0] > c.d[0]) {
					t.Errorf("schedule too tame: %d held, %d refused of %d", held, refused, requests)
				}
			})
		}
	}
}

// TestHoldOneBoundaries pins the rounding: the hold is the debt less K
// emission intervals, rounded down to whole milliseconds, never negative.
func TestHoldOneBoundaries(t *testing.T) {
	t.Parallel()
	l := queuedLimit{limit: throttle.Limit{Count: 3, Period: time.Second, Burst: 4}, atOnce: 1}
	for _, tc := range []struct {
		debt, want time.Duration
	}{
		{0, 0},
		{333334 * time.Microsecond, 0}, // ⌈1000/3 ms⌉: one request, nothing to wait
		{666667 * time.Microsecond, 333 * time.Millisecond}, // 333.33 ms → 333
		{1000 * time.Millisecond, 666 * time.Millisecond},
		{1333334 * time.Microsecond, 1000 * time.Millisecond}, // exactly 1000 ms after the rounding up
	} {
		if got := holdOne(l, tc.debt); got != tc.want {
			t.Errorf("holdOne(%v) = %v, want %v", tc.debt, got, tc.want)
		}
	}
	// debt × count passes 2^64 ns.
	big := queuedLimit{limit: throttle.Limit{Count: 1 << 30, Period: 1000 * time.Hour}, atOnce: 1 << 30}
	if got := holdOne(big, 2000*time.Hour); got != 1000*time.Hour {
		t.Errorf("holdOne without overflow = %v, want 1000h", got)
	}
}

func TestParseQueueFlags(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		f    queueFlags
		want string // describe(), "plain" for nil, or the error's text
	}{
		{queueFlags{limits: []string{"10/s"}, status: 429}, "plain"},
		{queueFlags{limits: []string{"10/s"}, bursts: []string{"6"}, status: 429}, "plain"},
		{queueFlags{limits: []string{"10/s"}, bursts: []string{"3"}, queues: []string{"4"}, status: 429}, "10/1s (3 at once, 4 queued)"},
		{queueFlags{limits: []string{"10/s"}, status: 503}, "10/1s (10 at once)"},
		{queueFlags{limits: []string{"10/s"}, dryRun: true, status: 429}, "10/1s (10 at once), dry run"},
		{queueFlags{limits: []string{"10/s", "500/h"}, bursts: []string{"1"}, queues: []string{"4", "0"}, status: 429}, "10/1s (1 at once, 4 queued) and 500/1h0m0s (1 at once)"},
		{queueFlags{limits: []string{"10/s", "500/h"}, bursts: []string{"1", "2", "3"}, status: 429}, "--burst given 3 times for 2 --limit"},
		{queueFlags{limits: []string{"10/s"}, queues: []string{"-1"}, status: 429}, `--queue "-1": want a whole number`},
		{queueFlags{limits: []string{"10/s"}, status: 302}, "--status 302: want a code from 400 to 599"},
		{queueFlags{limits: []string{"10/s", "10/s"}, status: 429}, "--limit 10/s given twice"},
		{queueFlags{status: 429}, "--limit is required"},
	} {
		q, err := parseQueueFlags(&tc.f, throttle.GCRA)
		got := "plain"
		switch {
		case err != nil:
			got = err.Error()
		case q != nil:
			got = q.describe()
		}
		if !strings.HasPrefix(got, tc.want) {
			t.Errorf("%+v: got %q, want %q", tc.f, got, tc.want)
		}
	}
	f := queueFlags{limits: []string{"10/s"}, queues: []string{"2"}, status: 429}
	if _, err := parseQueueFlags(&f, throttle.FixedWindow); err == nil || !strings.Contains(err.Error(), "--queue needs a bucket") {
		t.Errorf("--queue with a fixed window: %v", err)
	}
}

// queueServer is the proxy with the limit flags args over a memory store,
// in front of a backend that counts what reaches it.
func queueServer(t *testing.T, args ...string) (http.Handler, *proxyMetrics, *int) {
	t.Helper()
	cfg := testProxyConfig(t, append(append([]string{"--listen", "127.0.0.1:0"}, args...), "http://127.0.0.1:1")...)
	if cfg.limits.queue == nil {
		t.Fatalf("flags %q: no queue config", args)
	}
	p, err := cfg.newProxy(must(throttle.NewMemoryStore(throttle.WithStoreClock(millisecondClock{}))), "memory", log.New(io.Discard, "", 0))
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	forwarded := new(int)
	p.forward = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		*forwarded++
		mu.Unlock()
	})
	return p, &p.metrics, forwarded
}

// arrival sends a request at the current (bubble) time and reports its
// status and how long it took.
type outcome struct {
	code int
	took time.Duration
	hdr  http.Header
}

func send(h http.Handler, ctx context.Context) outcome {
	start := time.Now()
	w := httptest.NewRecorder()
	r := httptest.NewRequest("GET", "/", nil).WithContext(ctx)
	r.RemoteAddr = "192.0.2.1:1234"
	h.ServeHTTP(w, r)
	return outcome{code: w.Code, took: time.Since(start), hdr: w.Header()}
}

// TestQueueHoldsInFakeTime: nginx's burst=4 (--burst 1 --queue 4) at
// 10r/s: of 7 requests at once, the first is served, the next four are
// held 100, 200, 300 and 400 ms, and the last two refused.
func TestQueueHoldsInFakeTime(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		h, m, forwarded := queueServer(t, "--limit", "10/s", "--burst", "1", "--queue", "4")
		out := make([]outcome, 7)
		var wg sync.WaitGroup
		for i := range out {
			wg.Go(func() { out[i] = send(h, context.Background()) })
			synctest.Wait() // in order: each is decided before the next arrives
		}
		wg.Wait()
		want := []struct {
			code int
			took time.Duration
		}{{200, 0}, {200, 100 * time.Millisecond}, {200, 200 * time.Millisecond}, {200, 300 * time.Millisecond}, {200, 400 * time.Millisecond}, {429, 0}, {429, 0}}
		for i, o := range out {
			if o.code != want[i].code || o.took != want[i].took {
				t.Errorf("request %d: %d after %v, want %d after %v", i, o.code, o.took, want[i].code, want[i].took)
			}
		}
		if out[5].hdr.Get("Retry-After") == "" {
			t.Errorf("refusal without Retry-After: %v", out[5].hdr)
		}
		if *forwarded != 5 || m.heldForwarded.Load() != 4 || m.refused.Load() != 2 {
			t.Errorf("forwarded %d, held %d, refused %d; want 5, 4, 2", *forwarded, m.heldForwarded.Load(), m.refused.Load())
		}
	})
}

// TestQueueClientGoneFreesItsPlace: --burst 1 --queue 1 at 10/s. The second
// request is held until 100 ms; its client goes away at 30 ms. A third
// request at 50 ms, which nginx would refuse (the place is taken), gets the
// freed place and is sent at 100 ms; the backend sees two requests, never
// more than the limit admitted.
func TestQueueClientGoneFreesItsPlace(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		h, m, forwarded := queueServer(t, "--limit", "10/s", "--burst", "1", "--queue", "1")
		if o := send(h, context.Background()); o.code != 200 || o.took != 0 {
			t.Fatalf("first request: %d after %v", o.code, o.took)
		}
		ctx, cancel := context.WithCancel(context.Background())
		gone := make(chan outcome)
		go func() { gone <- send(h, ctx) }()
		time.Sleep(30 * time.Millisecond) // fake time: the client's patience
		cancel()
		if o := <-gone; o.took != 30*time.Millisecond {
			t.Errorf("abandoned request returned after %v, want 30ms", o.took)
		}
		time.Sleep(20 * time.Millisecond)
		third := make(chan outcome)
		go func() { third <- send(h, context.Background()) }()
		synctest.Wait()
		// The place is taken: one more at 50 ms is refused, as by nginx.
		if o := send(h, context.Background()); o.code != 429 {
			t.Errorf("request after the freed place was taken: %d, want 429", o.code)
		}
		o := <-third
		if o.code != 200 || o.took != 50*time.Millisecond || o.hdr.Get("Retry-After") != "" {
			t.Errorf("request in the freed place: %d after %v (Retry-After %q), want 200 after 50ms", o.code, o.took, o.hdr.Get("Retry-After"))
		}
		if *forwarded != 2 || m.heldGone.Load() != 1 {
			t.Errorf("forwarded %d, client_gone %d; want 2, 1", *forwarded, m.heldGone.Load())
		}
	})
}

// TestQueueDryRunAndStatus: --dry-run forwards everything at once and counts
// what it would have done; --status 503 refuses with 503.
func TestQueueDryRunAndStatus(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		h, m, forwarded := queueServer(t, "--limit", "10/s", "--burst", "1", "--queue", "1", "--dry-run")
		for i := range 4 {
			o := send(h, context.Background())
			if o.code != 200 || o.took != 0 || o.hdr.Get("RateLimit") == "" || o.hdr.Get("Retry-After") != "" {
				t.Errorf("dry run, request %d: %d after %v, headers %v", i, o.code, o.took, o.hdr)
			}
		}
		if *forwarded != 4 || m.dryHeld.Load() != 1 || m.dryRefused.Load() != 2 {
			t.Errorf("dry run: forwarded %d, would hold %d, would refuse %d; want 4, 1, 2", *forwarded, m.dryHeld.Load(), m.dryRefused.Load())
		}
		h, _, _ = queueServer(t, "--limit", "10/s", "--burst", "1", "--status", "503")
		send(h, context.Background())
		if o := send(h, context.Background()); o.code != 503 || o.hdr.Get("Retry-After") != "1" || !strings.Contains(o.hdr.Get("Content-Type"), "problem+json") {
			t.Errorf("--status 503: %d, headers %v", o.code, o.hdr)
		}
	})
}

// TestFreedPlaces: the earliest place still ahead is taken; passed ones are
// forgotten.
func TestFreedPlaces(t *testing.T) {
	t.Parallel()
	f := freedPlaces{byKey: map[string][]time.Time{}}
	t0 := time.Unix(1000, 0)
	at := func(ms int) time.Time { return t0.Add(time.Duration(ms) * time.Millisecond) }
	f.put("a", at(300), t0)
	f.put("a", at(100), t0)
	f.put("a", at(200), t0)
	if s, ok := f.take("a", at(150), at(250)); !ok || !s.Equal(at(200)) {
		t.Errorf("take at 150 before 250 = %v %v, want 200 ms", s, ok)
	}
	if _, ok := f.take("a", at(150), at(250)); ok {
		t.Error("a second place before 250")
	}
	if _, ok := f.take("b", t0, time.Time{}); ok {
		t.Error("a place for another key")
	}
	if s, ok := f.take("a", at(150), time.Time{}); !ok || !s.Equal(at(300)) || f.n != 0 || len(f.byKey) != 0 {
		t.Errorf("take = %v %v, left %d in %d keys", s, ok, f.n, len(f.byKey))
	}
}

// must returns a store whose options are known to be good.
func must[S throttle.Store](s S, err error) S {
	if err != nil {
		panic(err)
	}
	return s
}

// FuzzHoldOne holds holdOne's 128-bit arithmetic to math/big's.
func FuzzHoldOne(f *testing.F) {
	f.Add(int64(3), int64(time.Second), int64(1), int64(666667*time.Microsecond))
	f.Add(int64(1<<40), int64(1000*time.Hour), int64(1<<40), int64(2000*time.Hour))
	f.Add(int64(1000), int64(time.Second), int64(7), int64(time.Hour))
	f.Fuzz(func(t *testing.T, count, period, atOnce, debt int64) {
		if count < 1 || period < 1 || atOnce < 1 || debt < 0 || int64(int(count)) != count || int64(int(atOnce)) != atOnce {
			return // int is 32 bits on 386
		}
		l := queuedLimit{limit: throttle.Limit{Count: int(count), Period: time.Duration(period)}, atOnce: int(atOnce)}
		got := holdOne(l, time.Duration(debt))
		num := new(big.Int).Mul(big.NewInt(debt), big.NewInt(count))
		num.Sub(num, new(big.Int).Mul(big.NewInt(atOnce), big.NewInt(period)))
		want := time.Duration(0)
		if num.Sign() > 0 {
			num.Quo(num, big.NewInt(count))
			want = time.Duration(num.Int64()).Truncate(time.Millisecond)
		}
		if got != want {
			t.Fatalf("holdOne(count %d, period %d, atOnce %d, debt %d) = %d, want %d", count, period, atOnce, debt, got, want)
		}
	})
}

// TestQueueFlagsInConfigFile: the nginx flags are limit flags, so a
// --config file (read again on SIGHUP) holds them too.
func TestQueueFlagsInConfigFile(t *testing.T) {
	t.Parallel()
	path := t.TempDir() + "/limits"
	if err := os.WriteFile(path, []byte("--limit 10/s --limit 500/h # nginx: two limit_req\n--burst 3 --queue 4\n--status 503\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	lc, err := readLimitFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if lc.queue == nil || lc.queue.describe() != "10/1s (3 at once, 4 queued) and 500/1h0m0s (3 at once, 4 queued)" || lc.queue.status != 503 {
		t.Errorf("config file read as %+v", lc.queue)
	}
	// On the command line next to --config, --queue is refused as
	// --limit is: one place for the limits.
	fs := flag.NewFlagSet("proxy", flag.ContinueOnError)
	var f proxyFlags
	f.register(fs)
	words, err := command.ParseInterspersed(fs, []string{"--listen", "127.0.0.1:0", "--queue", "2", "--config", path, "http://127.0.0.1:1"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := proxyConfigFrom(&f, fs, words); err == nil || !strings.Contains(err.Error(), "--queue is read from --config") {
		t.Errorf("--queue with --config: %v", err)
	}
}

// TestNoQueueNoHold: several limits without --queue go through the
// decision handler but hold nothing, whatever the algorithm (a sliding
// window's ResetAfter reaches two periods: it is not a debt).
func TestNoQueueNoHold(t *testing.T) {
	t.Parallel()
	for _, alg := range []string{"gcra", "sliding-window", "fixed-window", "sliding-log"} {
		synctest.Test(t, func(t *testing.T) {
			h, _, forwarded := queueServer(t, "--algorithm", alg, "--limit", "3/s", "--limit", "100/min")
			codes := ""
			for range 4 {
				o := send(h, context.Background())
				if o.took != 0 {
					t.Errorf("%s: a request held %v", alg, o.took)
				}
				codes += fmt.Sprint(o.code, " ")
			}
			if codes != "200 200 200 429 " || *forwarded != 3 {
				t.Errorf("%s: %s, %d forwarded", alg, codes, *forwarded)
			}
		})
	}
}
