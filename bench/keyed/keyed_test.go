package keyed

import (
	"context"
	"fmt"
	"hash/maphash"
	"math"
	"math/rand/v2"
	"runtime"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
	"unsafe"

	"github.com/go-chi/httprate"
	"github.com/sethvargo/go-limiter/memorystore"
	"github.com/smoothrate/ratelimit/throttle"
	"github.com/throttled/throttled/v2"
	"github.com/throttled/throttled/v2/store/memstore"
	"github.com/ulule/limiter/v3"
	ulmemory "github.com/ulule/limiter/v3/drivers/store/memory"
)

// liveKeys is how many keys every store holds while measured.
const liveKeys = 100_000

// perKey per period is each key's limit: far above what a benchmark sends
// one key (b.N/liveKeys calls), so every decision is an admission, and
// with a period of 1000 hours a request weighs 3.6 s, so a key's state
// stays live between two visits even on a loaded machine (at 1 000 000
// per second it would be back to full, expired, after 1 µs, and a store
// that reclaims expired keys would measure re-inserts): every decision is
// on an existing key, the common case of a server under normal load.
const (
	perKey = 1_000_000
	period = 1000 * time.Hour
)

// firstSeen is the order in which the keys first arrive (and the stores
// allocate their state); keys is the order of the measured calls, another
// random order, so that consecutive calls touch unrelated memory as
// requests from many clients do. (Measured in the order of first arrival,
// a store that allocates one object per key in arrival order would walk
// its objects sequentially, which real traffic never does.)
//
// The measured keys are strings of their own, equal to the first-seen
// ones but elsewhere in memory, allocated in the measured order: a
// server builds each request's key just before deciding on it (it is in
// the processor's cache, as a string read in order is), and a store that
// keeps the key of a key's first request compares the caller's with that
// one, which is not. Given the very strings the stores keep, the
// comparison would find the two the same pointer and read nothing: a
// flattery of the stores that keep keys (ours and the Go maps), which no
// server sees.
var firstSeen, keys = func() ([]string, []string) {
	ks := make([]string, liveKeys)
	for i := range ks {
		ks[i] = fmt.Sprintf("client:%d", i)
	}
	r := rand.New(rand.NewPCG(1, 2))
	r.Shuffle(len(ks), func(i, j int) { ks[i], ks[j] = ks[j], ks[i] })
	measured := slices.Clone(ks)
	r.Shuffle(len(measured), func(i, j int) { measured[i], measured[j] = measured[j], measured[i] })
	for i := range measured {
		measured[i] = strings.Clone(measured[i])
	}
	return ks, measured
}()

// TestMeasuredKeysAreOwnStrings: the measured keys are the first-seen
// keys, each a string of its own (see firstSeen).
func TestMeasuredKeysAreOwnStrings(t *testing.T) {
	seen := make(map[*byte]string, liveKeys)
	for _, k := range firstSeen {
		seen[unsafe.StringData(k)] = k
	}
	for _, k := range keys {
		if _, ok := seen[unsafe.StringData(k)]; ok {
			t.Fatalf("measured key %q is the first-seen string", k)
		}
	}
	if !slices.Equal(slices.Sorted(slices.Values(keys)), slices.Sorted(slices.Values(firstSeen))) {
		t.Fatal("the measured keys are not the first-seen keys")
	}
}

// decider is one library's "may key do one more now?", returning whether
// it allowed.
type decider func(key string) bool

type peer struct {
	name string
	make func(b *testing.B) decider
}

var ctx = context.Background()

func ours(alg throttle.Algorithm) func(b *testing.B) decider {
	return func(b *testing.B) decider {
		st, err := throttle.NewMemoryStore()
		if err != nil {
			b.Fatal(err)
		}
		lim, err := throttle.New(st, alg, throttle.Limit{Count: perKey, Period: period})
		if err != nil {
			b.Fatal(err)
		}
		return func(key string) bool {
			d, err := lim.Allow(ctx, key)
			return err == nil && d.Allowed
		}
	}
}

