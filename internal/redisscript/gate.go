package redisscript

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
)

// ErrUnreachable: the server could not be reached when a Gate dialed it,
// so the call was not made. The errors that match it read as the dial's
// error and keep it as text only (a dialer's context error would otherwise
// read as the caller's). Class Outage.
var ErrUnreachable = errors.New("redis server unreachable")

// unreachable is a failed dial of the Gate's: its text, and ErrUnreachable.
type unreachable struct{ dial string }

func (e *unreachable) Error() string        { return e.dial }
func (e *unreachable) Is(target error) bool { return target == ErrUnreachable }

// Gate keeps a library's calls away from a server that cannot be reached.
//
// go-redis dials from its pool when a call needs a connection, and prints
// each dial that fails ("connection pool: failed to dial after N
// attempts") through its process-wide logger. A library has no business
// changing that logger, and a user whose client points at a Redis that is
// not there should get an error from us, not a line in their log for every
// call. So while the server is not known to be reachable (at first, and
// after a call failed to reach it), a call goes through the Gate: it dials
// the server itself, the way the client would (the client's own Dialer,
// which also covers Sentinel and custom dialers; for a cluster or a ring,
// its seed addresses with its TLS settings), closes that connection at
// once, and lets the call through only if the dial succeeded. A failed
// dial is an outage (ErrUnreachable) returned without the client having
// dialed at all.
//
// One probe runs at a time, and every caller that finds the gate closed
// waits for its answer (within the caller's own deadline), then makes its
// call or fails with the probe's error: a healthy server is never refused,
// at start or after a call that merely timed out, and while the server is
// down each probe stands for all the calls that arrive during it, not one
// dial per call.
//
// What a Gate cannot stop: calls already in flight when a server dies
// dial in their turn, and go-redis logs those (a line or a few an outage,
// where without the Gate every call logs until the pool gives up); and a
// cluster or ring whose seed addresses answer while one of its nodes does
// not. A client of another type (a wrapper of the user's) is not gated:
// NewGate returns nil, whose methods let every call through.
type Gate struct {
	dial    func(context.Context) error
	timeout time.Duration
	// single: the client's is one server, not Sentinel's primary (Refine).
	single bool
	up     atomic.Bool
	mu     sync.Mutex
	probe  *attempt // in flight, or nil
}

type attempt struct {
	done chan struct{}
	err  error
}

// NewGate returns a Gate for client c (a *redis.Client, *redis.ClusterClient
// or *redis.Ring) whose probes dial for at most timeout, or nil for a
// client of another type.
func NewGate(c any, timeout time.Duration) *Gate {
	dial := dialerOf(c)
	if dial == nil {
		return nil
	}
	g := &Gate{dial: dial, timeout: timeout}
	if c, ok := c.(*redis.Client); ok {
		// go-redis's NewFailoverClient names its server so.
		g.single = c.Options().Addr != "FailoverClient"
	}
	return g
}

// ErrReplica: the one server of a client (neither Sentinel's nor a
// cluster's) answered READONLY: it is a replica. Class Misconfigured.
var ErrReplica = errors.New("the server is a replica, which refuses writes: give the client its primary's address, or its Sentinels")

// Refine returns err, a call's error (or a package's Error of it), as a
// misconfiguration where its reply alone would read as an outage: a
// READONLY reply from the one server of a plain client (ErrReplica).
// That server is a replica, whether its address was given wrong or a
// failover demoted it, and stays one until someone promotes it, while
// the client never looks for the primary: failing open on it would run
// unlimited for as long. Sentinel's client and a cluster's find the new
// primary after a failover: READONLY from them stays an outage. A nil
// Gate (a client it cannot see into) changes nothing.
func (g *Gate) Refine(err error) error {
	if g == nil || !g.single || err == nil || Classify(err) != Outage || !IsReply(err) || !strings.Contains(err.Error(), "READONLY") {
		return err
	}
	var e *Error
	if errors.As(err, &e) {
		return &Error{Room: e.Room, Class: Misconfigured, Kind: e.Kind, Err: fmt.Errorf("%w (%w)", e.Err, ErrReplica)}
	}
	return fmt.Errorf("%w (%w)", err, ErrReplica)
}

