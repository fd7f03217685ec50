package throttle

import (
	"context"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/smoothrate/ratelimit"
	"github.com/smoothrate/ratelimit/clocktest"
)

// namedStore is one Store implementation under test. Every store-agnostic
// test (vectors, properties, the articles' defects, the differential test)
// runs once per entry of testStores, so a new Store is checked against all
// of them by adding one line here (the Redis store's test file appends
// itself in an init function).
type namedStore struct {
	name string
	// open returns an empty store reading time from clk. It may call
	// t.Skip only when the store cannot exist on this machine and CI is
	// not set; cleanup goes through t.Cleanup.
	open func(t testing.TB, clk ratelimit.Clock) Store
}

var testStores = []namedStore{
	{name: "memory", open: func(t testing.TB, clk ratelimit.Clock) Store {
		return memStore(WithStoreClock(clk))
	}},
}

// forEachStore runs f once per store in testStores, as a subtest named
// after the store. newStore returns a fresh, empty store on clk.
func forEachStore(t *testing.T, f func(t *testing.T, newStore func(clk ratelimit.Clock) Store)) {
	t.Helper()
	for _, ns := range testStores {
		t.Run(ns.name, func(t *testing.T) {
			f(t, func(clk ratelimit.Clock) Store { return ns.open(t, clk) })
		})
	}
}

// setClock is a clock the test sets to any instant, backwards included
// (clocktest.Fake only moves forward).
type setClock struct {
	mu  sync.Mutex
	now time.Time
}

func newSetClock() *setClock { return &setClock{now: clocktest.Epoch} }

func (c *setClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *setClock) Sleep(ctx context.Context, d time.Duration) error {
	c.Add(d)
	return ctx.Err()
}

// Set moves the clock to t.
func (c *setClock) Set(t time.Time) {
	c.mu.Lock()
	c.now = t
	c.mu.Unlock()
}

// Add moves the clock by d, which may be negative.
func (c *setClock) Add(d time.Duration) {
	c.mu.Lock()
	c.now = c.now.Add(d)
	c.mu.Unlock()
}

// bigInt is v as an int, for the tests of counts past 2^31; where int has
// 32 bits (386, arm) they cannot be written, and the test is skipped.
func bigInt(t testing.TB, v int64) int {
	t.Helper()
	if int64(int(v)) != v {
		t.Skipf("%d does not fit in a %d-bit int", v, strconv.IntSize)
	}
	return int(v)
}

// mustNew is New for tests.
func mustNew(t testing.TB, s Store, alg Algorithm, l Limit) *Limiter {
	t.Helper()
	lim, err := New(s, alg, l)
	if err != nil {
		t.Fatalf("New(%v, %v): %v", alg, l, err)
	}
	return lim
}

// mustAllow is AllowN for tests.
func mustAllow(t testing.TB, lim *Limiter, key string, n int) Decision {
	t.Helper()
	d, err := lim.AllowN(context.Background(), key, n)
	if err != nil {
		t.Fatalf("AllowN(%q, %d): %v", key, n, err)
	}
	return d
}

var allAlgorithms = []Algorithm{GCRA, TokenBucket, LeakyBucket, FixedWindow, SlidingWindow, SlidingLog}

// memStore is NewMemoryStore for tests whose options are right.
func memStore(opts ...StoreOption) *MemoryStore {
	s, err := NewMemoryStore(opts...)
	if err != nil {
		panic(err)
	}
	return s
}
