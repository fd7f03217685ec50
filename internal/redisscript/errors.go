package redisscript

import (
	"context"
	"errors"
	"fmt"
	"time"
)

// The failure classes' sentinels: one value each for every package that
// calls a store, exported by throttle, rls and distributed (and used by
// httplimit and grpclimit) under their usual names, so that errors.Is
// answers the same whichever package returned the error. Their texts name
// no package: an Error names its package once, in front.
var (
	// ErrStore: a store call failed. Every Error matches it, and so does
	// every error that wraps ErrUnavailable or ErrMisconfigured.
	ErrStore = errors.New("store failed")
	// ErrUnavailable: the store could not answer now (class Outage).
	ErrUnavailable error = &classError{"redis unavailable"}
	// ErrMisconfigured: the store answered with an error no retry can fix
	// (class Misconfigured).
	ErrMisconfigured error = &classError{"redis misconfigured"}
)

// classError is an outage's or a misconfiguration's sentinel: a store
// failure of a kind, so it also matches ErrStore.
type classError struct{ text string }

func (e *classError) Error() string        { return e.text }
func (e *classError) Is(target error) bool { return target == ErrStore }

// Sentinel is the one mapping of a class to the sentinels: an Outage is
// ErrUnavailable, a Misconfigured error ErrMisconfigured, anything else (a
// Bug, the caller's own Cancelled context) neither, since it is neither an
// outage nor a configuration an operator can fix. Only an error that
// matches ErrUnavailable may fail open.
func Sentinel(c Class) error {
	switch c {
	case Outage:
		return ErrUnavailable
	case Misconfigured:
		return ErrMisconfigured
	}
	return nil
}

// Error is a failed store call as a package returns it: the package (Room:
// "throttle", "rls", "distributed"), the failure's class, and its cause. It
// reads "room: what failed: cause" ("rls: redis unavailable: dial tcp
// 127.0.0.1:6379: connect: connection refused") and matches ErrStore, the
// class's sentinel (Sentinel) and Kind, and through Unwrap its cause.
type Error struct {
	Room  string
	Class Class
	// Kind is a sentinel of the room's own that the error also matches
	// (throttle.ErrWrongType, distributed.ErrCallTimeout), or nil.
	Kind error
	Err  error
}

// Fail classifies err, a failed store call's (Classify), as room's Error;
// nil for nil. An Error of another room keeps its class and kind, and
// names room instead.
func Fail(room string, err error) error {
	if err == nil {
		return nil
	}
	var e *Error
	if errors.As(err, &e) {
		if e.Room == room {
			return err
		}
		return &Error{Room: room, Class: e.Class, Kind: e.Kind, Err: e.Err}
	}
	return &Error{Room: room, Class: Classify(err), Err: err}
}

func (e *Error) Error() string {
	what := ErrStore.Error()
	if s := Sentinel(e.Class); s != nil {
		what = s.Error()
	}
	if e.Err == nil {
		return e.Room + ": " + what
	}
	return e.Room + ": " + what + ": " + e.Err.Error()
}

func (e *Error) Is(target error) bool {
	if target == nil {
		return false
	}
	return target == ErrStore || target == Sentinel(e.Class) || target == e.Kind
}

func (e *Error) Unwrap() error { return e.Err }

// A Bound is a library's own bound on store calls (a store timeout, not
// the caller's deadline). A context it makes (Within) ends after its
// length with a cause that wraps ErrTimeout, and CtxErr, Ended and Call
// read that end as an outage (the store did not answer in time), not as
// the caller's own deadline. Its error is made once, so Within costs what
// context.WithTimeout does. The zero Bound bounds nothing.
type Bound struct {
	d   time.Duration
	err error
}

// NewBound returns the Bound of length d (none if d <= 0).
func NewBound(d time.Duration) Bound {
	if d <= 0 {
		return Bound{}
	}
	return Bound{d: d, err: timeoutError(d)}
}

// Within returns parent bounded by b, and its cancel function.
func (b Bound) Within(parent context.Context) (context.Context, context.CancelFunc) {
	if b.d <= 0 {
		return parent, func() {}
	}
	return context.WithTimeoutCause(parent, b.d, b.err)
}

// WithTimeout is NewBound(d).Within(parent), for a bound used once.
func WithTimeout(parent context.Context, d time.Duration) (context.Context, context.CancelFunc) {
	return NewBound(d).Within(parent)
}

// timeoutError is ErrTimeout after d: text only, so that it does not
// match context.DeadlineExceeded.
func timeoutError(d time.Duration) error { return fmt.Errorf("%w after %v", ErrTimeout, d) }

// TimeoutAfter is the error of a call that a library's bound of d ended
// (class Outage): it wraps ErrTimeout and does not match
// context.DeadlineExceeded.
func TimeoutAfter(d time.Duration) error { return timeoutError(d) }

// Ended is the error of a call that failed with err under ctx: when err
// says only that a context ended (class Cancelled) and ctx has, what ended
// ctx (CtxErr: a library's bound is an outage, the store's not answering
// in time; the caller's own end is not); else err, whose failure stands,
// as does an Error, classified already.
func Ended(ctx context.Context, err error) error {
	var classified *Error
	if err == nil || Classify(err) != Cancelled || errors.As(err, &classified) {
		return err
	}
	if cerr := CtxErr(ctx); cerr != nil {
		if err == ctx.Err() {
			return cerr
		}
		return fmt.Errorf("%w (%v)", cerr, err)
	}
	return err
}

// CtxErr is the error of a call that ended because ctx did: ctx's cause
// when it is a library's bound (WithTimeout: class Outage), else ctx's
// own error (class Cancelled); nil while ctx runs.
func CtxErr(ctx context.Context) error {
	err := ctx.Err()
	if err == nil {
		return nil
	}
	if cause := context.Cause(ctx); errors.Is(cause, ErrTimeout) {
		return cause
	}
	return err
}
