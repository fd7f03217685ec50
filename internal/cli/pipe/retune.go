package pipe

import (
	"context"
	"errors"
	"sync"
	"time"

	"github.com/smoothrate/ratelimit"
)

// retunable is the pipe's limiter with a rate that may change while a chunk
// waits for its turn (-R). A limiter's SetRate does not re-price what is
// already booked (Guava's rule), and the chunk that waits has booked its own
// permits at the old price, which the chunk after it would wait for. So
// setRate interrupts that wait, which gives the booking back exactly,
// changes the rate, and the chunk books again at the new price. Only the
// chunk already written stays paid at the old price (the chunk that waits
// waits for it: the next caller pays): 10 ms of data at the default chunk
// size, 1 KiB below 100 kB/s, or one --chunk. Both a local Limiter and a
// shared one (distributed) give back what an interrupted Acquire took.
//
// One goroutine acquires at a time (the pipe's shaped writer).
type retunable struct {
	ratelimit.Acquirer
	mu      sync.Mutex // held by setRate throughout; by Acquire to register its wait
	waiting *wait      // the latest Acquire's
}

type wait struct {
	cancel context.CancelCauseFunc
	done   chan struct{} // closed when the Acquire returned
}

// errRetune ends a wait that setRate interrupts.
var errRetune = errors.New("the rate changes")

// Acquire waits as the limiter's Acquire does, booking again at the new
// rate when setRate interrupts it.
func (r *retunable) Acquire(ctx context.Context, permits int) (time.Duration, error) {
	for {
		r.mu.Lock()
		wctx, cancel := context.WithCancelCause(ctx)
		w := &wait{cancel: cancel, done: make(chan struct{})}
		r.waiting = w
		r.mu.Unlock()
		d, err := r.Acquirer.Acquire(wctx, permits)
		close(w.done)
		cancel(nil)
		if err != nil && ctx.Err() == nil && errors.Is(context.Cause(wctx), errRetune) {
			continue
		}
		return d, err
	}
}

// setRate changes the limiter's rate, first giving back the booking of the
// chunk that waits, if one does, so that it is priced at the new rate. It
// returns the rate before.
func (r *retunable) setRate(rate float64) (old float64, err error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	old = r.Rate()
	if w := r.waiting; w != nil {
		w.cancel(errRetune)
		<-w.done
	}
	return old, r.Acquirer.SetRate(rate)
}
