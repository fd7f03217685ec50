package rls

import (
	"context"
	"fmt"
	"math"
	"math/rand"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"google.golang.org/grpc/codes"
	grpcstatus "google.golang.org/grpc/status"

	"github.com/smoothrate/ratelimit/internal/redistest"
)

// broadNarrow is a broad limit (10 a minute) and a narrow one (2 a minute),
// as the reference's windows, or with either as one of the additions.
func broadNarrow(broadAlg, narrowAlg string) string {
	return fmt.Sprintf(`
domain: d
descriptors:
  - key: broad
    rate_limit: {unit: minute, requests_per_unit: 10%s}
  - key: narrow
    rate_limit: {unit: minute, requests_per_unit: 2%s}
`, broadAlg, narrowAlg)
}

// broadNarrowCalls sends one call of a broad and a narrow descriptor six
// times for each of six narrow values, and returns how many were
// admitted.
func broadNarrowCalls(t *testing.T, svc *Service) int {
	t.Helper()
	admitted := 0
	for v := range 6 {
		for range 6 {
			resp, err := svc.ShouldRateLimit(context.Background(), request("d", 0, desc("broad", "all"), desc("narrow", strconv.Itoa(v))))
			if err != nil {
				t.Fatal(err)
			}
			if resp.OverallCode == ok {
				admitted++
			}
		}
	}
	return admitted
}

// WithCountOnlyAdmitted counts a call in none of its windows when any
// refuses it: the broad limit is spent on admitted calls only, so 10 of
// the 36 calls pass, as with the reference's
// STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT; counting every hit, a call
// refused by the narrow limit still fills the broad one, and 4 pass. The
// same holds when either limit is one of the additions (the windows'
// hits taken back when an addition refuses, the additions only asked
// when a window refuses), on both stores.
func TestCountOnlyAdmittedWholeCall(t *testing.T) {
	storeKinds(t, func(t *testing.T, newStore func(*testClock, ...StoreOption) Store) {
		for _, algs := range [][2]string{{"", ""}, {"", ", algorithm: gcra"}, {", algorithm: gcra", ""}, {", algorithm: sliding-window", ", algorithm: sliding-log"}} {
			cfg := parseYAML(t, broadNarrow(algs[0], algs[1]))
			for _, c := range []struct {
				opts []Option
				want int
			}{{nil, 4}, {[]Option{WithCountOnlyAdmitted()}, 10}} {
				svc, err := New(cfg, newStore(newTestClock(T0)), c.opts...)
				if err != nil {
					t.Fatal(err)
				}
				if got := broadNarrowCalls(t, svc); got != c.want {
					t.Errorf("broad%s, narrow%s, %d options: %d of 36 calls admitted, want %d", algs[0], algs[1], len(c.opts), got, c.want)
				}
			}
		}
	})
}

// A call counted whole reports, for a window that fits but is not counted
// because another refuses, what the window holds; for the one that
// refuses, the count with the call's hits, as when counting every hit.
func TestCountOnlyAdmittedRefusedCallReports(t *testing.T) {
	storeKinds(t, func(t *testing.T, newStore func(*testClock, ...StoreOption) Store) {
		svc, err := New(parseYAML(t, broadNarrow("", "")), newStore(newTestClock(T0)), WithCountOnlyAdmitted())
		if err != nil {
			t.Fatal(err)
		}
		req := request("d", 0, desc("broad", "all"), desc("narrow", "x"))
		for i := range 2 {
			got, err := svc.ShouldRateLimit(context.Background(), req)
			if err != nil {
				t.Fatal(err)
			}
			checkResponse(t, fmt.Sprintf("call %d", i), got, response(ok, status(ok, "", 10, mnt, uint32(9-i), 40), status(ok, "", 2, mnt, uint32(1-i), 40)))
		}
		got, err := svc.ShouldRateLimit(context.Background(), req)
		if err != nil {
			t.Fatal(err)
		}
		checkResponse(t, "refused call", got, response(over, status(ok, "", 10, mnt, 8, 40), status(over, "", 2, mnt, 0, 40)))
	})
}

