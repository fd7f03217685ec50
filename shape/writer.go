package shape

import (
	"context"
	"fmt"
	"io"

	"github.com/smoothrate/ratelimit"
)

// Writer shapes the bytes written through it: every chunk is paid to the
// limiter before it is written. Make one with NewWriter. A Writer is meant
// for one goroutine at a time, like most io.Writers; several Writers may
// share a limiter.
type Writer struct {
	w   io.Writer
	p   pacer
	ctx context.Context
}

// NewWriter returns a Writer that writes to w at the rate lim allows. A nil
// lim, or one whose rate is +Inf, lets data through unshaped. The only
// errors come from invalid options and a nil w (ErrInvalidArgument).
func NewWriter(w io.Writer, lim ratelimit.Acquirer, opts ...Option) (*Writer, error) {
	cfg, err := buildConfig(opts)
	if err != nil {
		return nil, err
	}
	if w == nil {
		return nil, fmt.Errorf("%w: nil io.Writer", ErrInvalidArgument)
	}
	return &Writer{w: w, p: newPacer(lim, cfg), ctx: cfg.ctx}, nil
}

// Write writes p in chunks, paying for each before it goes out. It returns
// the number of bytes the wrapped writer accepted and, if that is less than
// len(p), why: the writer's error, the context's error (WithContext), or
// io.ErrShortWrite if the writer stopped short without saying why. A chunk
// that was paid for but not written stays paid. A zero Writer (not made by
// NewWriter) writes nothing and returns an error wrapping
// ratelimit.ErrNotInitialized.
func (w *Writer) Write(p []byte) (int, error) {
	if w.w == nil {
		return 0, notMade("Writer")
	}
	return writeChunks(w.w, p, &w.p, func(n int) error {
		return w.p.payCtx(w.ctx, n)
	})
}

// writeChunks is the write loop of Writer and Conn: pay, then write, one
// chunk at a time, keeping count of what the writer accepted.
func writeChunks(dst io.Writer, p []byte, pc *pacer, pay func(n int) error) (int, error) {
	if len(p) == 0 {
		return dst.Write(p) // nothing to pay for; keep the writer's own answer
	}
	written := 0
	for written < len(p) {
		size, unlimited := pc.next(len(p) - written)
		if !unlimited {
			if err := pay(size); err != nil {
				return written, err
			}
		}
		m, err := dst.Write(p[written : written+size])
		if m < 0 || m > size {
			return written, fmt.Errorf("%w: Write of %d bytes returned %d", ErrInvalidCount, size, m)
		}
		written += m
		if err != nil {
			return written, err
		}
		if m < size {
			return written, io.ErrShortWrite
		}
	}
	return written, nil
}
