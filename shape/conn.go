package shape

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"sync"
	"time"

	"github.com/smoothrate/ratelimit"
)

// Limits are the limiters of a connection, one per direction. A nil limiter
// leaves that direction unshaped. The same limiter may serve both
// directions (a cap on the sum of the traffic) or many connections (a cap
// on their total).
type Limits struct {
	Read, Write ratelimit.Acquirer
}

// Conn is a net.Conn whose reads and writes are shaped like a Reader's and a
// Writer's. Make one with NewConn, or get them from a Listener.
//
// Deadlines hold for the waits too: a wait that a deadline cannot meet
// fails at once with an error for which errors.Is(err,
// os.ErrDeadlineExceeded) holds and which is a net.Error with Timeout() true,
// as net.Conn promises. Setting a deadline, or closing the connection,
// interrupts waits under way, so the usual idiom of setting a past deadline
// to abort a blocked Read works.
//
// Like a net.Conn, it is safe for concurrent use. A Write is written whole
// before another Write starts, and likewise for Reads, so concurrent writers
// do not interleave their chunks.
//
// The wrapped connection is the Conn field, for what net.Conn does not
// offer (a *net.TCPConn's CloseWrite, say). Reading or writing through it
// bypasses the shaping.
type Conn struct {
	net.Conn
	rd, wr half
}

// half is one direction of a Conn: its pacing, its deadline and its lock.
type half struct {
	mu     sync.Mutex // held for a whole Read or Write
	p      pacer
	credit int // reads only: paid for and not yet read
	dl     deadline
}

// deadline is a direction's deadline, and the cancel function of the wait
// under way so that a new deadline or Close can interrupt it.
type deadline struct {
	mu     sync.Mutex
	t      time.Time
	cancel context.CancelCauseFunc // the wait under way's, or nil
	bound  time.Time               // the deadline the wait under way began under
	timer  *time.Timer             // ends that wait at an earlier deadline set since
	closed bool
}

// errDeadlinePassed is the cause given to a wait that a deadline set during
// it ended.
var errDeadlinePassed = errors.New("shape: deadline passed")

// set makes t the deadline. A wait under way goes on, paying nothing
// again, and ends at t if t is earlier than the deadline it began under (at
// once if t has passed). Interrupting it to wait again under t would pay
// twice: a limiter gives a booking back only if nothing was booked since,
// which on a limiter shared by other streams is rare.
func (d *deadline) set(t time.Time) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.t = t
	if d.cancel == nil {
		return
	}
	if d.timer != nil {
		d.timer.Stop()
		d.timer = nil
	}
	if t.IsZero() || !d.bound.IsZero() && !t.Before(d.bound) {
		return // the wait's own context ends at bound
	}
	cancel := d.cancel
	if wait := time.Until(t); wait <= 0 {
		cancel(errDeadlinePassed)
	} else {
		d.timer = time.AfterFunc(wait, func() { cancel(errDeadlinePassed) })
	}
}

// extended reports whether the deadline is now later than bound, one a
// wait began under (zero: none).
func (d *deadline) extended(bound time.Time) bool {
	d.mu.Lock()
	defer d.mu.Unlock()
	return !bound.IsZero() && (d.t.IsZero() || d.t.After(bound))
}

func (d *deadline) close() {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.closed = true
	if d.cancel != nil {
		d.cancel(net.ErrClosed)
	}
}

// begin returns a context for one wait, bounded by the deadline and
// cancelled by set and close.
func (d *deadline) begin() (context.Context, context.CancelFunc, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.closed {
		return nil, nil, net.ErrClosed
	}
	if !d.t.IsZero() && !time.Now().Before(d.t) {
		return nil, nil, &DeadlineError{Cause: context.DeadlineExceeded}
	}
	ctx, cancel := context.WithCancelCause(context.Background())
	d.cancel, d.bound = cancel, d.t
	stop := func() {
		d.mu.Lock()
		d.cancel = nil
		if d.timer != nil {
			d.timer.Stop()
			d.timer = nil
		}
		d.mu.Unlock()
		cancel(nil)
	}
	if d.t.IsZero() {
		return ctx, stop, nil
	}
	ctx, cancelDeadline := context.WithDeadline(ctx, d.t)
	return ctx, func() { cancelDeadline(); stop() }, nil
}

