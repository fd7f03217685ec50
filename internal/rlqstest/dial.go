package rlqstest

import (
	"context"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/backoff"
	"google.golang.org/grpc/credentials/insecure"
)

// Dial returns a client connection to a server on addr (host:port) over
// TCP, for Envoys that talk to a server in another process (the
// `ratelimit rlqs` binary) on the real clock. Close it.
//
// It reconnects within half a second of a lost connection, as Envoy does:
// Envoy's filter opens a new stream at its next report and its cluster's
// connection pool dials again for it, without the growing pauses of
// gRPC-Go's default backoff (1 s, then 1.6 times more each failure).
func Dial(addr string) (*grpc.ClientConn, error) {
	return grpc.NewClient(addr,
		grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithConnectParams(grpc.ConnectParams{
			Backoff:           backoff.Config{BaseDelay: 50 * time.Millisecond, Multiplier: 1.6, Jitter: 0.2, MaxDelay: 500 * time.Millisecond},
			MinConnectTimeout: time.Second,
		}))
}

// Drive makes e send requests into id at rate per second, evenly spaced
// from now, until ctx ends or e is closed. It keeps to its schedule: after
// a late wake-up (a busy machine) it sends the requests that were due at
// once, so that over any few seconds the demand is the rate whatever the
// scheduler did. It returns the number of requests sent.
func (e *Envoy) Drive(ctx context.Context, id map[string]string, rate float64) int {
	if rate <= 0 {
		<-ctx.Done()
		return 0
	}
	start := time.Now()
	every := time.Duration(float64(time.Second) / rate)
	t := time.NewTimer(0)
	defer t.Stop()
	for n := 0; ; n++ {
		if wait := time.Until(start.Add(time.Duration(n) * every)); wait > 0 {
			t.Reset(wait)
			select {
			case <-ctx.Done():
				return n
			case <-t.C:
			}
		} else if ctx.Err() != nil {
			return n
		}
		e.mu.Lock()
		closed := e.closed
		e.mu.Unlock()
		if closed {
			return n
		}
		e.Request(id)
	}
}
