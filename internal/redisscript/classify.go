package redisscript

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"strings"

	"github.com/redis/go-redis/v9"
)

// Class is what a failed Redis call means for its caller.
type Class int

const (
	// OK: no error.
	OK Class = iota
	// Outage: Redis could not answer now: the connection was refused or
	// lost, the call timed out (ErrTimeout), or the server said it cannot
	// serve for the moment (LOADING, BUSY, CLUSTERDOWN, MASTERDOWN,
	// TRYAGAIN, READONLY from Sentinel's or a cluster's client during a
	// failover, MISCONF, OOM, NOREPLICAS), or
	// stopped the script with SCRIPT KILL. A later call may succeed; a
	// limiter may fail open on it.
	Outage
	// Misconfigured: Redis answered with an error no retry can fix:
	// NOAUTH, WRONGPASS or NOPERM, a password given to a server without
	// one, a database index the server lacks, a cluster client against a
	// server not in a cluster, a cluster node talked to as a single
	// server (MOVED, ASK, CROSSSLOT), a replica talked to as the one
	// server of a client (READONLY: ErrReplica), an unknown command, a
	// script the server
	// cannot compile or run (a missing library or command), a key of
	// another type where a script keeps its state, a client that is
	// closed or panics, or a TLS handshake refused on its certificates
	// (TLSRefused). Never fail open on it: a fleet that shares nothing
	// would look healthy.
	Misconfigured
	// Bug: a reply nothing here expects: a script's runtime error of our
	// own making, a reply of the wrong shape, an error reply we do not
	// know. Neither retry nor configuration is known to help.
	Bug
	// Cancelled: the caller's context ended (cancelled, or its own
	// deadline): nothing is known about Redis.
	Cancelled
)

func (c Class) String() string {
	switch c {
	case OK:
		return "ok"
	case Outage:
		return "outage"
	case Misconfigured:
		return "misconfigured"
	case Bug:
		return "bug"
	case Cancelled:
		return "cancelled"
	}
	return "unknown"
}

var (
	// ErrTimeout: a call took longer than its bound (Call). It is the
	// library's own bound, not the caller's deadline, so it does not
	// match context.DeadlineExceeded. Class Outage.
	ErrTimeout = errors.New("call timed out")
	// ErrClientPanic: the Redis client panicked (a nil client inside a
	// wrapper, for one). Class Misconfigured.
	ErrClientPanic = errors.New("the redis client panicked")
)

const compileError = "Error compiling script"

// misconfigured are parts of error texts that no retry can fix. They are
// matched in any error's text, not only in replies: a client wrapper may
// not keep go-redis's reply type.
var misconfigured = []string{
	"DB index is out of range", // SELECT on a database the server lacks
	"invalid DB index",
	"NOAUTH", // no password given to a server that requires one
	// Redis 7 refuses a long command from a client that has not
	// authenticated (EVALSHA with its arguments) before saying NOAUTH.
	"Protocol error: unauthenticated",
	"WRONGPASS",                              // a wrong user or password
	"NOPERM",                                 // the ACL user may not run the script or touch the keys
	"called without any password configured", // a password given to a server without one
	"cluster support disabled",               // a cluster client against a standalone server
	"unknown command",                        // the server or a proxy lacks EVALSHA or EVAL
	"Unknown Redis command called from script",
	"Error compiling script",      // the server's Lua cannot load the script
	"nonexistent global variable", // a library the script needs is missing
	"WRONGTYPE",                   // another program's value under a script's key
	"redis: client is closed",
}

// ownMisconfigured and ownBugs are the markers of the scripts' own errors
// (throttle's prelude.lua and meter_head.lua, distributed's engine.lua and
// lease.lua).
var (
	ownMisconfigured = []string{"THROTTLE-WRONGTYPE ", "ERR ratelimit: key "}
	ownBugs          = []string{"THROTTLE-ERR ", "ERR ratelimit: ", "ERR redisscript: "}
)

// misconfiguredReplies begin the error replies of a cluster node talked to
// as a single server (a redis:// URL given a cluster node): MOVED and ASK
// send the client to another node, which only a cluster client follows,
// and CROSSSLOT refuses keys of several slots, which a cluster client's
// callers keep in one slot. A cluster client follows MOVED and ASK itself:
// one that reaches a caller comes from a client that is not a cluster
// client (or one that ran out of redirects, which no retry soon fixes
// either). CLUSTERDOWN stays an outage.
var misconfiguredReplies = []string{"MOVED ", "ASK ", "CROSSSLOT "}

