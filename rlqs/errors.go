package rlqs

import (
	"errors"

	"github.com/smoothrate/ratelimit/throttle"
)

// Store errors, the same values as package throttle's and package rls's,
// so that errors.Is answers alike whichever package failed.
var (
	// ErrStore: the store failed; every store error wraps it, and one of
	// ErrUnavailable and ErrMisconfigured when the failure is one of
	// theirs.
	ErrStore = throttle.ErrStore
	// ErrUnavailable: Redis did not answer in time or could not be
	// reached (an outage). A Server keeps the shares it last knew.
	ErrUnavailable = throttle.ErrUnavailable
	// ErrMisconfigured: Redis answers but cannot be used as configured
	// (a wrong password or database, a cluster client on a single server
	// or the reverse, a key of another type). A command refuses to start
	// on it (RedisStore.Check).
	ErrMisconfigured = throttle.ErrMisconfigured
	// ErrInvalidOption: a nil option or an option with a bad value.
	ErrInvalidOption = errors.New("rlqs: invalid option")
	// ErrShutdown: the Server is shutting down (Shutdown) and takes no
	// new stream.
	ErrShutdown = errors.New("rlqs: server shutting down")
)
