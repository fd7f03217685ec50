package rls

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"github.com/redis/go-redis/v9"
	"google.golang.org/grpc/codes"
	grpcstatus "google.golang.org/grpc/status"

	"github.com/smoothrate/ratelimit/internal/ctxtest"
	"github.com/smoothrate/ratelimit/internal/redistest"
)

// manyConfig has a reference window and an addition on keys every request
// value matches.
const manyConfig = `
domain: d
descriptors:
  - key: w
    rate_limit: {unit: hour, requests_per_unit: 1000}
  - key: g
    rate_limit: {unit: hour, requests_per_unit: 1000, algorithm: gcra}
`

// manyDescriptors is a request of n descriptors of key, each with its own
// value.
func manyDescriptors(key string, n int) *rlsv3.RateLimitRequest {
	ds := make([]*ratelimitv3.RateLimitDescriptor, n)
	for i := range ds {
		ds[i] = desc(key, strconv.Itoa(i))
	}
	return request("d", 0, ds...)
}

// A call of many descriptors on the memory store stops at the first look
// at its context after the context ends, whether its store work is
// windows or additions (and, counted whole, writes nothing), and answers
// UNAVAILABLE; its store timeout bounds it too.
func TestMemoryCallStopsWhenCancelled(t *testing.T) {
	const n = 20_000
	for _, key := range []string{"w", "g"} {
		for _, only := range []bool{false, true} {
			for _, at := range []int64{1, 3, 20} {
				store, _ := NewMemoryStore()
				opts := []Option{WithMaxDescriptors(n), WithStoreTimeout(0)}
				if only {
					opts = append(opts, WithCountOnlyAdmitted())
				}
				svc, err := New(parseYAML(t, manyConfig), store, opts...)
				if err != nil {
					t.Fatal(err)
				}
				ctx := ctxtest.NewCountdown(at)
				what := fmt.Sprintf("%s, only admitted %v, done at look %d", key, only, at)
				_, err = svc.ShouldRateLimit(ctx, manyDescriptors(key, n))
				if grpcstatus.Code(err) != codes.Unavailable || !errors.Is(err, context.Canceled) {
					t.Fatalf("%s: %v, want UNAVAILABLE wrapping context.Canceled", what, err)
				}
				// The store looks every ctxEvery counters: a call that
				// stops at the look that finds the context done has
				// counted fewer than at*ctxEvery (classifying the error
				// may look again; counting on would not stop there).
				if looks := ctx.Looks(); looks < at {
					t.Errorf("%s: the context was looked at %d times: the call ended before it was done", what, looks)
				}
				st := store.Stats()
				if counted := st.Windows + st.Additions.Keys; counted > int(at)*ctxEvery || only && counted != 0 {
					t.Errorf("%s: %d descriptors counted: the call went on", what, counted)
				}
			}
		}
	}
	// The store timeout bounds the call as the caller's context does,
	// at the largest size a caller may configure.
	svc, err := New(parseYAML(t, manyConfig), nil, WithMaxDescriptors(80_000), WithStoreTimeout(time.Nanosecond))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := svc.ShouldRateLimit(context.Background(), manyDescriptors("g", 80_000)); grpcstatus.Code(err) != codes.Unavailable || !errors.Is(err, ErrUnavailable) {
		t.Errorf("a call of 80 000 descriptors with a store timeout of 1 ns: %v, want UNAVAILABLE wrapping ErrUnavailable (the store timeout is an outage)", err)
	}
}