// Counted whole, concurrent calls from two services sharing one Redis
// never admit past a limit, and a window holds exactly the admitted
// calls' hits: no refused call counts, none is lost (the reference reads,
// then writes, and can overshoot). With an addition among the limits, a
// refused call's windows are taken back: they hold the admitted calls
// exactly once every call has returned.
func TestCountOnlyAdmittedConcurrent(t *testing.T) {
	srv := redistest.Start(t)
	for _, narrowAlg := range []string{"", ", algorithm: gcra"} {
		t.Run("narrow"+narrowAlg, func(t *testing.T) {
			admin := redis.NewClient(&redis.Options{Addr: srv.Addr()})
			defer admin.Close()
			admin.FlushAll(context.Background())
			cfg := parseYAML(t, fmt.Sprintf(`
domain: d
descriptors:
  - key: broad
    rate_limit: {unit: hour, requests_per_unit: 50}
  - key: narrow
    rate_limit: {unit: hour, requests_per_unit: 3%s}
`, narrowAlg))
			clock := newTestClock(T0)
			var svcs [2]*Service
			for i := range svcs {
				c := redis.NewClient(&redis.Options{Addr: srv.Addr()})
				defer c.Close()
				store, err := NewRedisStore(c, WithStoreClock(clock))
				if err != nil {
					t.Fatal(err)
				}
				if svcs[i], err = New(cfg, store, WithCountOnlyAdmitted()); err != nil {
					t.Fatal(err)
				}
			}
			const callers, calls, values = 8, 40, 20
			var admitted atomic.Int64
			var perValue [values]atomic.Int64
			var wg sync.WaitGroup
			for g := range callers {
				wg.Add(1)
				go func() {
					defer wg.Done()
					for i := range calls {
						v := (g*7 + i) % values
						resp, err := svcs[g%2].ShouldRateLimit(context.Background(), request("d", 0, desc("broad", "all"), desc("narrow", strconv.Itoa(v))))
						if err != nil {
							t.Error(err)
							return
						}
						if resp.OverallCode == ok {
							admitted.Add(1)
							perValue[v].Add(1)
						}
					}
				}()
			}
			wg.Wait()
			n := admitted.Load()
			if n > 50 || narrowAlg == "" && n != 50 {
				t.Errorf("%d calls admitted against a limit of 50", n)
			}
			for v := range perValue {
				if got := perValue[v].Load(); got > 3 {
					t.Errorf("narrow %d: %d calls admitted against a limit of 3", v, got)
				}
			}
			start := T0 / 3600 * 3600
			broad, err := admin.Get(context.Background(), "d_broad_all_"+strconv.Itoa(start)).Int64()
			if err != nil || broad != n {
				t.Errorf("the broad window holds %d (%v), want the %d calls admitted", broad, err, n)
			}
			if narrowAlg == "" {
				for v := range perValue {
					got, _ := admin.Get(context.Background(), "d_narrow_"+strconv.Itoa(v)+"_"+strconv.Itoa(start)).Int64()
					if got != perValue[v].Load() {
						t.Errorf("narrow %d holds %d, want the %d calls admitted", v, got, perValue[v].Load())
					}
				}
			}
		})
	}
}

// hugeHits are hits_addend values at and past every bound: int32, uint32,
// where a window saturates, int64 and uint64.
var hugeHits = []uint64{1 << 31, 1<<32 + 5, maxCount, maxCount + 1, math.MaxInt64, 1 << 63, math.MaxUint64}

