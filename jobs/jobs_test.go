package jobs_test

import (
	"context"
	"errors"
	"fmt"
	"math"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/smoothrate/ratelimit"
	"github.com/smoothrate/ratelimit/clocktest"
	"github.com/smoothrate/ratelimit/jobs"
)

// On a Fake clock the limiter's sleeps move time, so the start of each item
// is exact: at 4 per second the items start 250 ms apart, the first at once.
// Errors are reported per item and in input order.
func TestRunScheduleAndErrors(t *testing.T) {
	clk := clocktest.NewFake()
	lim, err := ratelimit.NewBursty(4, ratelimit.WithClock(clk))
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	starts := map[int]time.Duration{}
	items := []int{0, 1, 2, 3, 4}
	res, err := jobs.Run(context.Background(), lim, 1, items, func(_ context.Context, i int) error {
		mu.Lock()
		starts[i] = clk.Elapsed()
		mu.Unlock()
		if i%2 == 1 {
			return fmt.Errorf("item %d failed", i)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	for i, r := range res {
		if r.Index != i || r.Item != i || !r.Started {
			t.Errorf("result %d = %+v", i, r)
		}
		if (r.Err != nil) != (i%2 == 1) {
			t.Errorf("item %d: err = %v", i, r.Err)
		}
		if want := time.Duration(i) * 250 * time.Millisecond; starts[i] != want {
			t.Errorf("item %d started at %v, want %v", i, starts[i], want)
		}
	}
}

// At most parallel items run at once, and starts are spaced by the limiter
// even when slots free up together. At 10/s with 2 slots and items lasting
// 1 s: two start at 0 and 0.1 s; each later one waits for a slot, and the
// one after it also for its permit, 0.1 s later.
func TestRunParallelBound(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		start := time.Now()
		lim, err := ratelimit.NewBursty(10)
		if err != nil {
			t.Fatal(err)
		}
		var running, peak atomic.Int32
		var mu sync.Mutex
		var starts []time.Duration
		_, err = jobs.Run(context.Background(), lim, 2, make([]struct{}, 6), func(context.Context, struct{}) error {
			n := running.Add(1)
			for {
				p := peak.Load()
				if n <= p || peak.CompareAndSwap(p, n) {
					break
				}
			}
			mu.Lock()
			starts = append(starts, time.Since(start))
			mu.Unlock()
			time.Sleep(time.Second)
			running.Add(-1)
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
		if peak.Load() != 2 {
			t.Errorf("peak concurrency %d, want 2", peak.Load())
		}
		slices.Sort(starts)
		want := []time.Duration{0, 100 * time.Millisecond, 1000 * time.Millisecond, 1100 * time.Millisecond, 2000 * time.Millisecond, 2100 * time.Millisecond}
		if !slices.Equal(starts, want) {
			t.Errorf("starts %v, want %v", starts, want)
		}
	})
}

// Cancelling the context: nothing starts afterwards, running items see the
// cancellation and are waited for, the rest are reported as not started,
// and no goroutine is left (synctest.Test fails if one is).
func TestRunCancel(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		lim, err := ratelimit.NewBursty(10)
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithCancel(context.Background())
		start := time.Now()
		cancelAt := 350 * time.Millisecond
		time.AfterFunc(cancelAt, cancel)
		var running atomic.Int32
		var lastStart atomic.Int64
		res, err := jobs.Run(ctx, lim, 3, make([]int, 20), func(ctx context.Context, _ int) error {
			running.Add(1)
			defer running.Add(-1)
			lastStart.Store(int64(time.Since(start)))
			<-ctx.Done() // runs until cancelled
			return ctx.Err()
		})
		if !errors.Is(err, context.Canceled) {
			t.Fatalf("Run err = %v, want context.Canceled", err)
		}
		if running.Load() != 0 {
			t.Errorf("%d items still running after Run returned", running.Load())
		}
		if time.Since(start) != cancelAt {
			t.Errorf("Run returned at %v, want at the cancellation (%v)", time.Since(start), cancelAt)
		}
		started := 0
		for _, r := range res {
			if r.Started {
				started++
				if !errors.Is(r.Err, context.Canceled) {
					t.Errorf("started item %d: err = %v", r.Index, r.Err)
				}
			} else if !errors.Is(r.Err, jobs.ErrNotStarted) || !errors.Is(r.Err, context.Canceled) {
				t.Errorf("item %d: err = %v, want ErrNotStarted and context.Canceled", r.Index, r.Err)
			}
		}
		// 3 slots: items start at 0, 0.1 and 0.2 s, then all slots are busy.
		if started != 3 || time.Duration(lastStart.Load()) != 200*time.Millisecond {
			t.Errorf("%d items started, the last at %v; want 3, the last at 200ms", started, time.Duration(lastStart.Load()))
		}
	})
}

// A cancellation while the dispatcher waits for a permit stops it there:
// the item taken is reported as not started.
func TestStreamCancelDuringWait(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		lim, _ := ratelimit.NewBursty(1)
		ctx, cancel := context.WithCancel(context.Background())
		items := make(chan string, 3)
		items <- "a"
		items <- "b"
		items <- "c"
		var reports []jobs.Result[string]
		errc := make(chan error)
		go func() {
			errc <- jobs.Stream(ctx, lim, 4, items, func(context.Context, string) error { return nil },
				func(r jobs.Result[string]) { reports = append(reports, r) })
		}()
		synctest.Wait() // "a" ran; "b" waits for its permit
		cancel()
		if err := <-errc; !errors.Is(err, context.Canceled) {
			t.Fatalf("Stream err = %v", err)
		}
		if len(reports) != 2 || reports[0].Item != "a" || !reports[0].Started || reports[0].Err != nil ||
			reports[1].Item != "b" || reports[1].Started || !errors.Is(reports[1].Err, jobs.ErrNotStarted) {
			t.Errorf("reports %+v", reports)
		}
		if len(items) != 1 {
			t.Errorf("%d items left in the channel, want 1 (c, never taken)", len(items))
		}
		// The interrupted wait gave its permit back: only "a" is owed.
		if next := lim.Snapshot().NextFree; next != time.Second {
			t.Errorf("NextFree = %v, want 1s", next)
		}
	})
}

