package rlqs

import (
	"fmt"
	"testing"
	"testing/synctest"
	"time"

	"github.com/smoothrate/ratelimit/internal/rlqstest"
)

const apiConfig = `
domain: edge
buckets:
  - bucket_id: {route: api}
    requests_per_unit: 100
    unit: second
`

var api = map[string]string{"route": "api"}

func TestOneEnvoy(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h := newHarness(t, apiConfig, nil)
		e := h.envoy(rlqstest.Config{})
		start := time.Now()
		h.load(e, api, constant(300), start.Add(11*time.Second))
		time.Sleep(time.Second)
		got := allowedDuring(h.envs, api, func() { time.Sleep(10 * time.Second) })
		st := e.State(api)
		t.Logf("allowed %v in 10 s; state %+v; stats %+v", got, st, h.srv.Stats())
		if got[0] < 960 || got[0] > 1010 {
			t.Errorf("allowed %d in 10 s at 100/s", got[0])
		}
		h.wg.Wait()
	})
}

// TestUnequalDemands: four Envoys with unequal demands share one bucket's
// 100/s. Over 20 s of simulated time the fleet admits R within 5 %, and
// each Envoy its max-min share within 10 %: 10, 30, 30 and 30 of demands
// 10, 30, 60 and 90.
func TestUnequalDemands(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h := newHarness(t, apiConfig, nil)
		demands := []float64{10, 30, 60, 90}
		shares := []float64{10, 30, 30, 30}
		var envs []*rlqstest.Envoy
		for range demands {
			envs = append(envs, h.envoy(rlqstest.Config{}))
		}
		const T = 20 * time.Second
		got := allowedDuring(envs, api, func() {
			end := time.Now().Add(T)
			for i, e := range envs {
				h.load(e, api, constant(demands[i]), end)
			}
			h.wg.Wait()
		})
		total := 0.0
		for i, n := range got {
			total += float64(n)
			rate := float64(n) / T.Seconds()
			t.Logf("envoy %d: demand %v, admitted %.2f/s, share %v; %+v", i, demands[i], rate, shares[i], envs[i].Totals(api))
			if rate < shares[i]*0.9 || rate > shares[i]*1.1 {
				t.Errorf("envoy %d admitted %.2f/s, max-min share %v", i, rate, shares[i])
			}
		}
		if r := total / T.Seconds(); r < 95 || r > 105 {
			t.Errorf("the fleet admitted %.2f/s of 100/s", r)
		}
	})
}

// rates returns what each envoy admitted per second of id while f ran.
func ratesDuring(envs []*rlqstest.Envoy, id map[string]string, f func()) []float64 {
	start := time.Now()
	got := allowedDuring(envs, id, f)
	secs := time.Since(start).Seconds()
	out := make([]float64, len(got))
	for i, n := range got {
		out[i] = float64(n) / secs
	}
	return out
}

func within(t *testing.T, what string, got []float64, want []float64, tol float64) {
	t.Helper()
	for i := range got {
		if got[i] < want[i]*(1-tol) || got[i] > want[i]*(1+tol) {
			t.Errorf("%s: envoy %d admitted %.2f/s, want %.2f/s (±%.0f%%); all: %.2f", what, i, got[i], want[i], tol*100, got)
			return
		}
	}
	t.Logf("%s: %.2f", what, got)
}