// A huge hits_addend is safe on both stores: the descriptor is over its
// limit, and every later call on it (from anyone) is answered OVER_LIMIT,
// not INTERNAL, until the window ends. On Redis it made INCRBY overflow;
// a counter near 2^63 written by another program is set back to where the
// windows saturate.
func TestHugeHitsAddend(t *testing.T) {
	storeKinds(t, func(t *testing.T, newStore func(*testClock, ...StoreOption) Store) {
		cfg := parseYAML(t, mixedConfig)
		for _, only := range []bool{false, true} {
			for _, h := range hugeHits {
				clock := newTestClock(T0)
				var opts []Option
				if only {
					opts = append(opts, WithCountOnlyAdmitted())
				}
				svc, err := New(cfg, newStore(clock), opts...)
				if err != nil {
					t.Fatal(err)
				}
				for _, key := range []string{"w", "mul", "g", "l"} {
					what := fmt.Sprintf("count only admitted %v, %s, hits %d", only, key, h)
					for i, hits := range []uint64{h, 1, h, 0} {
						got, err := svc.ShouldRateLimit(context.Background(), request("d", 0, withHits(desc(key, "x"), hits)))
						if err != nil {
							t.Fatalf("%s, call %d: %v", what, i, err)
						}
						if i == 1 && (only || key == "g") {
							// Nothing was counted: 1 fits.
							if got.OverallCode != ok {
								t.Errorf("%s: a hit after a refused huge one: %v", what, got.OverallCode)
							}
							continue
						}
						if got.OverallCode != over && hits > 0 {
							t.Errorf("%s, call %d: %v, want OVER_LIMIT", what, i, got.OverallCode)
						}
					}
				}
				clock.set(time.Unix(T0+3600, 0))
				got, err := svc.ShouldRateLimit(context.Background(), request("d", 0, desc("w", "x")))
				if err != nil || got.OverallCode != ok {
					t.Errorf("hits %d: the next window: %v, %v", h, got, err)
				}
			}
		}
	})
	t.Run("foreign counter", func(t *testing.T) {
		store, c := redisStore(t, newTestClock(T0))
		svc, err := New(parseYAML(t, mixedConfig), store)
		if err != nil {
			t.Fatal(err)
		}
		key := "d_w_x_" + strconv.Itoa(T0)
		if err := c.Set(context.Background(), key, strconv.FormatInt(math.MaxInt64, 10), time.Minute).Err(); err != nil {
			t.Fatal(err)
		}
		for i := range 2 {
			got, err := svc.ShouldRateLimit(context.Background(), request("d", 0, desc("w", "x")))
			if err != nil || got.OverallCode != over {
				t.Fatalf("call %d on a counter at 2^63−1: %v, %v; want OVER_LIMIT", i, got, err)
			}
		}
		if v, _ := c.Get(context.Background(), key).Uint64(); v != maxCount {
			t.Errorf("the counter holds %d, want %d", v, uint64(maxCount))
		}
		if ttl := c.TTL(context.Background(), key).Val(); ttl <= 0 || ttl > time.Minute {
			t.Errorf("the saturated counter's TTL is %v", ttl)
		}
	})
}

// The memory store and Redis answer identically for huge hits_addend
// values, per descriptor and per request, with and without counting only
// admitted calls: random calls as in TestStoresAgree.
func TestHugeHitsStoresAgree(t *testing.T) {
	srv := redistest.Start(t)
	for _, only := range []bool{false, true} {
		t.Run(fmt.Sprint("onlyAdmitted=", only), func(t *testing.T) {
			a, b, clock := agreeing(t, srv, only)
			keys := []string{"w", "m", "g", "l", "t", "k", "u"}
			r := rand.New(rand.NewSource(29))
			now := time.Unix(T0, 0)
			for i := range 400 {
				now = now.Add(time.Duration([]int{0, 0, 700, 20000}[r.Intn(4)]) * time.Millisecond)
				clock.set(now)
				req := request("d", uint32(r.Intn(2))*math.MaxUint32)
				for range 1 + r.Intn(3) {
					d := desc(keys[r.Intn(len(keys))], "x")
					switch r.Intn(3) {
					case 0:
						withHits(d, hugeHits[r.Intn(len(hugeHits))])
					case 1:
						withHits(d, uint64(r.Intn(3)))
					}
					req.Descriptors = append(req.Descriptors, d)
				}
				sameAnswer(t, fmt.Sprintf("call %d", i), a, b, req)
			}
			for _, k := range []string{"d.w", "d.g"} {
				if ca, cb := a.RuleCounts(k), b.RuleCounts(k); ca != cb {
					t.Errorf("%s: counts %+v on memory, %+v on redis", k, ca, cb)
				}
			}
		})
	}
}

