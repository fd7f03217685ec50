package redisscript

import (
	"context"
	"errors"
	"fmt"
	"net"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
)

// Call runs f with a context that ends after timeout (or with parent, if
// sooner) and returns as soon as f does or the bound passes.
//
// With inline false, f runs in a goroutine of its own, which makes the
// bound hold whatever the client does with contexts: go-redis watches a
// context's deadline when dialing and waiting for a pooled connection, but
// reads a reply with its own ReadTimeout (3 s by default) unless
// ContextTimeoutEnabled is set. If wg is not nil it tracks the goroutine,
// which may outlive the call by up to the client's own timeouts. With
// inline true (a client that honours deadlines: HonoursDeadlines), f runs
// in the caller's goroutine and costs no goroutine, channel or wait.
//
// After the bound, the error wraps ErrTimeout (class Outage) and keeps the
// client's error as text only: wrapped, a client's context error would
// match context.DeadlineExceeded, which means "the caller's time ran out".
// If parent ended first, its error is returned (class Cancelled), or its
// cause when parent's end was a library's bound (a Bound: class
// Outage). A panic in f is returned as an error wrapping ErrClientPanic.
//
// With a gate (NewGate; nil for none), f runs only once the gate finds
// the server reachable, within the same bound, f's error is refined by
// the gate's knowledge of the client (Refine), and the gate learns from
// it.
func Call[T any](parent context.Context, timeout time.Duration, inline bool, wg *sync.WaitGroup, gate *Gate, f func(context.Context) (T, error)) (T, error) {
	ctx, cancel := context.WithTimeout(parent, timeout)
	// Cancelled here, not in the goroutine: a goroutine that cancelled
	// after sending its result would race its own result in the select
	// below. If we give up first, the deadline has already cancelled ctx.
	defer cancel()
	var zero T
	if err := gate.Enter(ctx); err != nil {
		return zero, bounded(parent, ctx, timeout, err)
	}
	if inline {
		v, err := guarded(ctx, f)
		err = bounded(parent, ctx, timeout, gate.Refine(err))
		gate.Leave(err)
		return v, err
	}
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
		v, err := guarded(ctx, f)
		ch <- result{v, err}
	}()
	select {
	case res := <-ch:
		err := bounded(parent, ctx, timeout, gate.Refine(res.err))
		gate.Leave(err)
		return res.v, err
	case <-ctx.Done():
		err := CtxErr(parent)
		if err == nil {
			err = timeoutError(timeout)
		}
		gate.Leave(err)
		return zero, err
	}
}

// guarded runs f, turning a panic into an error wrapping ErrClientPanic.
func guarded[T any](ctx context.Context, f func(context.Context) (T, error)) (v T, err error) {
	defer func() {
		if p := recover(); p != nil {
			err = fmt.Errorf("%w: %v", ErrClientPanic, p)
		}
	}()
	return f(ctx)
}

// bounded is the error of a call that ended with err under ctx, the
// child of parent bounded by timeout.
func bounded(parent, ctx context.Context, timeout time.Duration, err error) error {
	if err == nil {
		return nil
	}
	if perr := CtxErr(parent); perr != nil {
		return fmt.Errorf("%w (%v)", perr, err)
	}
	var ne net.Error
	if ctx.Err() != nil || errors.Is(err, context.DeadlineExceeded) || errors.As(err, &ne) && ne.Timeout() {
		// Our bound, turned by the client into a context error or a
		// socket timeout; or the client's own, shorter, socket
		// timeout. Either way the call took too long.
		return fmt.Errorf("%w after %v (%v)", ErrTimeout, timeout, err)
	}
	return err
}

// HonoursDeadlines reports whether c, a go-redis client, bounds all of a
// call, socket reads included, by its context's deadline
// (ContextTimeoutEnabled), so that Call may run it inline.
func HonoursDeadlines(c any) bool {
	on, known := ContextTimeout(c)
	return on && known
}

// ContextTimeout reports whether c has ContextTimeoutEnabled set, and
// whether c is a client whose options can say (a *redis.Client,
// *redis.ClusterClient or *redis.Ring).
func ContextTimeout(c any) (enabled, known bool) {
	switch c := c.(type) {
	case *redis.Client:
		return c.Options().ContextTimeoutEnabled, true
	case *redis.ClusterClient:
		return c.Options().ContextTimeoutEnabled, true
	case *redis.Ring:
		return c.Options().ContextTimeoutEnabled, true
	}
	return false, false
}