// outageReplies begin the error replies of a server that cannot serve now.
var outageReplies = []string{
	"LOADING", "BUSY", "CLUSTERDOWN", "MASTERDOWN", "TRYAGAIN", "READONLY", "MISCONF", "OOM", "NOREPLICAS",
	// A script stopped by SCRIPT KILL (someone found the server busy):
	// the next run may finish.
	"ERR Script killed",
}

// Classify sorts err, an error of a Redis call made through go-redis
// (possibly wrapped), into its Class.
func Classify(err error) Class {
	var classified *Error
	switch {
	case err == nil:
		return OK
	case errors.As(err, &classified):
		return classified.Class
	case errors.Is(err, ErrUnavailable):
		return Outage
	case errors.Is(err, ErrMisconfigured):
		return Misconfigured
	case errors.Is(err, ErrTimeout), errors.Is(err, ErrUnreachable):
		return Outage
	case errors.Is(err, ErrClientPanic), errors.Is(err, redis.ErrClosed), errors.Is(err, ErrReplica):
		return Misconfigured
	case errors.Is(err, context.Canceled), errors.Is(err, context.DeadlineExceeded):
		return Cancelled
	case errors.Is(err, redis.Nil):
		return Bug // no script replies nil
	}
	msg := err.Error()
	for _, m := range ownMisconfigured {
		if strings.Contains(msg, m) {
			return Misconfigured
		}
	}
	for _, m := range misconfigured {
		if strings.Contains(msg, m) {
			if m == compileError && strings.Contains(msg, "stack traceback") {
				// miniredis reports a runtime error of the script
				// as a compile error, with the Lua traceback.
				continue
			}
			return Misconfigured
		}
	}
	if TLSRefused(err) {
		return Misconfigured
	}
	if !IsReply(err) {
		// Not the server's answer: the dial, the connection or the
		// pool failed (connection refused, reset, EOF, i/o timeout,
		// pool timeout, every shard down).
		return Outage
	}
	for _, m := range misconfiguredReplies {
		if strings.HasPrefix(msg, m) {
			return Misconfigured
		}
	}
	for _, m := range outageReplies {
		// Redis 7 answers a script whose command failed with the
		// command's error; Redis 6 wraps it in the script's
		// ("ERR Error running script ...: @user_script: 1: -OOM ...").
		if strings.HasPrefix(msg, m) || strings.Contains(msg, ": -"+m) {
			return Outage
		}
	}
	return Bug
}

// TLSRefused reports whether err is a TLS handshake that failed on what the
// two sides were set up with, which no retry fixes (new files or a new URL
// do): Redis's certificate not trusted, expired or not for the address
// dialled; Redis refusing ours (a TLS alert: certificate required, bad or
// unknown certificate, no protocol version in common); or a rediss:// URL
// for a port that does not speak TLS.
func TLSRefused(err error) bool {
	var refused *RefusedHandshake
	if errors.As(err, &refused) {
		return true
	}
	var verify *tls.CertificateVerificationError
	var unknownCA x509.UnknownAuthorityError
	var hostname x509.HostnameError
	var invalid x509.CertificateInvalidError
	var header tls.RecordHeaderError
	if errors.As(err, &verify) || errors.As(err, &unknownCA) || errors.As(err, &hostname) ||
		errors.As(err, &invalid) || errors.As(err, &header) {
		return true
	}
	return TLSAlert(err)
}

// TLSAlert reports whether err is a TLS alert from the server (a handshake
// it refused). The alert reaches the client as a *net.OpError ("remote
// error") around an unexported type: only its text says it.
func TLSAlert(err error) bool {
	return strings.Contains(err.Error(), "remote error: tls: ")
}

// RefusedHandshake is a TLS handshake refused on the certificates
// (TLSRefused), as a dialer reports it to go-redis so that go-redis gives
// it to its caller at once. go-redis retries every network error, a failed
// dial included, with pauses, until its caller's deadline: a refused
// handshake, which is one, would end in the deadline, taken for an outage.
// RefusedHandshake is not a network error and does not wrap one (its Err
// is reached through the field, not errors.As), so go-redis does not
// retry it; TLSRefused and Classify (Misconfigured) know it.
type RefusedHandshake struct{ Err error }

func (e *RefusedHandshake) Error() string { return e.Err.Error() }