// pay pays n bytes to every limiter, under the direction's deadline
// (deadline.set: a deadline changed during a wait bounds it without
// interrupting it). A wait that its deadline ended after the deadline was
// moved later (a limiter that waits past a deadline it cannot meet, where
// a *ratelimit.Limiter fails at once) resumes under the new deadline,
// without paying again the limiters already paid.
func (h *half) pay(n int) error {
	paid := 0
	for {
		ctx, done, err := h.dl.begin()
		if err != nil {
			return err
		}
		bound, _ := ctx.Deadline()
		paid, err = h.p.pay(ctx, n, paid)
		cause := context.Cause(ctx)
		done()
		switch {
		case err == nil:
			return nil
		case cause == net.ErrClosed:
			return net.ErrClosed
		case cause == errDeadlinePassed:
			return &DeadlineError{Cause: err}
		case errors.Is(err, context.DeadlineExceeded):
			if cause == context.DeadlineExceeded && h.dl.extended(bound) {
				continue
			}
			return &DeadlineError{Cause: err}
		}
		return err
	}
}

// DeadlineError is the error of a shaped connection's wait that its deadline
// cut short. It matches os.ErrDeadlineExceeded with errors.Is and is a
// net.Error whose Timeout is true, like the error of a net.Conn whose
// deadline passed.
type DeadlineError struct {
	Cause error // the limiter's error, or context.DeadlineExceeded
}

// Error reads like a net.Conn's i/o timeout, naming the rate limit as the
// reason; the cause is reached through Unwrap.
func (e *DeadlineError) Error() string {
	return "shape: i/o timeout: the rate limit's wait would pass the deadline"
}

// Unwrap returns os.ErrDeadlineExceeded and the cause.
func (e *DeadlineError) Unwrap() []error { return []error{os.ErrDeadlineExceeded, e.Cause} }

// Timeout is true: the deadline passed.
func (e *DeadlineError) Timeout() bool { return true }

// Temporary is true, as for os.ErrDeadlineExceeded.
func (e *DeadlineError) Temporary() bool { return true }

var _ net.Error = (*DeadlineError)(nil)

// NewConn returns c with its reads paying lim.Read and its writes paying
// lim.Write. The only errors come from invalid options (ErrInvalidOption;
// WithContext does not apply to connections, which have deadlines) and a
// nil c (ErrInvalidArgument).
func NewConn(c net.Conn, lim Limits, opts ...Option) (*Conn, error) {
	cfg, err := buildConnConfig(opts)
	if err != nil {
		return nil, err
	}
	if c == nil {
		return nil, fmt.Errorf("%w: nil net.Conn", ErrInvalidArgument)
	}
	return newConn(c, lim, Limits{}, cfg), nil
}

// buildConnConfig is buildConfig for connections, which have deadlines
// instead of a context.
func buildConnConfig(opts []Option) (config, error) {
	cfg, err := buildConfig(opts)
	if err == nil && cfg.setCtx {
		err = fmt.Errorf("%w: WithContext on a connection (it has deadlines)", ErrInvalidOption)
	}
	return cfg, err
}

func newConn(c net.Conn, own, shared Limits, cfg config) *Conn {
	cfgFor := func(s ratelimit.Acquirer) config {
		if s == nil {
			return cfg
		}
		cfg := cfg
		cfg.shared = append([]ratelimit.Acquirer{s}, cfg.shared...)
		return cfg
	}
	sc := &Conn{Conn: c}
	sc.rd.p = newPacer(own.Read, cfgFor(shared.Read))
	sc.wr.p = newPacer(own.Write, cfgFor(shared.Write))
	return sc
}

