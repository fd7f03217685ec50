package shape

import (
	"errors"
	"fmt"

	"github.com/smoothrate/ratelimit"
)

// Sentinel errors. Every function of this package that rejects an argument
// returns an error wrapping one of these; test with errors.Is.
var (
	// ErrInvalidChunkSize: WithChunkSize was given a size below 1.
	ErrInvalidChunkSize = errors.New("shape: chunk size must be at least 1 byte")
	// ErrInvalidArgument: a constructor was given a nil io.Reader,
	// io.Writer, net.Conn or net.Listener to wrap.
	ErrInvalidArgument = errors.New("shape: nothing to wrap")
	// ErrInvalidOption: an option was given a nil value (a nil context).
	ErrInvalidOption = errors.New("shape: invalid option")
	// ErrSyntax: a size or rate is not a number followed by a known unit.
	ErrSyntax = errors.New("shape: invalid size or rate")
	// ErrRange: a size or rate is well formed but out of range (zero or
	// negative where that makes no sense, or too large).
	ErrRange = errors.New("shape: size or rate out of range")
)

// ErrInvalidCount: the wrapped Reader or Writer returned a byte count
// outside [0, len(p)], which io's contracts forbid; the shaper stops rather
// than lose or duplicate data.
var ErrInvalidCount = errors.New("shape: wrapped reader or writer returned an invalid count")

// notMade is the error of a method called on a zero wrapper, which has no
// stream to wrap: the same sentinel as a zero ratelimit.Limiter's.
func notMade(what string) error {
	return fmt.Errorf("%w: shape.%s (use New%s)", ratelimit.ErrNotInitialized, what, what)
}