// The memory store drops ended windows at the first call after their end,
// however few it holds, and costs O(1) per insert when full: it looks at
// a bounded number of counters to make room, never at a whole shard.
func TestMemoryStoreWork(t *testing.T) {
	clock := newTestClock(T0)
	store, err := NewMemoryStore(WithStoreClock(clock), WithMaxKeys(64*64))
	if err != nil {
		t.Fatal(err)
	}
	svc, err := New(parseYAML(t, `
domain: d
descriptors:
  - key: m
    rate_limit: {unit: minute, requests_per_unit: 5}
  - key: h
    rate_limit: {unit: day, requests_per_unit: 5}
`), store)
	if err != nil {
		t.Fatal(err)
	}
	call := func(key string, v int) {
		t.Helper()
		if _, err := svc.ShouldRateLimit(context.Background(), request("d", 0, desc(key, strconv.Itoa(v)))); err != nil {
			t.Fatal(err)
		}
	}
	for v := range 100 {
		call("m", v)
	}
	if st := store.Stats(); st.Windows != 100 {
		t.Fatalf("100 windows: %+v", st)
	}
	clock.set(time.Unix(T0+60, 0))
	call("h", 0)
	if st := store.Stats(); st.Windows != 1 || st.Bytes != windowCost("d_h_0_"+strconv.Itoa(T0/86400*86400)) {
		t.Errorf("after the minute ended and one call: %+v, want its window alone", st)
	}
	// Fill the store with live windows, then insert as many again.
	for v := range 2 * 64 * 64 {
		call("h", v)
	}
	visited := func() (n uint64) {
		for i := range store.shards {
			store.shards[i].mu.Lock()
			n += store.shards[i].visited
			store.shards[i].mu.Unlock()
		}
		return n
	}
	before, evicted := visited(), store.Stats().Evictions
	const inserts = 10_000
	for v := range inserts {
		call("h", 1_000_000+v)
	}
	st := store.Stats()
	if st.Windows > 64*64 || st.Evictions-evicted != inserts {
		t.Errorf("%d inserts into a full store: %+v", inserts, st)
	}
	if per := float64(visited()-before) / inserts; per > 3 {
		t.Errorf("%.1f counters or maps looked at per insert into a full store, want at most 3", per)
	}
}

// hugeValue is a descriptor value of n bytes, distinct for each i.
func hugeValue(i, n int) string {
	p := strconv.Itoa(i) + ":"
	return p + strings.Repeat("v", n-len(p))
}

// heapInUse is the live heap after a collection.
func heapInUse() uint64 {
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return m.HeapAlloc
}

// Values of 60 KiB (the longest Envoy passes) and 1 MB cost the store and
// the metrics what short ones do: their descriptors are counted under a
// digest, limited each on its own; detailed_metric and unknown domains
// made of them fold into "d.(other)" and "(other)". Nothing of them is kept.
func TestHugeValuesBounded(t *testing.T) {
	for _, c := range []struct{ size, calls int }{{60 << 10, 200}, {1 << 20, 40}} {
		size, calls := c.size, c.calls
		t.Run(strconv.Itoa(size), func(t *testing.T) {
			store, _ := NewMemoryStore(WithStoreClock(newTestClock(T0)))
			svc, err := New(parseYAML(t, `
domain: d
descriptors:
  - key: w
    detailed_metric: true
    rate_limit: {unit: hour, requests_per_unit: 2}
  - key: g
    rate_limit: {unit: hour, requests_per_unit: 2, algorithm: gcra}
`), store)
			if err != nil {
				t.Fatal(err)
			}
			heap := heapInUse()
			for i := range calls {
				v := hugeValue(i, size)
				if _, err := svc.ShouldRateLimit(context.Background(), request("d", 0, desc("w", v), desc("g", v))); err != nil {
					t.Fatal(err)
				}
				svc.ShouldRateLimit(context.Background(), request(v, 0, desc("w", "x")))
			}
			if grew := int64(heapInUse()) - int64(heap); grew > 16<<20 {
				t.Errorf("%d calls with values of %d bytes keep %d MiB", calls, size, grew>>20)
			}
			st := store.Stats()
			if st.Windows != calls || st.Bytes > calls*(WindowOverhead+64) || st.Additions.Keys != calls {
				t.Errorf("%d long descriptors: %+v", calls, st)
			}
			keyBytes := 0
			for k := range svc.AllRuleCounts() {
				keyBytes += len(k)
			}
			for d := range svc.AllDomainsNotFound() {
				keyBytes += len(d)
			}
			notFound := maps.Collect(svc.AllDomainsNotFound())
			if got := svc.RuleCounts(OtherRuleKey("d")).TotalHits; keyBytes > 64<<10 || got != uint64(calls) || notFound[otherSeries] != uint64(calls) {
				t.Errorf("series keys of %d bytes; %d hits under %q, %d unknown domains under %q", keyBytes, got, OtherRuleKey("d"), notFound[otherSeries], otherSeries)
			}
			// A long value is limited on its own: 2 an hour.
			v := hugeValue(0, size)
			for _, want := range []any{ok, over} {
				got, err := svc.ShouldRateLimit(context.Background(), request("d", 0, desc("w", v), desc("g", v)))
				if err != nil || got.Statuses[0].Code != want || got.Statuses[1].Code != want {
					t.Errorf("a long value again: %v, %v; want both %v", got, err, want)
				}
			}
			got, err := svc.ShouldRateLimit(context.Background(), request("d", 0, desc("w", hugeValue(0, size-1)+"w")))
			if err != nil || got.OverallCode != ok {
				t.Errorf("another long value: %v, %v", got, err)
			}
		})
	}
}