var peers = []peer{
	{"ours-gcra", ours(throttle.GCRA)},
	{"ours-fixed-window", ours(throttle.FixedWindow)},
	{"ours-sliding-window", ours(throttle.SlidingWindow)},
	// sethvargo/go-limiter's memorystore: a bucket per key, reset each
	// interval; one map behind one RWMutex.
	{"sethvargo", func(b *testing.B) decider {
		s, err := memorystore.New(&memorystore.Config{Tokens: perKey, Interval: period})
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { s.Close(ctx) })
		return func(key string) bool {
			_, _, _, ok, err := s.Take(ctx, key)
			return err == nil && ok
		}
	}},
	// throttled's GCRA over its memstore (an LRU of liveKeys).
	{"throttled", func(b *testing.B) decider {
		st, err := memstore.NewCtx(liveKeys)
		if err != nil {
			b.Fatal(err)
		}
		rl, err := throttled.NewGCRARateLimiterCtx(st, throttled.RateQuota{MaxRate: throttled.PerDuration(perKey, period), MaxBurst: perKey - 1})
		if err != nil {
			b.Fatal(err)
		}
		return func(key string) bool {
			limited, _, err := rl.RateLimitCtx(ctx, key, 1)
			return err == nil && !limited
		}
	}},
	// ulule/limiter's memory store (fixed window).
	{"ulule", func(b *testing.B) decider {
		lim := limiter.New(ulmemory.NewStore(), limiter.Rate{Period: period, Limit: perKey})
		return func(key string) bool {
			c, err := lim.Get(ctx, key)
			return err == nil && !c.Reached
		}
	}},
	// go-chi/httprate's local counter, decided as its RateLimiter.OnLimit
	// does (one mutex around read, weigh, increment) without the HTTP
	// headers, so that the counter is measured, not net/http.
	{"httprate", func(b *testing.B) decider {
		c := httprate.NewLocalLimitCounter(period)
		c.Config(perKey, period)
		var mu sync.Mutex
		return func(key string) bool {
			now := time.Now().UTC()
			curr := now.Truncate(period)
			mu.Lock()
			defer mu.Unlock()
			n, prev, err := c.Get(key, curr, curr.Add(-period))
			if err != nil {
				return false
			}
			rate := float64(prev)*(float64(period)-float64(now.Sub(curr)))/float64(period) + float64(n)
			if int(math.Round(rate))+1 > perKey {
				return false
			}
			return c.IncrementBy(key, curr, 1) == nil
		}
	}},
	// The floors: not limiters, but what any store's decision must
	// include. floor-hash reads and hashes the caller's key and nothing
	// else (every store hashes the key it is given; with nothing else to
	// do, the processor overlaps the reads of many keys); floor-map finds
	// the key in Go's own map (no clock, no lock, no
	// arithmetic, no write), the cheapest "where is this key's state?";
	// floor-map64 does the same with 64-byte values (twice our 32-byte
	// entry), which is what such a footprint alone costs.
	{"floor-hash", func(b *testing.B) decider {
		seed := maphash.MakeSeed()
		return func(key string) bool { return maphash.String(seed, key) != 0 }
	}},
	{"floor-map", func(b *testing.B) decider {
		m := make(map[string]int64, liveKeys)
		for _, k := range firstSeen {
			m[k] = 1
		}
		return func(key string) bool { return m[key] == 1 }
	}},
	{"floor-map64", func(b *testing.B) decider {
		m := make(map[string][6]int64, liveKeys)
		for _, k := range firstSeen {
			m[k] = [6]int64{1}
		}
		return func(key string) bool { return m[key][0] == 1 }
	}},
}

// warm makes every key live in the store, then collects garbage, so that
// no benchmark is measured while the collector works off the previous
// one's 100 000 keys (with two cores, a background mark takes half the
// machine).
func warm(b *testing.B, d decider) {
	b.Helper()
	for _, k := range firstSeen {
		if !d(k) {
			b.Fatalf("warming %s: refused", k)
		}
	}
	runtime.GC()
}

// BenchmarkKeyed: one goroutine, decisions on existing keys.
func BenchmarkKeyed(b *testing.B) {
	for _, p := range peers {
		b.Run(p.name, func(b *testing.B) {
			d := p.make(b)
			warm(b, d)
			b.ReportAllocs()
			i := 0
			for b.Loop() {
				if !d(keys[i]) {
					b.Fatalf("%s refused %s", p.name, keys[i])
				}
				if i++; i == liveKeys {
					i = 0
				}
			}
		})
	}
}

