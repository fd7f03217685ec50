package throttle_test

import (
	"context"
	"fmt"
	"time"

	"github.com/smoothrate/ratelimit/clocktest"
	"github.com/smoothrate/ratelimit/throttle"
)

// A limit of 3 per second for each user, GCRA, on a fake clock: the fourth
// request in the same instant is refused and told exactly when to retry.
func ExampleNewMemoryStore() {
	clk := clocktest.NewFake()
	store, err := throttle.NewMemoryStore(throttle.WithStoreClock(clk))
	if err != nil {
		panic(err)
	}
	lim, err := throttle.New(store, throttle.GCRA, throttle.PerSecond(3))
	if err != nil {
		panic(err)
	}
	ctx := context.Background()
	for range 4 {
		d, _ := lim.Allow(ctx, "user:42")
		fmt.Printf("allowed=%v remaining=%d retry-after=%v\n", d.Allowed, d.Remaining, d.RetryAfter)
	}
	clk.Advance(334 * time.Millisecond)
	d, _ := lim.Allow(ctx, "user:42")
	fmt.Printf("after 334ms: allowed=%v\n", d.Allowed)
	d, _ = lim.Allow(ctx, "user:7") // every key has its own allowance
	fmt.Printf("user:7: allowed=%v remaining=%d\n", d.Allowed, d.Remaining)
	// Output:
	// allowed=true remaining=2 retry-after=0s
	// allowed=true remaining=1 retry-after=0s
	// allowed=true remaining=0 retry-after=0s
	// allowed=false remaining=0 retry-after=333.334ms
	// after 334ms: allowed=true
	// user:7: allowed=true remaining=2
}

// redis-cell's CL.THROTTLE user123 15 30 60 (max_burst 15, 30 per 60 s) as
// a Limit: the same five answers, with exact durations instead of whole
// seconds.
func ExampleLimit_clThrottle() {
	clk := clocktest.NewFake()
	store, _ := throttle.NewMemoryStore(throttle.WithStoreClock(clk))
	lim, _ := throttle.New(store, throttle.GCRA,
		throttle.Limit{Count: 30, Period: 60 * time.Second, Burst: 15 + 1})
	d, _ := lim.Allow(context.Background(), "user123")
	fmt.Printf("%v %d %d %v %v\n", d.Allowed, d.Limit, d.Remaining, d.RetryAfter, d.ResetAfter)
	// Output:
	// true 16 15 0s 2s
}

// AllowN with n = 0 peeks, and a request larger than the limit can never
// be allowed: its RetryAfter is Never.
func ExampleLimiter_AllowN() {
	clk := clocktest.NewFake()
	store, _ := throttle.NewMemoryStore(throttle.WithStoreClock(clk))
	lim, _ := throttle.New(store, throttle.SlidingLog, throttle.PerMinute(10))
	ctx := context.Background()
	d, _ := lim.AllowN(ctx, "upload:alice", 4)
	fmt.Println("4:", d.Allowed, d.Remaining)
	d, _ = lim.AllowN(ctx, "upload:alice", 0)
	fmt.Println("peek:", d.Allowed, d.Remaining, d.ResetAfter)
	d, _ = lim.AllowN(ctx, "upload:alice", 11)
	fmt.Println("11:", d.Allowed, d.RetryAfter == throttle.Never)
	// Output:
	// 4: true 6
	// peek: true 6 1m0s
	// 11: false true
}

// Per IP and per route at once: both are counted, or neither.
func ExampleAllowAll() {
	clk := clocktest.NewFake()
	store, _ := throttle.NewMemoryStore(throttle.WithStoreClock(clk))
	perIP, _ := throttle.New(store, throttle.SlidingWindow, throttle.PerMinute(100))
	perRoute, _ := throttle.New(store, throttle.FixedWindow, throttle.PerMinute(1))
	ctx := context.Background()
	for range 2 {
		ds, _ := throttle.AllowAll(ctx,
			throttle.Check{Limiter: perIP, Key: "{1.2.3.4}:ip", N: 1},
			throttle.Check{Limiter: perRoute, Key: "{1.2.3.4}:route:/login", N: 1})
		s := ds.Strictest()
		fmt.Printf("allowed=%v retry-after=%v ip-remaining=%d\n", ds.Allowed(), s.RetryAfter, ds[0].Remaining)
	}
	// Output:
	// allowed=true retry-after=0s ip-remaining=99
	// allowed=false retry-after=1m0s ip-remaining=99
}

// The store holds at most WithMaxKeys keys; Stats says how many it holds
// and how many it had to forget.
func ExampleMemoryStore_Stats() {
	clk := clocktest.NewFake()
	store, _ := throttle.NewMemoryStore(throttle.WithStoreClock(clk), throttle.WithMaxKeys(1000))
	lim, _ := throttle.New(store, throttle.GCRA, throttle.PerHour(5))
	for i := range 5000 {
		lim.Allow(context.Background(), fmt.Sprint("ip:", i))
	}
	st := store.Stats()
	fmt.Println(st.Keys, st.Evictions)
	// Output:
	// 1000 4000
}