// WithMaxBytes bounds the memory store's windows and additions by bytes:
// descriptors of the longest part kept as it is (MaxDescriptorBytesLimit).
func TestMemoryStoreMaxBytes(t *testing.T) {
	store, err := NewMemoryStore(WithStoreClock(newTestClock(T0)), WithMaxBytes(MinMaxBytes))
	if err != nil {
		t.Fatal(err)
	}
	svc, err := New(parseYAML(t, manyConfig), store, WithMaxDescriptorBytes(MaxDescriptorBytesLimit))
	if err != nil {
		t.Fatal(err)
	}
	for i := range 2000 {
		v := hugeValue(i, MaxDescriptorBytesLimit-4)
		if _, err := svc.ShouldRateLimit(context.Background(), request("d", 0, desc("w", v), desc("g", v))); err != nil {
			t.Fatal(err)
		}
	}
	st := store.Stats()
	if st.Bytes > MinMaxBytes || st.Additions.Bytes > MinMaxBytes || st.Evictions == 0 {
		t.Errorf("2000 descriptors of 8 KiB in %d bytes: %+v", MinMaxBytes, st)
	}
	if _, err := NewMemoryStore(WithMaxBytes(MinMaxBytes - 1)); !errors.Is(err, ErrInvalidOption) {
		t.Errorf("WithMaxBytes below MinMaxBytes: %v", err)
	}
	client := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1"})
	defer client.Close()
	if _, err := NewRedisStore(client, WithMaxBytes(MinMaxBytes)); !errors.Is(err, ErrInvalidOption) {
		t.Errorf("WithMaxBytes on a RedisStore: %v", err)
	}
	for _, o := range []Option{WithMaxDescriptorBytes(-1), WithMaxDescriptorBytes(MaxDescriptorBytesLimit + 1), WithMetricSeriesLimit(0, 1), WithMetricSeriesLimit(1, 0)} {
		if _, err := New(nil, nil, o); !errors.Is(err, ErrInvalidOption) {
			t.Errorf("a bad option: %v", err)
		}
	}
}

// A descriptor longer than WithMaxDescriptorBytes is counted on Redis
// under its digest, as in memory.
func TestLongDescriptorKeyOnRedis(t *testing.T) {
	store, c := redisStore(t, newTestClock(T0))
	svc, err := New(parseYAML(t, manyConfig), store, WithMaxDescriptorBytes(len("w_abc_")))
	if err != nil {
		t.Fatal(err)
	}
	for _, v := range []string{"abc", "abcd"} {
		if _, err := svc.ShouldRateLimit(context.Background(), request("d", 0, desc("w", v))); err != nil {
			t.Fatal(err)
		}
	}
	keys, _ := c.Keys(context.Background(), "*").Result()
	start := strconv.Itoa(T0 / 3600 * 3600)
	want := map[string]bool{"d_w_abc_" + start: true}
	if len(keys) != 2 || !want[keys[0]] && !want[keys[1]] {
		t.Fatalf("keys %q", keys)
	}
	for _, k := range keys {
		if k != "d_w_abc_"+start && (!strings.HasPrefix(k, "d_sha256:") || len(k) != len("d_")+hashedPart+len(start)) {
			t.Errorf("key %q: want d_sha256:<32 hex digits>_%s", k, start)
		}
	}
}

// scriptKeys records the most keys any script a client sends carries.
type scriptKeys struct{ most atomic.Int64 }