// BenchmarkKeyedParallel: GOMAXPROCS goroutines, each walking the keys
// from its own offset, the offsets spread evenly over the keys, so that a
// key waits as many decisions between two visits as in BenchmarkKeyed.
// (Goroutines that walk the same order a few thousand keys apart find
// the entries the other just used in the shared cache: decisions no
// server sees, which flatter the stores that wait for memory and cost the
// ones whose lines then move between processors.)
func BenchmarkKeyedParallel(b *testing.B) {
	for _, p := range peers {
		b.Run(p.name, func(b *testing.B) {
			d := p.make(b)
			warm(b, d)
			var next, refused atomic.Int64
			b.ReportAllocs()
			b.ResetTimer()
			b.RunParallel(func(pb *testing.PB) {
				i := int(next.Add(1)-1) * liveKeys / runtime.GOMAXPROCS(0) % liveKeys
				for pb.Next() {
					if !d(keys[i]) {
						refused.Add(1)
					}
					if i++; i == liveKeys {
						i = 0
					}
				}
			})
			if n := refused.Load(); n > 0 {
				b.Fatalf("%s refused %d decisions", p.name, n)
			}
		})
	}
}

// BenchmarkMemoryLatency is not a limiter but the machine: one dependent
// load per op, in a random cycle through a working set of the given size
// (one 8-byte word per 64-byte line), the cost of a random memory
// reference that misses every cache smaller than the set. It tells how
// much of a store's decision at liveKeys is the memory its state takes.
func BenchmarkMemoryLatency(b *testing.B) {
	for _, kib := range []int{256, 1024, 3072, 6144, 24576} {
		lines := kib * 1024 / 64
		next := make([]int64, lines*8)
		perm := rand.New(rand.NewPCG(3, 4)).Perm(lines)
		for i, p := range perm {
			next[p*8] = int64(perm[(i+1)%lines] * 8)
		}
		b.Run(fmt.Sprintf("%dKiB", kib), func(b *testing.B) {
			p := int64(0)
			for b.Loop() {
				p = next[p]
			}
			sinkLatency = p
		})
	}
}

var sinkLatency int64

// alternated are the peers BenchmarkKeyedAlternating measures ours with:
// the fastest, serial and parallel.
var alternated = []string{"httprate", "sethvargo"}

// turn is how many decisions a store makes in one turn of
// BenchmarkKeyedAlternating: a quarter of the keys, some milliseconds.
const turn = liveKeys / 4

// BenchmarkKeyedAlternating measures ours-gcra and a peer in turns, each
// making turn decisions on its own store (the keys in the measured order,
// each store from where its last turn ended) while the other waits, b.N
// decisions each in all, serial (procs=1) and with GOMAXPROCS goroutines,
// and reports both stores' ns per decision and their ratio (ns/op is the
// time of one decision of each). The separate benchmarks are measured
// seconds apart, and on a shared machine whose memory is slower or faster
// by times over seconds (its other tenants' work) each catches a phase of
// its own; here both see the same phases, and share the processor's
// caches as a limiter shares them with the rest of a server.
func BenchmarkKeyedAlternating(b *testing.B) {
	for _, name := range alternated {
		i := slices.IndexFunc(peers, func(p peer) bool { return p.name == name })
		for _, procs := range []int{1, runtime.GOMAXPROCS(0)} {
			b.Run(fmt.Sprintf("%s/procs=%d", name, procs), func(b *testing.B) {
				ds := [2]decider{ours(throttle.GCRA)(b), peers[i].make(b)}
				for _, d := range ds {
					warm(b, d)
				}
				b.ReportAllocs()
				b.ResetTimer()
				var spent [2]time.Duration
				var next [2]int
				for left := b.N; left > 0; left -= turn {
					n := min(left, turn)
					for s, d := range ds {
						start := time.Now()
						decide(b, d, &next[s], n, procs)
						spent[s] += time.Since(start)
					}
				}
				b.ReportMetric(float64(spent[0])/float64(b.N), "ours-ns/op")
				b.ReportMetric(float64(spent[1])/float64(b.N), "peer-ns/op")
				b.ReportMetric(float64(spent[0])/float64(spent[1]), "ratio")
			})
		}
	}
}

// decide makes n decisions with d on keys from *next on, split over procs
// goroutines, and moves *next past them.
func decide(b *testing.B, d decider, next *int, n, procs int) {
	var wg sync.WaitGroup
	var refused atomic.Int64
	for g := range procs {
		lo, hi := n*g/procs, n*(g+1)/procs
		wg.Go(func() {
			k := (*next + lo) % liveKeys
			for range hi - lo {
				if !d(keys[k]) {
					refused.Add(1)
				}
				if k++; k == liveKeys {
					k = 0
				}
			}
		})
	}
	wg.Wait()
	*next = (*next + n) % liveKeys
	if r := refused.Load(); r > 0 {
		b.Fatalf("%d decisions refused", r)
	}
}
