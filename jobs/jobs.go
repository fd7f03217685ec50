package jobs

import (
	"context"
	"errors"
	"fmt"
	"math"
	"sync"

	"github.com/smoothrate/ratelimit"
)

// Sentinel errors; test with errors.Is.
var (
	// ErrInvalidParallel: parallel is below 1.
	ErrInvalidParallel = errors.New("jobs: parallel must be at least 1")
	// ErrNilFunc: the work function is nil.
	ErrNilFunc = errors.New("jobs: work function must not be nil")
	// ErrNotStarted is the error of an item that was never started: the
	// context ended first, or the limiter refused. It is joined with the
	// reason (the context's cause, or the limiter's error).
	ErrNotStarted = errors.New("jobs: not started")
)

// Result is the outcome of one item.
type Result[T any] struct {
	Index   int   // the item's position in the input, from 0
	Item    T     // the item
	Started bool  // whether fn was called
	Err     error // fn's error; ErrNotStarted (and why) if it never ran
}

// Run calls fn for every item, starting them no faster than lim allows and
// running at most parallel at once, and returns one Result per item, in the
// input's order. A nil lim, or one whose rate is +Inf, does not limit the
// rate.
//
// The returned error is about the run, not the items: an invalid argument
// (ErrInvalidParallel, ErrNilFunc, ratelimit.ErrNilContext), or why the run stopped before every item
// had started (see Stream). Items that failed have their error in their
// Result; those that never started have ErrNotStarted joined with that
// reason. Run returns only when every started item has returned.
func Run[T any](ctx context.Context, lim ratelimit.Acquirer, parallel int, items []T, fn func(context.Context, T) error) ([]Result[T], error) {
	if err := check(ctx, parallel, fn != nil); err != nil {
		return nil, err
	}
	results := make([]Result[T], len(items))
	for i, it := range items {
		results[i] = Result[T]{Index: i, Item: it}
	}
	ch := make(chan T)
	stop, fed := make(chan struct{}), make(chan struct{})
	defer func() { close(stop); <-fed }() // the feeder does not outlive Run
	go func() {
		defer close(fed)
		defer close(ch)
		for _, it := range items {
			select {
			case ch <- it:
			case <-stop:
				return
			}
		}
	}()
	err := Stream(ctx, lim, parallel, ch, fn, func(r Result[T]) { results[r.Index] = r })
	all := true
	for i := range results {
		if !results[i].Started {
			all = false
			if results[i].Err == nil { // never taken from the channel
				results[i].Err = notStarted(err)
			}
		}
	}
	if all {
		return results, nil // ctx ended after the last start: nothing was lost
	}
	return results, err
}

// Stream is Run over a channel: it takes items from items until the channel
// is closed or ctx ends, and calls report with the Result of each item it
// took, from the worker that ran it. Calls to report never overlap, so it
// may write to a file or a slice without a lock. An item taken but not
// started because ctx ended is reported too, with ErrNotStarted.
//
// Stream returns when the channel is closed and every item has been
// reported, or when ctx has ended and every started item has returned; in
// the second case it returns ctx's cause. It also stops when the limiter
// refuses a wait that ctx's deadline cannot meet (every later item would
// have to start later still), returning the limiter's error, which wraps
// context.DeadlineExceeded. Items left in the channel are not taken.
func Stream[T any](ctx context.Context, lim ratelimit.Acquirer, parallel int, items <-chan T, fn func(context.Context, T) error, report func(Result[T])) error {
	if err := check(ctx, parallel, fn != nil); err != nil {
		return err
	}
	if report == nil {
		report = func(Result[T]) {}
	}
	var (
		wg       sync.WaitGroup
		reportMu sync.Mutex
		slots    = make(chan struct{}, parallel)
	)
	defer wg.Wait()
	done := func(r Result[T]) {
		reportMu.Lock()
		defer reportMu.Unlock()
		report(r)
	}
	for index := 0; ; index++ {
		var it T
		select {
		case <-ctx.Done():
			return context.Cause(ctx)
		case v, ok := <-items:
			if !ok {
				return nil
			}
			it = v
		}
		r := Result[T]{Index: index, Item: it}

		// A slot, then a permit, then go: see the package doc.
		select {
		case slots <- struct{}{}:
		case <-ctx.Done():
			r.Err = notStarted(context.Cause(ctx))
			done(r)
			return context.Cause(ctx)
		}
		if lim != nil && !math.IsInf(lim.Rate(), 1) {
			if _, err := lim.Acquire(ctx, 1); err != nil {
				<-slots
				if ctx.Err() != nil {
					r.Err = notStarted(context.Cause(ctx))
					done(r)
					return context.Cause(ctx)
				}
				r.Err = notStarted(err)
				done(r)
				if _, ok := ctx.Deadline(); ok && errors.Is(err, context.DeadlineExceeded) {
					// The wait cannot meet ctx's deadline, and
					// no later item could start sooner.
					return err
				}
				// The limiter itself failed (a distributed one that
				// lost its store, say): this item did not run.
				continue
			}
		}
		// The last check before starting: Acquire may have returned without
		// waiting, after the context ended.
		if ctx.Err() != nil {
			<-slots
			r.Err = notStarted(context.Cause(ctx))
			done(r)
			return context.Cause(ctx)
		}
		r.Started = true
		wg.Go(func() {
			defer func() { <-slots }()
			r.Err = fn(ctx, r.Item)
			done(r)
		})
	}
}

func check(ctx context.Context, parallel int, haveFn bool) error {
	if ctx == nil {
		return ratelimit.ErrNilContext
	}
	if parallel < 1 {
		return fmt.Errorf("%w: %d", ErrInvalidParallel, parallel)
	}
	if !haveFn {
		return ErrNilFunc
	}
	return nil
}

// notStarted is the error of an item that did not start, and why.
func notStarted(why error) error {
	if why != nil {
		return fmt.Errorf("%w: %w", ErrNotStarted, why)
	}
	return ErrNotStarted
}