// TestLeaveAndJoin: three Envoys that each want more than 90/s share it;
// one closes its stream and its share goes back to the others once its
// last assignment has expired; a new one joins and gets an equal share.
func TestLeaveAndJoin(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h := newHarness(t, `
domain: edge
buckets:
  - bucket_id: {route: api}
    requests_per_unit: 90
    unit: second
`, nil)
		a, b, c := h.envoy(rlqstest.Config{}), h.envoy(rlqstest.Config{}), h.envoy(rlqstest.Config{})
		start := time.Now()
		end := start.Add(18 * time.Second)
		h.load(a, api, constant(100), end)
		h.load(b, api, constant(100), end)
		h.load(c, api, constant(100), start.Add(5*time.Second))
		time.Sleep(2 * time.Second)
		within(t, "three", ratesDuring([]*rlqstest.Envoy{a, b, c}, api, func() { time.Sleep(3 * time.Second) }), []float64{29.7, 29.7, 29.7}, 0.05)
		c.Close() // at 5 s: its stream ends; its assignment expires by 5 + 3 + 0.2 s
		time.Sleep(3500 * time.Millisecond)
		within(t, "after one left", ratesDuring([]*rlqstest.Envoy{a, b}, api, func() { time.Sleep(3 * time.Second) }), []float64{44.55, 44.55}, 0.05)
		d := h.envoy(rlqstest.Config{}) // at 11.5 s
		h.load(d, api, constant(100), end)
		time.Sleep(1500 * time.Millisecond)
		within(t, "after one joined", ratesDuring([]*rlqstest.Envoy{a, b, d}, api, func() { time.Sleep(4 * time.Second) }), []float64{29.7, 29.7, 29.7}, 0.05)
	})
}

// TestDemandShift: shares follow demand within three reporting intervals.
func TestDemandShift(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h := newHarness(t, apiConfig, nil)
		a, b := h.envoy(rlqstest.Config{}), h.envoy(rlqstest.Config{})
		start := time.Now()
		end := start.Add(15 * time.Second)
		shift := start.Add(6 * time.Second)
		h.load(a, api, constant(90), end)
		h.load(b, api, func(now time.Time) float64 {
			if now.Before(shift) {
				return 20
			}
			return 90
		}, end)
		time.Sleep(2 * time.Second)
		within(t, "b wants 20", ratesDuring([]*rlqstest.Envoy{a, b}, api, func() { time.Sleep(4 * time.Second) }), []float64{79, 20}, 0.05)
		time.Sleep(3 * time.Second) // three reporting intervals after the shift
		within(t, "b wants 90", ratesDuring([]*rlqstest.Envoy{a, b}, api, func() { time.Sleep(6 * time.Second) }), []float64{49.5, 49.5}, 0.05)
	})
}

// TestServerRestart: Shutdown sends every Envoy its assignment with a time
// to live of 0, so each falls back at once to its expired-assignment
// behaviour; a new server in its place builds the shares again from the
// Envoys' next reports.
func TestServerRestart(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h := newHarness(t, apiConfig, nil)
		fallback := blanketStrategy(DenyAll)
		cfg := rlqstest.Config{Expired: fallback, ExpiredTimeout: 30 * time.Second}
		a, b := h.envoy(cfg), h.envoy(cfg)
		start := time.Now()
		end := start.Add(14 * time.Second)
		h.load(a, api, constant(80), end)
		h.load(b, api, constant(80), end)
		time.Sleep(3 * time.Second)
		if st := a.State(api); !st.Assigned {
			t.Fatalf("before the restart: %+v", st)
		}
		h.stop()
		time.Sleep(10 * time.Millisecond) // the TTL 0 has arrived
		for i, e := range []*rlqstest.Envoy{a, b} {
			if st := e.State(api); !st.Fallback || e.Totals(api).Expiries != 1 {
				t.Fatalf("envoy %d right after the shutdown: %+v, %+v", i, st, e.Totals(api))
			}
		}
		// While no server runs, the fallback (here DENY_ALL) decides.
		if got := allowedDuring([]*rlqstest.Envoy{a, b}, api, func() { time.Sleep(time.Second) }); got[0]+got[1] != 0 {
			t.Fatalf("admitted %v under DENY_ALL fallbacks", got)
		}
		h.start(mustConfig(t, apiConfig), nil)
		// Each Envoy opens a stream at one of its next reports (its gRPC
		// connection backs off after the first server went away) and
		// subscribes.
		time.Sleep(3 * time.Second)
		for i, e := range []*rlqstest.Envoy{a, b} {
			if st := e.State(api); !st.Assigned || e.Streams() != 2 {
				t.Fatalf("envoy %d after the restart: %+v, %d streams", i, st, e.Streams())
			}
		}
		within(t, "after the restart", ratesDuring([]*rlqstest.Envoy{a, b}, api, func() { time.Sleep(5 * time.Second) }), []float64{49.5, 49.5}, 0.05)
		if s := h.srv.Stats(); s.Streams != 2 || s.Subscriptions != 2 {
			t.Errorf("stats %+v", s)
		}
	})
}