func (h *scriptKeys) DialHook(next redis.DialHook) redis.DialHook { return next }
func (h *scriptKeys) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}
func (h *scriptKeys) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		if n := cmd.Name(); n == "evalsha" || n == "eval" {
			keys, _ := cmd.Args()[2].(int)
			for {
				most := h.most.Load()
				if int64(keys) <= most || h.most.CompareAndSwap(most, int64(keys)) {
					break
				}
			}
		}
		return next(ctx, cmd)
	}
}

// hookedStore is a RedisStore on a server of its own, whose scripts hook
// sees.
func hookedStore(t *testing.T) (*RedisStore, *scriptKeys) {
	srv := redistest.Start(t)
	c := redis.NewClient(&redis.Options{Addr: srv.Addr()})
	t.Cleanup(func() { c.Close() })
	hook := &scriptKeys{}
	c.AddHook(hook)
	store, err := NewRedisStore(c)
	if err != nil {
		t.Fatal(err)
	}
	return store, hook
}

// Two callers sending calls of 10 000 descriptors each leave the ordinary
// calls sharing the store answered within the store timeout: the large
// calls go in scripts of at most maxBatchKeys keys of their own, never in
// the batch the others share (a call of 10 000 windows was one script of
// 10 000 keys that the batch, and every call queued behind it, waited
// for).
func TestLargeCallsHoldNoOne(t *testing.T) {
	store, hook := hookedStore(t)
	svc, err := New(parseYAML(t, manyConfig), store, WithMaxDescriptors(10_000), WithStoreTimeout(time.Second))
	if err != nil {
		t.Fatal(err)
	}
	ctx, stop := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	var large atomic.Int64
	for _, key := range []string{"w", "g"} {
		wg.Add(1)
		go func() {
			defer wg.Done()
			req := manyDescriptors(key, 10_000)
			for ctx.Err() == nil {
				if _, err := svc.ShouldRateLimit(ctx, req); err == nil {
					large.Add(1)
				}
			}
		}()
	}
	var unavailable, answered atomic.Int64
	var ordinary sync.WaitGroup
	for g := range 4 {
		ordinary.Add(1)
		go func() {
			defer ordinary.Done()
			for i := range 100 {
				_, err := svc.ShouldRateLimit(context.Background(), request("d", 0, desc("w", fmt.Sprint("o", g, i)), desc("g", "o")))
				switch {
				case err == nil:
					answered.Add(1)
				case grpcstatus.Code(err) == codes.Unavailable:
					unavailable.Add(1)
				default:
					t.Error(err)
				}
			}
		}()
	}
	ordinary.Wait()
	stop()
	wg.Wait()
	if n := unavailable.Load(); n > 0 {
		t.Errorf("%d of 400 ordinary calls UNAVAILABLE while calls of 10 000 descriptors ran (%d of those answered)", n, large.Load())
	}
	if most := hook.most.Load(); most > maxBatchKeys {
		t.Errorf("a script of %d keys: a large call was not split", most)
	}
	t.Logf("%d ordinary calls answered, %d large ones", answered.Load(), large.Load())
}

// A large call counted whole is one script: its windows all counted or
// none, whatever its size.
func TestLargeCallCountedWhole(t *testing.T) {
	storeKinds(t, func(t *testing.T, newStore func(*testClock, ...StoreOption) Store) {
		svc, err := New(parseYAML(t, manyConfig), newStore(newTestClock(T0)), WithMaxDescriptors(5000), WithCountOnlyAdmitted())
		if err != nil {
			t.Fatal(err)
		}
		req := manyDescriptors("w", 1000)
		// The last window is the same as the first: 1001 hits on it
		// in the second call refuse that call whole.
		req.Descriptors = append(req.Descriptors, desc("w", "0"))
		for i, want := range []any{ok, over} {
			for range 500 {
				req.Descriptors = append(req.Descriptors, desc("w", "0"))
			}
			got, err := svc.ShouldRateLimit(context.Background(), req)
			if err != nil || got.OverallCode != want {
				t.Fatalf("call %d: %v, %v; want %v", i, got.GetOverallCode(), err, want)
			}
		}
		got, err := svc.ShouldRateLimit(context.Background(), request("d", 0, desc("w", "1"), desc("w", "0")))
		if err != nil || got.Statuses[0].LimitRemaining != 998 || got.Statuses[1].LimitRemaining != 1000-503 {
			t.Errorf("after a refused large call: %v, %v; want its windows as the first call left them", got, err)
		}
	})
}

