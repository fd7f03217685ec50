package rls

import (
	"context"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/smoothrate/ratelimit/internal/redisscript"
)

// windowBatcher sends the windows of concurrent calls to one Redis server
// together: while a round trip is in flight, the calls that arrive queue,
// and the next round trip runs the windows script once over all their
// keys. There is no waiting window (as the reference's
// REDIS_PIPELINE_WINDOW has): an idle store sends a call at once, a busy
// one sends what queued during the last round trip. Redis then parses,
// looks up and starts one script, and both sides make one read and one
// write, for many calls instead of one each.
//
// The script handles each key on its own (in mode "1", each call on its
// own), in order, so a batch counts exactly what the same calls, one after
// the other, would: a key of two calls in one batch sees the first call's
// hits before the second's. A call of more than maxBatchKeys windows never
// queues here (RedisStore.send runs it alone), so no call waits for a
// large one.
type windowBatcher struct {
	client *redis.Client
	mode   string // the script's ARGV[1]

	mu      sync.Mutex
	queue   []*windowReq
	runners int // goroutines sending batches, at most batchRunners
}

// windowReq is one call's windows, waiting for their batch.
type windowReq struct {
	ctx      context.Context
	deadline time.Time     // the caller's bound besides ctx's (zero: none)
	timeout  time.Duration // the bound's length, for its error
	ops      []windowOp
	done     chan error // buffered: the batch never waits on a caller
}

// timers bound the callers' waits: a pooled timer costs no allocation,
// unlike a context with a timeout per call.
var timers = sync.Pool{New: func() any {
	t := time.NewTimer(time.Hour)
	t.Stop()
	return t
}}

// maxBatchKeys bounds one script's keys: a longer queue goes in several
// round trips, and a larger call in scripts of its own (runAlone), so that
// one script does not hold Redis, or the batch, for long. The additions'
// AllowAll calls take as many checks at most (decideAdditions).
const maxBatchKeys = 256

// batchRunners is how many batches may be in flight at once (a call that
// finds fewer starts one instead of queueing). One: under rlsbench's load,
// more in flight made smaller batches, more CPU per call on both sides
// and a worse p99.
const batchRunners = 1

var windowReqPool = sync.Pool{New: func() any { return &windowReq{done: make(chan error, 1)} }}

// windows runs ops in the next batch and returns when they are counted, or
// ctx ends, or timeout (if not 0) passes (an outage: ErrUnavailable),
// whichever comes first. A caller that gives up leaves its ops to the
// batch, which may still count them, as a round trip cut short by a
// timeout may have.
func (b *windowBatcher) windows(ctx context.Context, ops []windowOp, timeout time.Duration) error {
	r := windowReqPool.Get().(*windowReq)
	r.ctx, r.ops, r.deadline, r.timeout = ctx, ops, time.Time{}, timeout
	var expired <-chan time.Time
	if timeout > 0 {
		r.deadline = time.Now().Add(timeout)
		t := timers.Get().(*time.Timer)
		t.Reset(timeout)
		defer func() {
			t.Stop() // since Go 1.23, no stale tick is left for the next user
			timers.Put(t)
		}()
		expired = t.C
	}
	b.mu.Lock()
	b.queue = append(b.queue, r)
	if b.runners < batchRunners {
		b.runners++
		go b.run()
	}
	b.mu.Unlock()
	select {
	case err := <-r.done:
		r.ctx, r.ops = nil, nil
		windowReqPool.Put(r) // only once answered: its channel is empty
		return err
	case <-ctx.Done():
		return classify(ctx, ctx.Err())
	case <-expired:
		return classify(ctx, redisscript.TimeoutAfter(timeout))
	}
}

// gone reports whether r's caller has stopped waiting, with the error it
// was answered: its context's end, or its bound's (an outage).
func (r *windowReq) gone(now time.Time) error {
	if err := r.ctx.Err(); err != nil {
		return classify(r.ctx, err)
	}
	if !r.deadline.IsZero() && !now.Before(r.deadline) {
		return classify(r.ctx, redisscript.TimeoutAfter(r.timeout))
	}
	return nil
}

// until is when r's caller stops waiting (ok false: it waits for the
// answer, bounded only by the client's own timeouts).
func (r *windowReq) until() (time.Time, bool) {
	d, ok := r.ctx.Deadline()
	if r.deadline.IsZero() {
		return d, ok
	}
	if ok && d.Before(r.deadline) {
		return d, true
	}
	return r.deadline, true
}

// run sends batches while calls queue, then ends: an idle store holds no
// goroutine.
func (b *windowBatcher) run() {
	var batch []*windowReq
	for {
		b.mu.Lock()
		n, keys := 0, 0
		for n < len(b.queue) && (n == 0 || keys+len(b.queue[n].ops) <= maxBatchKeys) {
			keys += len(b.queue[n].ops)
			n++
		}
		if n == 0 {
			b.runners--
			b.mu.Unlock()
			return
		}
		batch = append(batch[:0], b.queue[:n]...)
		rest := copy(b.queue, b.queue[n:])
		clear(b.queue[rest:])
		b.queue = b.queue[:rest]
		b.mu.Unlock()
		b.send(batch)
		clear(batch)
	}
}

// send runs one batch: the calls still waiting, in one script. The batch's
// context ends at the latest of their deadlines (none if one has none),
// never with one caller's cancellation: each caller stops waiting at its
// own.
func (b *windowBatcher) send(batch []*windowReq) {
	live := batch[:0]
	var deadline time.Time
	bounded := true
	keys := 0
	now := time.Now()
	for _, r := range batch {
		if err := r.gone(now); err != nil {
			// Answered already (or about to be): its hits are not
			// sent.
			r.done <- err
			continue
		}
		live = append(live, r)
		keys += len(r.ops)
		if d, ok := r.until(); !ok {
			bounded = false
		} else if d.After(deadline) {
			deadline = d
		}
	}
	if len(live) == 0 {
		return
	}
	ctx := context.Background()
	if bounded {
		var cancel context.CancelFunc
		ctx, cancel = context.WithDeadline(ctx, deadline)
		defer cancel()
	}
	var ops []windowOp
	var calls []int // mode "1": each call's number of windows
	if b.mode == "1" {
		calls = make([]int, len(live))
		for i, r := range live {
			calls[i] = len(r.ops)
		}
	}
	if len(live) == 1 {
		ops = live[0].ops
	} else {
		ops = make([]windowOp, 0, keys)
		for _, r := range live {
			ops = append(ops, r.ops...)
		}
	}
	keyNames, args := scriptArgs(ops, b.mode, calls...)
	v, err := windowsScript.Run(ctx, b.client, keyNames, args...).Int64Slice()
	if err == nil && len(v) != len(ops) {
		err = misconfigured("the windows script answered %d counts for %d keys", len(v), len(ops))
	}
	if err != nil {
		err = classify(ctx, err)
		ended := ctx.Err() != nil // the batch's deadline, its callers' latest
		now := time.Now()
		for _, r := range live {
			if gone := r.gone(now); ended && gone != nil {
				r.done <- gone // as it would have been answered
			} else {
				r.done <- err
			}
		}
		return
	}
	off := 0
	for _, r := range live {
		n := len(r.ops)
		r.done <- fill(r.ops, v[off:off+n])
		off += n
	}
}