// TestBlanketRules: a bucket id no entry matches gets the file's blanket
// rule, an entry may be a blanket rule, and a limit of 0 denies all; each
// is renewed while reported.
func TestBlanketRules(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h := newHarness(t, `
domain: edge
blanket_rule: deny_all
buckets:
  - bucket_id: {route: health}
    blanket_rule: allow_all
  - bucket_id: {route: admin}
    requests_per_unit: 0
    unit: hour
`, nil)
		e := h.envoy(rlqstest.Config{})
		other, health, admin := map[string]string{"route": "other"}, map[string]string{"route": "health"}, map[string]string{"route": "admin"}
		for _, id := range []map[string]string{other, health, admin} {
			h.load(e, id, constant(10), time.Now().Add(5*time.Second))
		}
		time.Sleep(500 * time.Millisecond)
		got := allowedDuring([]*rlqstest.Envoy{e}, other, func() { time.Sleep(4 * time.Second) })
		if got[0] != 0 {
			t.Errorf("an unmatched id under deny_all admitted %d", got[0])
		}
		if tot := e.Totals(health); tot.Denied != 0 || tot.Allowed < 45 {
			t.Errorf("allow_all entry: %+v", tot)
		}
		if tot := e.Totals(admin); tot.Allowed != 1 { // the first, by the no-assignment behaviour
			t.Errorf("requests_per_unit 0: %+v", tot)
		}
		for _, id := range []map[string]string{other, health, admin} {
			if st := e.State(id); !st.Assigned || st.Strategy.GetBlanketRule().String() == "" {
				t.Errorf("%v: %+v", id, st)
			}
		}
	})
}

// TestUnknownDomain: a stream of another domain is ended with NOT_FOUND;
// its Envoy stays with its no-assignment behaviour and keeps trying.
func TestUnknownDomain(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h := newHarness(t, apiConfig, nil)
		e := h.envoy(rlqstest.Config{Domain: "elsewhere"})
		h.load(e, api, constant(10), time.Now().Add(3*time.Second))
		h.wg.Wait()
		if st := e.State(api); st.Assigned {
			t.Errorf("assigned in an unknown domain: %+v", st)
		}
		if s := h.srv.Stats(); s.UnknownDomains < 2 || s.Streams != 0 || s.Buckets != 0 {
			t.Errorf("stats %+v", s)
		}
	})
}

// TestAbandonIdle: a bucket reported with no request for abandon_after is
// abandoned: the Envoy forgets it, and subscribes anew at its next request.
func TestAbandonIdle(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h := newHarness(t, `
domain: edge
abandon_after: 5s
buckets:
  - bucket_id: {route: api}
    requests_per_unit: 100
    unit: second
`, nil)
		e := h.envoy(rlqstest.Config{})
		h.load(e, api, constant(10), time.Now().Add(2*time.Second))
		h.wg.Wait()
		time.Sleep(4 * time.Second)
		if !e.State(api).Known {
			t.Fatal("abandoned too early")
		}
		time.Sleep(2 * time.Second)
		if st, tot := e.State(api), e.Totals(api); st.Known || tot.Abandons != 1 {
			t.Fatalf("after 6 s idle: %+v %+v", st, tot)
		}
		if s := h.srv.Stats(); s.Abandons != 1 || s.Subscriptions != 0 {
			t.Errorf("stats %+v", s)
		}
		e.Request(api)
		time.Sleep(100 * time.Millisecond)
		if !e.State(api).Assigned {
			t.Fatalf("not subscribed again: %+v", e.State(api))
		}
	})
}