// What a large call that counts every hit has not sent when its context
// ends is never sent: it is split into scripts, and stops between two.
func TestLargeCallAbandoned(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	sent := 0
	err := chunks(ctx, make([]windowOp, 5*maxBatchKeys), func(ops []windowOp) error {
		sent += len(ops)
		cancel()
		return nil
	})
	if !errors.Is(err, context.Canceled) || !errors.Is(err, ErrStore) || sent != maxBatchKeys {
		t.Errorf("cancelled after the first script: %v, %d windows sent", err, sent)
	}
	store, hook := hookedStore(t)
	if err := store.Check(context.Background()); err != nil {
		t.Fatal(err)
	}
	hook.most.Store(0)
	ops := make([]windowOp, 3*maxBatchKeys)
	for i := range ops {
		ops[i] = windowOp{key: "k" + strconv.Itoa(i), hits: 1, limit: 10, ttl: 60}
	}
	err = store.windows(ctx, ops, countEvery)
	if !errors.Is(err, context.Canceled) || hook.most.Load() != 0 {
		t.Errorf("a large call whose context had ended: %v, a script of %d keys sent", err, hook.most.Load())
	}
}

// BenchmarkLargeCall is one call of n descriptors on an addition (GCRA)
// on the memory store: its time per descriptor should not grow with n.
//
//	go test ./rls -run XXX -bench LargeCall -benchmem
func BenchmarkLargeCall(b *testing.B) {
	for _, n := range []int{1_000, 10_000, 80_000} {
		b.Run(strconv.Itoa(n), func(b *testing.B) {
			svc, err := New(parseYAML(b, manyConfig), nil, WithMaxDescriptors(n))
			if err != nil {
				b.Fatal(err)
			}
			req := manyDescriptors("g", n)
			for b.Loop() {
				if _, err := svc.ShouldRateLimit(context.Background(), req); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*n), "ns/descriptor")
		})
	}
}

// BenchmarkOrdinaryCallBesideLargeOnes is an ordinary call of two
// descriptors on the memory store while another goroutine sends calls of
// 80 000 descriptors on an addition without pause: compare its ns/op with
// BenchmarkShouldRateLimitMemory's, the same call alone (the large calls
// hold a shard for at most maxBatchKeys checks at a time).
//
//	go test ./rls -run XXX -bench 'OrdinaryCallBesideLargeOnes|ShouldRateLimitMemory' -benchmem
func BenchmarkOrdinaryCallBesideLargeOnes(b *testing.B) {
	svc, err := New(parseYAML(b, manyConfig+`
  - key: route
    descriptors:
      - key: user
        rate_limit: {unit: second, requests_per_unit: 1000000}
  - key: ip
    rate_limit: {unit: minute, requests_per_unit: 1000000, algorithm: gcra}
`), nil, WithMaxDescriptors(80_000))
	if err != nil {
		b.Fatal(err)
	}
	ctx, stop := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		req := manyDescriptors("g", 80_000)
		for ctx.Err() == nil {
			svc.ShouldRateLimit(ctx, req)
		}
	}()
	req := request("d", 0, desc("route", "/api", "user", "42"), desc("ip", "192.0.2.1"))
	for b.Loop() {
		if _, err := svc.ShouldRateLimit(context.Background(), req); err != nil {
			b.Fatal(err)
		}
	}
	stop()
	<-done
}

// BenchmarkMemoryStoreFullInsert inserts new windows into a full memory
// store (the default bound of keys, all live).
//
//	go test ./rls -run XXX -bench MemoryStoreFullInsert -benchmem
func BenchmarkMemoryStoreFullInsert(b *testing.B) {
	store, _ := NewMemoryStore(WithMaxKeys(64 * 1024))
	svc, err := New(parseYAML(b, manyConfig), store)
	if err != nil {
		b.Fatal(err)
	}
	for i := range 64 * 1024 {
		svc.ShouldRateLimit(context.Background(), request("d", 0, desc("w", strconv.Itoa(-i))))
	}
	i := 0
	for b.Loop() {
		i++
		if _, err := svc.ShouldRateLimit(context.Background(), request("d", 0, desc("w", strconv.Itoa(i)))); err != nil {
			b.Fatal(err)
		}
	}
}
