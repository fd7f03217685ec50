package rlqs

import (
	"sync"

	rlqsv3 "github.com/envoyproxy/go-control-plane/envoy/service/rate_limit_quota/v3"
	"google.golang.org/grpc/codes"
	grpcstatus "google.golang.org/grpc/status"
)

// stream is one client's (one Envoy's) open stream: the buckets it
// reports, and the actions waiting to be sent to it. Its handler goroutine
// reads the reports; one sender goroutine writes the actions, so that a
// slow client never holds up a bucket's tick.
type stream struct {
	domain string

	// done is closed by finish: the handler returns status.
	done       chan struct{}
	finishOnce sync.Once
	status     *grpcstatus.Status

	// wake tells the sender there is something to send (or that it
	// should flush and stop: closing).
	wake chan struct{}
	// sent is closed when the sender has stopped.
	sent chan struct{}

	mu      sync.Mutex
	pending []*rlqsv3.RateLimitQuotaResponse_BucketAction
	// index gives the place in pending of each bucket's action: a
	// newer action for a bucket replaces the one not yet sent.
	index   map[string]int
	closing bool               // flush pending, then stop
	buckets map[string]*bucket // the buckets it subscribed to, by key
}

func newStream(domain string) *stream {
	return &stream{
		domain:  domain,
		done:    make(chan struct{}),
		wake:    make(chan struct{}, 1),
		sent:    make(chan struct{}),
		index:   map[string]int{},
		buckets: map[string]*bucket{},
	}
}

// enqueue queues a for the bucket key, replacing an action for the same
// bucket not yet sent.
func (st *stream) enqueue(key string, a *rlqsv3.RateLimitQuotaResponse_BucketAction) {
	st.mu.Lock()
	if i, ok := st.index[key]; ok {
		st.pending[i] = a
	} else {
		st.index[key] = len(st.pending)
		st.pending = append(st.pending, a)
	}
	st.mu.Unlock()
	select {
	case st.wake <- struct{}{}:
	default:
	}
}

// forget drops the bucket key from the stream's buckets, if it is still b
// (the stream may have subscribed since to a bucket made anew for the
// key): b no longer counts st among its subscribers. Called with b.mu
// held (the order is b.mu, then st.mu, as for enqueue).
func (st *stream) forget(key string, b *bucket) {
	st.mu.Lock()
	if st.buckets[key] == b {
		delete(st.buckets, key)
	}
	st.mu.Unlock()
}

// take empties pending and returns it, with whether the sender should
// stop after sending it.
func (st *stream) take() ([]*rlqsv3.RateLimitQuotaResponse_BucketAction, bool) {
	st.mu.Lock()
	defer st.mu.Unlock()
	p := st.pending
	st.pending = nil
	clear(st.index)
	return p, st.closing
}

// sendLoop sends the queued actions, all that have piled up in one
// response, until the stream ends, or, once closing, until pending is
// empty.
func (st *stream) sendLoop(send func(*rlqsv3.RateLimitQuotaResponse) error) {
	defer close(st.sent)
	for {
		select {
		case <-st.wake:
		case <-st.done:
			return
		}
		p, closing := st.take()
		if len(p) > 0 {
			if err := send(&rlqsv3.RateLimitQuotaResponse{BucketAction: p}); err != nil {
				st.finish(codes.Unavailable, "sending to the client failed: "+err.Error())
				return
			}
		}
		if closing {
			return
		}
	}
}

// close makes the sender send what is queued and stop; sent is closed
// then (or when the stream has ended).
func (st *stream) close() {
	st.mu.Lock()
	st.closing = true
	st.mu.Unlock()
	select {
	case st.wake <- struct{}{}:
	default:
	}
}

// finish ends the stream with the status code and message (codes.OK: the
// client ended it); the first call wins.
func (st *stream) finish(code codes.Code, msg string) {
	st.finishOnce.Do(func() {
		if code != codes.OK {
			st.status = grpcstatus.New(code, msg)
		}
		close(st.done)
	})
}

// err is the status the handler returns.
func (st *stream) err() error {
	if st.status == nil {
		return nil
	}
	return st.status.Err()
}