func TestRunUnlimitedAndErrors(t *testing.T) {
	inf, _ := ratelimit.NewBursty(math.Inf(1))
	for _, lim := range []ratelimit.Acquirer{nil, inf} {
		var n atomic.Int32
		res, err := jobs.Run(context.Background(), lim, 8, make([]int, 100), func(context.Context, int) error {
			n.Add(1)
			return nil
		})
		if err != nil || len(res) != 100 || n.Load() != 100 {
			t.Errorf("Run = %d results, %v; fn ran %d times", len(res), err, n.Load())
		}
	}
	if _, err := jobs.Run(context.Background(), nil, 0, []int{1}, func(context.Context, int) error { return nil }); !errors.Is(err, jobs.ErrInvalidParallel) {
		t.Errorf("parallel 0: %v", err)
	}
	if _, err := jobs.Run[int](context.Background(), nil, 1, []int{1}, nil); !errors.Is(err, jobs.ErrNilFunc) {
		t.Errorf("nil fn: %v", err)
	}
	//lint:ignore SA1012 testing the nil check
	if _, err := jobs.Run(nil, nil, 1, []int{1}, func(context.Context, int) error { return nil }); !errors.Is(err, ratelimit.ErrNilContext) { //nolint:staticcheck
		t.Errorf("nil context: %v", err)
	}
	//lint:ignore SA1012 testing the nil check
	if err := jobs.Stream(nil, nil, 1, make(chan int), func(context.Context, int) error { return nil }, nil); !errors.Is(err, ratelimit.ErrNilContext) { //nolint:staticcheck
		t.Errorf("Stream, nil context: %v", err)
	}
	// An already cancelled context starts nothing.
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	res, err := jobs.Run(ctx, nil, 2, []int{1, 2}, func(context.Context, int) error {
		t.Error("fn called after cancel")
		return nil
	})
	if !errors.Is(err, context.Canceled) || len(res) != 2 || res[0].Started || res[1].Started {
		t.Errorf("cancelled: %+v, %v", res, err)
	}
}