// TestWildcardIDs: {user: "*"} gives each user a limit of its own.
func TestWildcardIDs(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h := newHarness(t, `
domain: edge
buckets:
  - bucket_id: {route: login, user: "*"}
    requests_per_unit: 6
    unit: minute
`, nil)
		e, f := h.envoy(rlqstest.Config{}), h.envoy(rlqstest.Config{})
		bob, ann := map[string]string{"route": "login", "user": "bob"}, map[string]string{"user": "ann", "route": "login"}
		end := time.Now().Add(2 * time.Minute)
		h.load(e, bob, constant(1), end)
		h.load(f, bob, constant(1), end)
		h.load(e, ann, constant(1), end)
		h.wg.Wait()
		if s := h.srv.Stats(); s.Buckets != 2 {
			t.Errorf("stats %+v", s)
		}
		// Bob's two Envoys share 6 a minute; Ann has 6 of her own. Over
		// two minutes: 12 each, plus each token bucket's one token.
		bobs := e.Totals(bob).Allowed + f.Totals(bob).Allowed
		if anns := e.Totals(ann).Allowed; bobs < 11 || bobs > 16 || anns < 11 || anns > 14 {
			t.Errorf("bob %d, ann %d in two minutes at 6 a minute each", bobs, anns)
		}
	})
}

// TestSetConfig: a lower limit is applied at once, without waiting for
// reports.
func TestSetConfig(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h := newHarness(t, apiConfig, nil)
		a, b := h.envoy(rlqstest.Config{}), h.envoy(rlqstest.Config{})
		end := time.Now().Add(8 * time.Second)
		h.load(a, api, constant(100), end)
		h.load(b, api, constant(100), end)
		time.Sleep(3 * time.Second)
		if err := h.srv.SetConfig(mustConfig(t, `
domain: edge
buckets:
  - bucket_id: {route: api}
    requests_per_unit: 40
    unit: second
`)); err != nil {
			t.Fatal(err)
		}
		time.Sleep(50 * time.Millisecond)
		for _, e := range []*rlqstest.Envoy{a, b} {
			if r := e.State(api).Rate; r > 20 {
				t.Fatalf("rate %v after the limit fell to 40", r)
			}
		}
		within(t, "limit 40", ratesDuring([]*rlqstest.Envoy{a, b}, api, func() { time.Sleep(4 * time.Second) }), []float64{19.8, 19.8}, 0.05)
		if s := h.srv.Stats(); s.ConfigLoads != 2 {
			t.Errorf("stats %+v", s)
		}
	})
}

// TestMaxBucketsPerStream: a stream holds at most WithMaxBucketsPerStream
// buckets at once; a report of one more is refused (the Envoy gets no
// assignment for it) until one of its buckets is abandoned, which frees
// its place.
func TestMaxBucketsPerStream(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h := newHarness(t, `
domain: edge
abandon_after: 5s
buckets:
  - bucket_id: {route: login, user: "*"}
    requests_per_unit: 100
    unit: second
`, nil, WithMaxBucketsPerStream(2))
		e := h.envoy(rlqstest.Config{})
		user := func(u string) map[string]string { return map[string]string{"route": "login", "user": u} }
		a, b, c := user("a"), user("b"), user("c")
		e.Request(a)
		e.Request(b)
		time.Sleep(1500 * time.Millisecond)
		e.Request(c)
		time.Sleep(1500 * time.Millisecond)
		if !e.State(a).Assigned || !e.State(b).Assigned || e.State(c).Assigned {
			t.Fatalf("a %+v, b %+v, c %+v: want a and b assigned, c refused", e.State(a), e.State(b), e.State(c))
		}
		if s := h.srv.Stats(); s.Subscriptions != 2 || s.InvalidReports == 0 {
			t.Fatalf("stats %+v: want 2 subscriptions and c's reports refused", s)
		}
		// a goes idle and is abandoned after 5 s; c, still reported, then
		// takes its place.
		for range 8 {
			e.Request(b)
			e.Request(c)
			time.Sleep(time.Second)
		}
		if e.State(a).Known || !e.State(c).Assigned {
			t.Fatalf("after a's abandon: a %+v, c %+v", e.State(a), e.State(c))
		}
		if s := h.srv.Stats(); s.Subscriptions != 2 || s.Abandons != 1 {
			t.Errorf("stats %+v", s)
		}
	})
}

