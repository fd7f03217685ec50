package redisscript

import (
	"context"
	"errors"
	"fmt"
	"net"
	"sync"
	"time"
)

// Call runs f with a context that ends after timeout (or with parent, if
// sooner), in a goroutine of its own, and returns as soon as f does or the
// bound passes. The goroutine makes the bound hold whatever the client
// does with contexts: go-redis watches a context's deadline when dialing
// and waiting for a pooled connection, but reads a reply with its own
// ReadTimeout (3 s by default) unless ContextTimeoutEnabled is set. If wg
// is not nil it tracks the goroutine, which may outlive the call by up to
// the client's own timeouts.
//
// After the bound, the error wraps ErrTimeout (class Outage) and keeps the
// client's error as text only: wrapped, a client's context error would
// match context.DeadlineExceeded, which means "the caller's time ran out".
// If parent ended first, its error is returned (class Cancelled). A panic
// in f is returned as an error wrapping ErrClientPanic.
func Call[T any](parent context.Context, timeout time.Duration, wg *sync.WaitGroup, f func(context.Context) (T, error)) (T, error) {
	ctx, cancel := context.WithTimeout(parent, timeout)
	// Cancelled here, not in the goroutine: a goroutine that cancelled
	// after sending its result would race its own result in the select
	// below. If we give up first, the deadline has already cancelled ctx.
	defer cancel()
	type result struct {
		v   T
		err error
	}
	ch := make(chan result, 1)
	if wg != nil {
		wg.Add(1)
	}
	go func() {
		if wg != nil {
			defer wg.Done()
		}
		defer func() {
			if p := recover(); p != nil {
				ch <- result{err: fmt.Errorf("%w: %v", ErrClientPanic, p)}
			}
		}()
		v, err := f(ctx)
		ch <- result{v, err}
	}()
	var zero T
	select {
	case res := <-ch:
		if res.err == nil {
			return res.v, nil
		}
		if perr := parent.Err(); perr != nil {
			return zero, fmt.Errorf("%w (%v)", perr, res.err)
		}
		var ne net.Error
		if ctx.Err() != nil || errors.Is(res.err, context.DeadlineExceeded) || errors.As(res.err, &ne) && ne.Timeout() {
			// Our bound, turned by the client into a context error or
			// a socket timeout; or the client's own, shorter, socket
			// timeout. Either way the call took too long.
			return zero, fmt.Errorf("%w after %v (%v)", ErrTimeout, timeout, res.err)
		}
		return zero, res.err
	case <-ctx.Done():
		if perr := parent.Err(); perr != nil {
			return zero, perr
		}
		return zero, fmt.Errorf("%w after %v", ErrTimeout, timeout)
	}
}