// failing is an Acquirer whose Acquire always fails, like a distributed
// limiter that lost its store.
type failing struct{ ratelimit.Acquirer }

var errStore = errors.New("store down")

func (failing) Acquire(context.Context, int) (time.Duration, error) { return 0, errStore }
func (failing) Rate() float64                                       { return 1 }

func TestRunLimiterFailure(t *testing.T) {
	res, err := jobs.Run(context.Background(), failing{}, 1, []int{1, 2}, func(context.Context, int) error {
		t.Error("fn called without a permit")
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range res {
		if r.Started || !errors.Is(r.Err, jobs.ErrNotStarted) || !errors.Is(r.Err, errStore) {
			t.Errorf("result %+v", r)
		}
	}
}

// A context deadline that the next permit cannot meet ends the run there:
// the limiter refuses at once (the wait would pass the deadline), and every
// later item would have to start later still. Stream used to take that as
// a failure of the one item and go on, so it drained the channel, marking
// every item not started at once, and Run returned no error although the
// deadline had cut the run short.
func TestStreamStopsAtAnUnmeetableDeadline(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		lim, err := ratelimit.NewBursty(10)
		if err != nil {
			t.Fatal(err)
		}
		start := time.Now()
		ctx, cancel := context.WithTimeout(context.Background(), 1050*time.Millisecond)
		defer cancel()
		items := make(chan int, 20)
		for i := range 20 {
			items <- i
		}
		close(items)
		var reports []jobs.Result[int]
		err = jobs.Stream(ctx, lim, 1, items, func(context.Context, int) error { return nil },
			func(r jobs.Result[int]) { reports = append(reports, r) })
		if !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("Stream err = %v, want one wrapping context.DeadlineExceeded", err)
		}
		// Items 0 to 10 start at 0, 0.1 … 1.0 s; item 11 (due at 1.1 s) is
		// refused at 1.0 s, and nothing more is taken.
		if el := time.Since(start); el != time.Second {
			t.Errorf("Stream returned at %v, want 1s (at the refusal, not at the deadline)", el)
		}
		if len(reports) != 12 {
			t.Fatalf("%d reports, want 12 (11 started, 1 refused)", len(reports))
		}
		for i, r := range reports[:11] {
			if !r.Started || r.Err != nil {
				t.Errorf("report %d: %+v, want started without error", i, r)
			}
		}
		if r := reports[11]; r.Index != 11 || r.Started || !errors.Is(r.Err, jobs.ErrNotStarted) || !errors.Is(r.Err, context.DeadlineExceeded) {
			t.Errorf("report 11: %+v, want not started, wrapping context.DeadlineExceeded", r)
		}
		if len(items) != 8 {
			t.Errorf("%d items left in the channel, want 8 (never taken)", len(items))
		}
		// The refused wait booked nothing: only item 10's permit is owed.
		if next := lim.Snapshot().NextFree; next != 100*time.Millisecond {
			t.Errorf("NextFree = %v, want 100ms", next)
		}

		// Run reports the run as cut short.
		lim, _ = ratelimit.NewBursty(10)
		ctx2, cancel2 := context.WithTimeout(context.Background(), 1050*time.Millisecond)
		defer cancel2()
		res, err := jobs.Run(ctx2, lim, 1, make([]int, 20), func(context.Context, int) error { return nil })
		if !errors.Is(err, context.DeadlineExceeded) {
			t.Errorf("Run err = %v, want one wrapping context.DeadlineExceeded", err)
		}
		for _, r := range res[11:] {
			if r.Started || !errors.Is(r.Err, jobs.ErrNotStarted) || !errors.Is(r.Err, context.DeadlineExceeded) {
				t.Errorf("Run item %d: %+v, want not started, wrapping context.DeadlineExceeded", r.Index, r)
			}
		}
	})
}
