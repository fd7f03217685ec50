package shape

import (
	"context"
	"errors"
	"fmt"
	"math"
	"time"

	"github.com/smoothrate/ratelimit"
	"github.com/smoothrate/ratelimit/internal/check"
)

// Chunk sizing. A chunk is the unit of payment and of I/O: one Acquire, then
// one Write or Read of at most that many bytes.
const (
	// ChunkDuration is how much transfer time the default chunk holds. At
	// 10 ms a shaped stream wakes up at most 100 times a second, so a timer
	// oversleep of about 1 ms (typical of a VM) costs little and is made up
	// from the limiter's stored permits, while the stream still looks smooth
	// on any scale from 100 ms up.
	ChunkDuration = 10 * time.Millisecond
	// MinChunkSize is the smallest default chunk. Go sets TCP_NODELAY on
	// its connections, so every Write may become a packet; with 40 to 60
	// bytes of TCP/IP headers, 1 KiB keeps the header overhead near 5 %.
	// Below 100 kB/s a default chunk therefore holds more than 10 ms of data;
	// WithChunkSize trades that back if smoothness matters more.
	MinChunkSize = 1 << 10
	// MaxChunkSize is the largest default chunk: 64 KiB is a Linux pipe's
	// buffer and the largest TCP segment offload, so bigger chunks save no
	// system calls worth having, and at 1 GB/s a 64 KiB chunk still only
	// lasts 66 µs.
	MaxChunkSize = 64 << 10
)

// ChunkSize returns the default chunk for a stream limited to bytesPerSecond:
// ChunkDuration's worth of data, clamped to [MinChunkSize, MaxChunkSize]. A
// rate that is not a positive number gives MinChunkSize; +Inf gives
// MaxChunkSize.
func ChunkSize(bytesPerSecond float64) int {
	if !(bytesPerSecond > 0) {
		return MinChunkSize
	}
	c := bytesPerSecond * ChunkDuration.Seconds()
	switch {
	case c <= MinChunkSize:
		return MinChunkSize
	case c >= MaxChunkSize:
		return MaxChunkSize
	}
	return int(c)
}

// An Option configures a shaper made by NewWriter, NewReader, NewConn or
// NewListener. A nil option, an option with an invalid value and an option
// that does not apply to the constructor it is given to (WithContext to
// NewConn or NewListener) are errors wrapping ErrInvalidOption, returned by
// the constructor, as everywhere in this module.
type Option interface {
	apply(*config) error
}

type optionFunc func(*config) error

func (f optionFunc) apply(c *config) error { return f(c) }

// config holds every knob with its default; buildConfig is the only place
// defaults are set.
type config struct {
	chunk  int // 0: ChunkSize of the current rate
	ctx    context.Context
	setCtx bool // WithContext was given: streams only
	shared []ratelimit.Acquirer
}

func buildConfig(opts []Option) (config, error) {
	c := config{ctx: context.Background()}
	for _, o := range opts {
		if o == nil {
			return config{}, fmt.Errorf("%w: nil option", ErrInvalidOption)
		}
		if err := o.apply(&c); err != nil {
			return config{}, check.Option(ErrInvalidOption, err)
		}
	}
	return c, nil
}

// WithChunkSize fixes the chunk size at n bytes instead of deriving it from
// the rate. n must be at least 1 (else ErrInvalidChunkSize). Large chunks
// make bursts: a chunk leaves in one Write.
func WithChunkSize(n int) Option {
	return optionFunc(func(c *config) error {
		if n < 1 {
			return fmt.Errorf("%w: %d", ErrInvalidChunkSize, n)
		}
		c.chunk = n
		return nil
	})
}

// WithContext makes a Reader's or Writer's waits end when ctx does: the call
// then returns the bytes moved so far and ctx's error. A context deadline
// that a wait cannot meet fails the call at once (see ratelimit.Limiter's
// Acquire) with a *DeadlineError, which matches os.ErrDeadlineExceeded and
// context.DeadlineExceeded. Readers and Writers only: connections have
// deadlines, and NewConn and NewListener refuse it.
func WithContext(ctx context.Context) Option {
	return optionFunc(func(c *config) error {
		if ctx == nil {
			return fmt.Errorf("%w: nil context", ErrInvalidOption)
		}
		c.ctx, c.setCtx = ctx, true
		return nil
	})
}

// WithShared makes the stream also pay lim, after its own limiter: give the
// same lim to many streams to cap their total as well as each one. The own
// limiter is paid first so that a stream held back by its own limit does not
// book shared bandwidth it cannot use yet. Since both limiters count time
// from the same moments, the wait is about the longer of the two, not their
// sum. A nil lim is an error.
func WithShared(lim ratelimit.Acquirer) Option {
	return optionFunc(func(c *config) error {
		if check.IsNil(lim) {
			return fmt.Errorf("%w: nil shared limiter", ErrInvalidOption)
		}
		c.shared = append(c.shared, lim)
		return nil
	})
}

// pacer is what every wrapper shares: the limiters a chunk pays, in order,
// and the chunk size rule.
type pacer struct {
	lims  []ratelimit.Acquirer
	chunk int
}

func newPacer(own ratelimit.Acquirer, cfg config) pacer {
	var lims []ratelimit.Acquirer
	if !check.IsNil(own) { // a nil *Limiter too: unshaped, as documented
		lims = append(lims, own)
	}
	return pacer{lims: append(lims, cfg.shared...), chunk: cfg.chunk}
}

// next returns the size of the next chunk of a transfer with remaining
// bytes to go, or unlimited if every limiter's rate is +Inf (the transfer
// then goes through in one piece, paying nothing). The rate is read for
// every chunk so that a SetRate takes effect at once.
func (p *pacer) next(remaining int) (n int, unlimited bool) {
	rate := math.Inf(1)
	for _, l := range p.lims {
		rate = min(rate, l.Rate())
	}
	if math.IsInf(rate, 1) {
		return remaining, true
	}
	c := p.chunk
	if c == 0 {
		c = ChunkSize(rate)
	}
	return min(c, remaining), false
}

// payCtx is the payment of a Reader or Writer: a context deadline that the
// wait cannot meet is reported like a connection's, as a *DeadlineError,
// which matches both os.ErrDeadlineExceeded and context.DeadlineExceeded.
func (p *pacer) payCtx(ctx context.Context, n int) error {
	_, err := p.pay(ctx, n, 0)
	if err != nil && errors.Is(err, context.DeadlineExceeded) {
		return &DeadlineError{Cause: err}
	}
	return err
}

// pay acquires n permits from the limiters from index from on, and returns
// how many limiters have been paid in all, so that a wait interrupted by a
// deadline change can resume without paying twice.
func (p *pacer) pay(ctx context.Context, n, from int) (paid int, err error) {
	for i := from; i < len(p.lims); i++ {
		if _, err := p.lims[i].Acquire(ctx, n); err != nil {
			return i, err
		}
	}
	return len(p.lims), nil
}