// Read reads at most one chunk, paying first if nothing paid for is left.
// Read and Write of a zero Conn (not made by NewConn or a Listener) return
// an error wrapping ratelimit.ErrNotInitialized.
func (c *Conn) Read(p []byte) (int, error) {
	if c.Conn == nil {
		return 0, notMade("Conn")
	}
	c.rd.mu.Lock()
	defer c.rd.mu.Unlock()
	return readChunk(c.Conn, p, &c.rd.p, &c.rd.credit, c.rd.pay)
}

// Write writes p in chunks, paying for each before it goes out, and returns
// the bytes written and, if fewer than len(p), the error.
func (c *Conn) Write(p []byte) (int, error) {
	if c.Conn == nil {
		return 0, notMade("Conn")
	}
	c.wr.mu.Lock()
	defer c.wr.mu.Unlock()
	return writeChunks(c.Conn, p, &c.wr.p, c.wr.pay)
}

// Close interrupts the waits under way (they return net.ErrClosed) and
// closes the connection.
func (c *Conn) Close() error {
	c.rd.dl.close()
	c.wr.dl.close()
	return c.Conn.Close()
}

// SetDeadline sets the read and write deadlines of the connection and of
// its waits. A wait under way goes on, and ends at the new deadline if that
// is earlier than the one it began under (at once if it has passed).
func (c *Conn) SetDeadline(t time.Time) error {
	if err := c.Conn.SetDeadline(t); err != nil {
		return err
	}
	c.rd.dl.set(t)
	c.wr.dl.set(t)
	return nil
}

// SetReadDeadline sets the read deadline of the connection and of its
// waits.
func (c *Conn) SetReadDeadline(t time.Time) error {
	if err := c.Conn.SetReadDeadline(t); err != nil {
		return err
	}
	c.rd.dl.set(t)
	return nil
}

// SetWriteDeadline sets the write deadline of the connection and of its
// waits.
func (c *Conn) SetWriteDeadline(t time.Time) error {
	if err := c.Conn.SetWriteDeadline(t); err != nil {
		return err
	}
	c.wr.dl.set(t)
	return nil
}

// Listener is a net.Listener whose accepted connections are shaped: each by
// its own limits, if any, and all of them together by shared limits, if
// any. Make one with NewListener.
type Listener struct {
	net.Listener
	shared  Limits
	perConn func(net.Conn) Limits
	cfg     config
}

// NewListener returns a Listener that shapes every connection l accepts.
// shared limits the total traffic of all connections (nil fields: no total
// limit). perConn, if not nil, is called for each accepted connection and
// returns that connection's own limits (new limiters each time, or the
// connection is not limited on its own). A connection pays its own limiter
// first, then the shared one. The only errors come from invalid options
// (ErrInvalidOption; WithContext does not apply) and a nil l
// (ErrInvalidArgument).
func NewListener(l net.Listener, shared Limits, perConn func(net.Conn) Limits, opts ...Option) (*Listener, error) {
	cfg, err := buildConnConfig(opts)
	if err != nil {
		return nil, err
	}
	if l == nil {
		return nil, fmt.Errorf("%w: nil net.Listener", ErrInvalidArgument)
	}
	return &Listener{Listener: l, shared: shared, perConn: perConn, cfg: cfg}, nil
}

// Accept waits for a connection and returns it shaped, as a *Conn. A zero
// Listener (not made by NewListener) returns an error wrapping
// ratelimit.ErrNotInitialized.
func (l *Listener) Accept() (net.Conn, error) {
	if l.Listener == nil {
		return nil, notMade("Listener")
	}
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	var own Limits
	if l.perConn != nil {
		own = l.perConn(c)
	}
	return newConn(c, own, l.shared, l.cfg), nil
}
