package distributed

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strconv"
	"strings"
	"time"

	"github.com/smoothrate/ratelimit/internal/sat"
)

// reply is lease.lua's answer, with its µs durations converted.
type reply struct {
	granted    int64
	wait       time.Duration // from the script's now until the permits are usable
	ahead      time.Duration // until the caller's next lease could be granted with no wait
	validity   time.Duration // from the script's now until the lease ends
	processes  int
	ver        int64
	rate       float64
	maxPermits float64
	born       int64 // the state's creation time: which incarnation answered
}

// redisNow is the time argument of the script: 0 (the script reads TIME)
// except in tests that drive the shared state at explicit times.
func (l *Limiter) redisNow() int64 {
	if l.cfg.scriptTime != nil {
		return l.cfg.scriptTime()
	}
	return 0
}

// baseArgsLocked are ARGV[1..11] of lease.lua.
func (l *Limiter) baseArgsLocked(op string) []any {
	return []any{
		op,
		l.redisNow(),
		l.kind,
		f64(l.rate),
		f64(l.cfg.maxBurstSeconds),
		micros(l.cfg.warmup),
		f64(l.cfg.coldFactor),
		l.ver,
		l.cfg.processID,
		micros(l.cfg.leaseValidity),
		micros(l.cfg.registryTTL),
	}
}

func (l *Limiter) leaseArgsLocked(need int64, wait time.Duration) []any {
	return append(l.baseArgsLocked("lease"),
		need,
		l.wantLocked(),
		micros(wait),
		f64(l.reported),
		micros(l.cfg.leaseDuration),
	)
}

func (l *Limiter) refundArgsLocked(n, ver int64, leave bool) []any {
	lv := "0"
	if leave {
		lv = "1"
	}
	return append(l.baseArgsLocked("refund"), n, ver, lv, l.born)
}

// call runs lease.lua once, bounded by the call timeout. The Redis command
// runs in its own goroutine so that the bound holds even with a client
// whose socket timeouts ignore contexts; that goroutine is tracked by l.wg
// and Close waits for it.
func (l *Limiter) call(args []any) (reply, error) {
	ctx, cancel := context.WithTimeout(context.Background(), l.cfg.callTimeout)
	// Cancelled here, not in the goroutine: a goroutine that cancelled
	// after sending its result would race its own result in the select
	// below. If we give up first, the deadline has already cancelled ctx.
	defer cancel()
	type result struct {
		v   []string
		err error
	}
	ch := make(chan result, 1)
	l.wg.Add(1)
	go func() {
		defer l.wg.Done()
		// A client in a bad state (a nil interface inside a wrapper, a
		// closed pool in some implementations) may panic. In this
		// goroutine that would end the process: make it the call's
		// error instead.
		defer func() {
			if p := recover(); p != nil {
				ch <- result{err: fmt.Errorf("%w: the redis client panicked: %v", ErrMisconfigured, p)}
			}
		}()
		v, err := leaseScript.Run(ctx, l.client, l.keys, args...).StringSlice()
		ch <- result{v, err}
	}()
	var res result
	select {
	case res = <-ch:
	case <-ctx.Done():
		return reply{}, fmt.Errorf("distributed: redis call: %w after %v", ErrCallTimeout, l.cfg.callTimeout)
	}
	if res.err != nil {
		var ne net.Error
		if ctx.Err() != nil || errors.As(res.err, &ne) && ne.Timeout() {
			// The client turned our own bound into a socket timeout
			// or returned the context's error. Either way it is the
			// call timeout, not a deadline of the caller's (this
			// context has nothing to do with the caller's), so the
			// client's error is kept as text only: wrapped, it would
			// match context.DeadlineExceeded.
			return reply{}, fmt.Errorf("distributed: redis call: %w after %v (%v)", ErrCallTimeout, l.cfg.callTimeout, res.err)
		}
		if IsMisconfiguration(res.err) {
			return reply{}, fmt.Errorf("%w: %w", ErrMisconfigured, res.err)
		}
		return reply{}, fmt.Errorf("distributed: redis call: %w", res.err)
	}
	return parseReply(res.v)
}

// misconfigurations are the parts of Redis error replies that no retry can
// fix: a database index the server does not have, authentication or ACL
// refusals, a cluster client talking to a server that is not in a cluster,
// a command the server (or a proxy) does not know, and a key of the wrong
// type at the limiter's name.
var misconfigurations = []string{
	"DB index is out of range", // SELECT on a database the server lacks
	"invalid DB index",
	"NOAUTH", // no password given to a server that requires one
	// Redis 7 refuses a long command from a client that has not
	// authenticated (EVALSHA with its arguments) before saying NOAUTH.
	"Protocol error: unauthenticated",
	"WRONGPASS",                              // a wrong user or password
	"NOPERM",                                 // the ACL user may not run the script or touch the keys
	"called without any password configured", // a password given to a server without one
	"cluster support disabled",               // redis+cluster:// against a standalone server
	"unknown command",
	"WRONGTYPE", // another program's value under the limiter's keys
	// engine.lua's own check of the same: a key of the wrong type, or a
	// state hash with a corrupt field.
	"ERR ratelimit: key ",
}

// IsMisconfiguration reports whether err, an error of a Redis client, is
// one that no retry can fix: a configuration error (bad database index,
// NOAUTH or WRONGPASS, NOPERM, cluster support disabled, unknown command,
// WRONGTYPE). The limiter reports such errors wrapped in ErrMisconfigured and
// never fails open on them; a command can use it to tell a server that is
// set up wrong from one that is down before it starts (a PING already fails
// on most of them, when the connection is set up).
func IsMisconfiguration(err error) bool {
	if err == nil {
		return false
	}
	if errors.Is(err, ErrMisconfigured) {
		return true
	}
	msg := err.Error()
	for _, m := range misconfigurations {
		if strings.Contains(msg, m) {
			return true
		}
	}
	return false
}

func parseReply(v []string) (reply, error) {
	if len(v) != 9 {
		return reply{}, fmt.Errorf("distributed: unexpected script reply %q", v)
	}
	var (
		r    reply
		errs [9]error
		us   [4]int64
		n    int64
	)
	for i := 0; i < 4; i++ {
		us[i], errs[i] = strconv.ParseInt(v[i], 10, 64)
	}
	n, errs[4] = strconv.ParseInt(v[4], 10, 64)
	r.ver, errs[5] = strconv.ParseInt(v[5], 10, 64)
	r.rate, errs[6] = strconv.ParseFloat(v[6], 64)
	r.maxPermits, errs[7] = strconv.ParseFloat(v[7], 64)
	r.born, errs[8] = strconv.ParseInt(v[8], 10, 64)
	for _, err := range errs {
		if err != nil {
			return reply{}, fmt.Errorf("distributed: unexpected script reply %q: %w", v, err)
		}
	}
	for _, x := range append(us[:], n) {
		if x < 0 {
			return reply{}, fmt.Errorf("distributed: unexpected script reply %q: negative value", v)
		}
	}
	r.granted = us[0]
	r.wait = sat.Scale(us[1], time.Microsecond)
	r.ahead = sat.Scale(us[2], time.Microsecond)
	r.validity = sat.Scale(us[3], time.Microsecond)
	r.processes = int(min(n, 1<<31))
	return r, nil
}