// Open reports whether calls go through without a probe: the server is
// known to be reachable, or g is nil.
func (g *Gate) Open() bool { return g == nil || g.up.Load() }

// Enter is called before a call to the server. It returns nil if the call
// may go ahead; an error wrapping ErrUnreachable if the server was found
// unreachable; ctx's error if ctx ended while a probe ran.
func (g *Gate) Enter(ctx context.Context) error {
	if g.Open() {
		return nil
	}
	g.mu.Lock()
	if g.up.Load() {
		g.mu.Unlock()
		return nil
	}
	p := g.probe
	if p == nil {
		p = &attempt{done: make(chan struct{})}
		g.probe = p
		go g.run(p)
	}
	g.mu.Unlock()
	select {
	case <-p.done:
		if p.err != nil {
			return &unreachable{p.err.Error()}
		}
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// run dials once, on its own deadline (a caller that gives up does not
// cut the probe short, so its answer is about the server), and publishes
// the answer.
func (g *Gate) run(p *attempt) {
	ctx, cancel := context.WithTimeout(context.Background(), g.timeout)
	err := guardedDial(ctx, g.dial)
	cancel()
	g.mu.Lock()
	p.err = err
	g.probe = nil
	g.up.Store(err == nil)
	g.mu.Unlock()
	close(p.done)
}

func guardedDial(ctx context.Context, dial func(context.Context) error) (err error) {
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("the dialer panicked: %v", r)
		}
	}()
	return dial(ctx)
}

// Leave is called with the error of a call that went through: one that
// says the server could not be reached or did not answer in time closes
// the gate, so that the next call probes first, and while the server is
// down every call fails at once instead of waiting out its bound. That is
// an outage that is not a reply of the server's, and also a call whose
// context's deadline passed before an answer, whoever's deadline it was:
// a client that retries a dead server's refused dials, with pauses,
// until the deadline ends its wait reports only the deadline. A caller's
// cancellation says nothing about the server and leaves the gate open.
func (g *Gate) Leave(err error) {
	if g == nil || err == nil || !g.up.Load() {
		return
	}
	if Classify(err) == Outage && !IsReply(err) || errors.Is(err, context.DeadlineExceeded) {
		g.up.Store(false)
	}
}

// dialerOf returns a function that dials c's server (one of a cluster's or
// a ring's addresses) as c would and closes the connection, or nil for a
// client it cannot see into.
func dialerOf(c any) func(context.Context) error {
	type dialFunc = func(ctx context.Context, network, addr string) (net.Conn, error)
	var (
		dial    dialFunc
		network = "tcp"
		addrs   []string
		tlsConf *tls.Config
	)
	switch c := c.(type) {
	case *redis.Client:
		if c == nil {
			return nil
		}
		o := c.Options()
		dial, network, addrs = o.Dialer, o.Network, []string{o.Addr}
		if dial == nil { // NewClient always sets one; a zero Client has none
			return nil
		}
	case *redis.ClusterClient:
		if c == nil {
			return nil
		}
		o := c.Options()
		dial, addrs, tlsConf = o.Dialer, o.Addrs, o.TLSConfig
	case *redis.Ring:
		if c == nil {
			return nil
		}
		o := c.Options()
		dial, tlsConf = o.Dialer, o.TLSConfig
		for _, a := range o.Addrs {
			addrs = append(addrs, a)
		}
	default:
		return nil
	}
	if len(addrs) == 0 {
		return nil
	}
	if dial == nil {
		dial = func(ctx context.Context, network, addr string) (net.Conn, error) {
			if tlsConf != nil {
				d := tls.Dialer{Config: tlsConf}
				return d.DialContext(ctx, network, addr)
			}
			var d net.Dialer
			return d.DialContext(ctx, network, addr)
		}
	}
	return func(ctx context.Context) error {
		var err error
		for _, a := range addrs {
			var conn net.Conn
			if conn, err = dial(ctx, network, a); err == nil {
				_ = conn.Close()
				return nil
			}
			if ctx.Err() != nil {
				break
			}
		}
		return err
	}
}