// TestAbandonForgetsStreamBucket: a stream's record of its buckets drops
// the ones abandoned, so that a long-lived Envoy whose bucket ids change
// (a value per user) holds no more than it reports.
func TestAbandonForgetsStreamBucket(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h := newHarness(t, `
domain: edge
abandon_after: 3s
buckets:
  - bucket_id: {route: login, user: "*"}
    requests_per_unit: 100
    unit: second
`, nil)
		e := h.envoy(rlqstest.Config{})
		for i := range 20 {
			e.Request(map[string]string{"route": "login", "user": fmt.Sprint(i)})
			time.Sleep(time.Second)
		}
		time.Sleep(5 * time.Second)
		h.srv.mu.Lock()
		held := 0
		for st := range h.srv.streams {
			st.mu.Lock()
			held += len(st.buckets)
			st.mu.Unlock()
		}
		h.srv.mu.Unlock()
		if s := h.srv.Stats(); held != 0 || s.Subscriptions != 0 || s.Buckets != 0 {
			t.Errorf("20 users, each idle past abandon_after: the stream still holds %d buckets; stats %+v", held, s)
		}
	})
}

// failingStore is a Redis whose every claim fails with err.
type failingStore struct{ err error }

func (f failingStore) claim(time.Duration, *claim) (grant, error) { return grant{}, f.err }

// TestBlanketToLimitWithoutStore: a bucket reloaded from allow_all to a
// limit while the server has never claimed it (Redis away since the start,
// or set up wrong) knows no share: its Envoy, running ALLOW_ALL, gets
// DENY_ALL, not ALLOW_ALL renewed at every report. Without a store it gets
// the whole limit.
func TestBlanketToLimitWithoutStore(t *testing.T) {
	for name, c := range map[string]struct {
		store   Store
		atMost  uint64
		atLeast uint64
	}{
		"alone":        {nil, 5*10 + 20, 40},
		"redis away":   {failingStore{fmt.Errorf("%w: dial tcp: connection refused", ErrUnavailable)}, 0, 0},
		"set up wrong": {failingStore{fmt.Errorf("%w: WRONGPASS invalid username-password pair", ErrMisconfigured)}, 0, 0},
	} {
		t.Run(name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				h := newHarness(t, `
domain: edge
buckets:
  - bucket_id: {route: api}
    blanket_rule: allow_all
`, c.store)
				e := h.envoy(rlqstest.Config{})
				api := map[string]string{"route": "api"}
				h.load(e, api, constant(100), time.Now().Add(12*time.Second))
				time.Sleep(2 * time.Second)
				if st := e.State(api); !st.Assigned || st.Strategy.GetBlanketRule().String() != "ALLOW_ALL" {
					t.Fatalf("before the reload: %+v", st)
				}
				if err := h.srv.SetConfig(mustConfig(t, `
domain: edge
buckets:
  - bucket_id: {route: api}
    requests_per_unit: 10
    unit: second
`)); err != nil {
					t.Fatal(err)
				}
				time.Sleep(3 * time.Second)
				got := allowedDuring([]*rlqstest.Envoy{e}, api, func() { time.Sleep(5 * time.Second) })
				if got[0] > c.atMost || got[0] < c.atLeast {
					t.Errorf("a bucket limited to 10/s admitted %d in 5 s, want %d to %d (strategy in force: %v)", got[0], c.atLeast, c.atMost, e.State(api).Strategy)
				}
			})
		})
	}
}
