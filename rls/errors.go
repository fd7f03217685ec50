package rls

import (
	"google.golang.org/grpc/codes"
	grpcstatus "google.golang.org/grpc/status"

	"github.com/smoothrate/ratelimit/throttle"
)

// ErrNilContext: ShouldRateLimit was given a nil context.Context. The
// standard library calls that a programming error and may panic; a
// Service answers codes.InvalidArgument with an error that wraps this one
// (the same value as throttle.ErrNilContext).
var ErrNilContext = throttle.ErrNilContext

// statusError is a gRPC status that also wraps one of this package's
// errors, for errors.Is.
type statusError struct {
	st  *grpcstatus.Status
	err error
}

func (e *statusError) Error() string                  { return e.st.Err().Error() }
func (e *statusError) GRPCStatus() *grpcstatus.Status { return e.st }
func (e *statusError) Unwrap() error                  { return e.err }

var errNilContext = &statusError{grpcstatus.New(codes.InvalidArgument, ErrNilContext.Error()), ErrNilContext}