// The metrics of a rule saturate instead of wrapping around.
func TestHugeHitsMetricsSaturate(t *testing.T) {
	svc, err := New(parseYAML(t, mixedConfig), nil)
	if err != nil {
		t.Fatal(err)
	}
	for range 3 {
		if _, err := svc.ShouldRateLimit(context.Background(), request("d", 0, withHits(desc("w", "x"), math.MaxUint64))); err != nil {
			t.Fatal(err)
		}
	}
	if c := svc.RuleCounts("d.w"); c.TotalHits != math.MaxUint64 || c.OverLimit != math.MaxUint64 {
		t.Errorf("after three calls of 2^64−1 hits: %+v", c)
	}
}

// A call with more descriptors than WithMaxDescriptors is refused
// INVALID_ARGUMENT before any store work.
func TestMaxDescriptors(t *testing.T) {
	for _, c := range []struct {
		opts []Option
		max  int
	}{{nil, DefaultMaxDescriptors}, {[]Option{WithMaxDescriptors(3)}, 3}} {
		store, _ := NewMemoryStore()
		svc, err := New(parseYAML(t, mixedConfig), store, c.opts...)
		if err != nil {
			t.Fatal(err)
		}
		req := request("d", 0)
		for i := range c.max + 1 {
			req.Descriptors = append(req.Descriptors, desc("g", strconv.Itoa(i)))
		}
		_, err = svc.ShouldRateLimit(context.Background(), req)
		if grpcstatus.Code(err) != codes.InvalidArgument {
			t.Errorf("%d descriptors, at most %d: %v, want INVALID_ARGUMENT", c.max+1, c.max, err)
		}
		if st := store.Stats(); st.Windows != 0 || st.Additions.Keys != 0 {
			t.Errorf("a refused call did store work: %+v", st)
		}
		req.Descriptors = req.Descriptors[:c.max]
		if _, err := svc.ShouldRateLimit(context.Background(), req); err != nil {
			t.Errorf("%d descriptors, at most %d: %v", c.max, c.max, err)
		}
		if st := store.Stats(); st.Additions.Keys != c.max {
			t.Errorf("%d descriptors counted %d keys", c.max, st.Additions.Keys)
		}
	}
	if _, err := New(nil, nil, WithMaxDescriptors(0)); err == nil {
		t.Error("WithMaxDescriptors(0) accepted")
	}
}

// In a Redis Cluster a call's windows live in several slots: counted
// whole, each is counted if it fits and taken back if another does not,
// and the broad/narrow calls admit 10 of 36 as on one server.
func TestCountOnlyAdmittedCluster(t *testing.T) {
	cl := redistest.StartCluster(t, 3)
	client := redis.NewClusterClient(&redis.ClusterOptions{Addrs: cl.Addrs()})
	defer client.Close()
	for _, narrowAlg := range []string{"", ", algorithm: gcra"} {
		for _, c := range []struct {
			opts []Option
			want int
		}{{nil, 4}, {[]Option{WithCountOnlyAdmitted()}, 10}} {
			if err := client.ForEachMaster(context.Background(), func(ctx context.Context, m *redis.Client) error { return m.FlushAll(ctx).Err() }); err != nil {
				t.Fatal(err)
			}
			store, err := NewRedisStore(client, WithStoreClock(newTestClock(T0)))
			if err != nil {
				t.Fatal(err)
			}
			svc, err := New(parseYAML(t, broadNarrow("", narrowAlg)), store, c.opts...)
			if err != nil {
				t.Fatal(err)
			}
			if got := broadNarrowCalls(t, svc); got != c.want {
				t.Errorf("narrow%s, %d options: %d of 36 calls admitted, want %d", narrowAlg, len(c.opts), got, c.want)
			}
			broad, err := client.Get(context.Background(), "d_broad_all_"+strconv.Itoa(T0/60*60)).Int()
			if err != nil || c.opts != nil && broad != 10 {
				t.Errorf("narrow%s, %d options: the broad window holds %d (%v)", narrowAlg, len(c.opts), broad, err)
			}
		}
	}
}
