package rls

import (
	"context"
	"errors"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/smoothrate/ratelimit/internal/redistest"
)

// gate holds the scripts a client sends until opened, and counts them.
type gate struct {
	scripts atomic.Int64
	held    chan struct{} // a script is waiting at the gate
	open    chan struct{}
}

func newGate() *gate { return &gate{held: make(chan struct{}, 16), open: make(chan struct{})} }

func (g *gate) DialHook(next redis.DialHook) redis.DialHook { return next }
func (g *gate) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}
func (g *gate) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		if n := cmd.Name(); n == "evalsha" || n == "eval" {
			g.scripts.Add(1)
			g.held <- struct{}{}
			<-g.open
		}
		return next(ctx, cmd)
	}
}

// queued waits (yielding, not sleeping) until b holds n waiting calls.
func queued(b *windowBatcher, n int) {
	for {
		b.mu.Lock()
		l := len(b.queue)
		b.mu.Unlock()
		if l >= n {
			return
		}
		runtime.Gosched()
	}
}

func gatedStore(t *testing.T) (*RedisStore, *gate, *redis.Client) {
	srv := redistest.Start(t)
	admin := redis.NewClient(&redis.Options{Addr: srv.Addr()})
	t.Cleanup(func() { admin.Close() })
	client := redis.NewClient(&redis.Options{Addr: srv.Addr()})
	t.Cleanup(func() { client.Close() })
	// Loaded first, so that each batch is one EVALSHA.
	if err := admin.ScriptLoad(context.Background(), windowsScript.Source()).Err(); err != nil {
		t.Fatal(err)
	}
	g := newGate()
	client.AddHook(g)
	store, err := NewRedisStore(client)
	if err != nil {
		t.Fatal(err)
	}
	return store, g, admin
}

// The calls that arrive while a round trip is in flight go together in
// the next one, counted as the same calls one after the other would be.
func TestRedisBatchesConcurrentCalls(t *testing.T) {
	store, g, admin := gatedStore(t)
	ctx := context.Background()
	const n = 6
	afters := make([]uint64, n+1)
	var wg sync.WaitGroup
	call := func(i int) {
		defer wg.Done()
		ops := []windowOp{{key: "w", hits: 1, limit: 100, ttl: 60}, {key: "own" + string(rune('a'+i)), hits: 2, limit: 100, ttl: 60}}
		if err := store.windows(ctx, ops, countEvery); err != nil {
			t.Error(err)
			return
		}
		afters[i] = ops[0].after
		if ops[1].after != 2 {
			t.Errorf("call %d: its own window at %d, want 2", i, ops[1].after)
		}
	}
	wg.Add(1)
	go call(0)
	<-g.held // the first call's round trip is in flight
	for i := 1; i <= n; i++ {
		wg.Add(1)
		go call(i)
	}
	queued(store.batch[0], n)
	close(g.open)
	wg.Wait()
	if got := g.scripts.Load(); got != 2 {
		t.Errorf("%d calls: %d scripts sent, want 2 (one in flight, then one for the calls that queued)", n+1, got)
	}
	seen := map[uint64]bool{}
	for _, a := range afters {
		seen[a] = true
	}
	for c := uint64(1); c <= n+1; c++ {
		if !seen[c] {
			t.Errorf("no call saw the shared window at %d: %v", c, afters)
		}
	}
	if v, _ := admin.Get(ctx, "w").Int(); v != n+1 {
		t.Errorf("shared window holds %d, want %d", v, n+1)
	}
	if ttl := admin.TTL(ctx, "w").Val(); ttl <= 0 {
		t.Errorf("shared window's TTL %v, want one", ttl)
	}
}

// One call's key of another type fails that call only, not the others of
// its batch; a caller that gives up while queued is answered at once and
// its hits are not sent.
func TestRedisBatchIsolatesCalls(t *testing.T) {
	store, g, admin := gatedStore(t)
	ctx := context.Background()
	admin.LPush(ctx, "list", "x")
	var wg sync.WaitGroup
	errs := make([]error, 4)
	ops := [][]windowOp{
		{{key: "first", hits: 1, limit: 10, ttl: 60}},
		{{key: "good", hits: 1, limit: 10, ttl: 60}},
		{{key: "list", hits: 1, limit: 10, ttl: 60}},
		{{key: "gone", hits: 1, limit: 10, ttl: 60}},
	}
	cctx, cancel := context.WithCancel(ctx)
	run := func(i int, ctx context.Context) {
		defer wg.Done()
		errs[i] = store.windows(ctx, ops[i], countEvery)
	}
	wg.Add(1)
	go run(0, ctx)
	<-g.held
	wg.Add(2)
	go run(1, ctx)
	go run(2, ctx)
	gone := make(chan error)
	go func() { gone <- store.windows(cctx, ops[3], countEvery) }()
	queued(store.batch[0], 3)
	cancel()
	errs[3] = <-gone // answered while the batch is still held
	close(g.open)
	wg.Wait()
	if errs[0] != nil || errs[1] != nil {
		t.Errorf("good calls: %v, %v", errs[0], errs[1])
	}
	if ops[1][0].after != 1 {
		t.Errorf("good window after %d, want 1", ops[1][0].after)
	}
	if !errors.Is(errs[2], ErrMisconfigured) {
		t.Errorf("a list as window: %v, want ErrMisconfigured", errs[2])
	}
	// The caller's own end: a failed store call (ErrStore), which says
	// nothing about Redis (not ErrUnavailable), as in throttle.
	if !errors.Is(errs[3], ErrStore) || !errors.Is(errs[3], context.Canceled) || errors.Is(errs[3], ErrUnavailable) {
		t.Errorf("cancelled caller: %v, want ErrStore and context.Canceled, not ErrUnavailable", errs[3])
	}
	if n, _ := admin.Exists(ctx, "gone").Result(); n != 0 {
		t.Error("a cancelled caller's window was counted")
	}
	if got := g.scripts.Load(); got != 2 {
		t.Errorf("%d scripts sent, want 2", got)
	}
}

// A caller's store timeout ends its wait while the round trip before it
// is held, and its hits are then not sent.
func TestRedisBatchTimeout(t *testing.T) {
	store, g, admin := gatedStore(t)
	ctx := context.Background()
	first := make(chan error)
	go func() {
		first <- store.windows(ctx, []windowOp{{key: "first", hits: 1, limit: 10, ttl: 60}}, countEvery)
	}()
	<-g.held
	err := store.windowsWithin(ctx, []windowOp{{key: "late", hits: 1, limit: 10, ttl: 60}}, countEvery, 10*time.Millisecond)
	// The store timeout is an outage of the store (ErrUnavailable and
	// ErrStore, so the outage log counts it), not the caller's deadline.
	if !errors.Is(err, ErrUnavailable) || !errors.Is(err, ErrStore) || errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("timed out call: %v, want ErrUnavailable and ErrStore, not context.DeadlineExceeded", err)
	}
	close(g.open)
	if err := <-first; err != nil {
		t.Fatal(err)
	}
	// The next call runs once the queue is empty again.
	if err := store.windowsWithin(ctx, []windowOp{{key: "next", hits: 1, limit: 10, ttl: 60}}, countEvery, time.Minute); err != nil {
		t.Fatal(err)
	}
	if n, _ := admin.Exists(ctx, "late").Result(); n != 0 {
		t.Error("a timed-out call's window was counted")
	}
	if got := g.scripts.Load(); got != 2 {
		t.Errorf("%d scripts sent, want 2 (the timed-out call's dropped)", got)
	}
}
