package shape

import (
	"context"
	"fmt"
	"io"

	"github.com/smoothrate/ratelimit"
)

// Reader shapes the bytes read through it. Each Read is first trimmed to
// what has been paid for; when nothing is left, a chunk is paid before the
// wrapped reader is asked for anything. Make one with NewReader. A Reader is
// meant for one goroutine at a time.
type Reader struct {
	r   io.Reader
	p   pacer
	ctx context.Context
	// credit is what has been paid for and not yet read. A read that
	// returns less than its chunk leaves credit for the next one, so short
	// reads cost nothing extra and the long-run rate stays exact.
	credit int
}

// NewReader returns a Reader that reads from r at the rate lim allows. A nil
// lim, or one whose rate is +Inf, lets data through unshaped. The only
// errors come from invalid options and a nil r (ErrInvalidArgument).
func NewReader(r io.Reader, lim ratelimit.Acquirer, opts ...Option) (*Reader, error) {
	cfg, err := buildConfig(opts)
	if err != nil {
		return nil, err
	}
	if r == nil {
		return nil, fmt.Errorf("%w: nil io.Reader", ErrInvalidArgument)
	}
	return &Reader{r: r, p: newPacer(lim, cfg), ctx: cfg.ctx}, nil
}

// Read reads at most one chunk into p. If no paid-for bytes are left it
// first pays for a chunk, waiting as the limiter says; if that wait fails
// (WithContext), Read returns 0 and the context's error without touching the
// wrapped reader. A zero Reader (not made by NewReader) returns an error
// wrapping ratelimit.ErrNotInitialized.
func (r *Reader) Read(p []byte) (int, error) {
	if r.r == nil {
		return 0, notMade("Reader")
	}
	return readChunk(r.r, p, &r.p, &r.credit, func(n int) error {
		return r.p.payCtx(r.ctx, n)
	})
}

// readChunk is the read step of Reader and Conn.
func readChunk(src io.Reader, p []byte, pc *pacer, credit *int, pay func(n int) error) (int, error) {
	if len(p) == 0 {
		return src.Read(p)
	}
	size := len(p)
	if *credit == 0 {
		chunk, unlimited := pc.next(len(p))
		if unlimited {
			return src.Read(p)
		}
		if err := pay(chunk); err != nil {
			return 0, err
		}
		*credit = chunk
	}
	size = min(size, *credit)
	n, err := src.Read(p[:size])
	if n < 0 || n > size {
		return 0, fmt.Errorf("%w: Read of %d bytes returned %d", ErrInvalidCount, size, n)
	}
	*credit -= n
	return n, err
}
