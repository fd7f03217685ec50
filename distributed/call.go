package distributed

import (
	"context"
	"errors"
	"fmt"
	"math"
	"time"

	"github.com/smoothrate/ratelimit/internal/redisscript"
	"github.com/smoothrate/ratelimit/internal/sat"
)

// reply is lease.lua's answer, with its µs durations converted.
type reply struct {
	joined        bool   // the reply says what the name holds:
	storedKind    string // "b" or "w"
	storedUnit    string
	refused       bool // and the script refused to join it (WithRefuseMismatch)
	granted       int64
	wait          time.Duration // from the script's now until the permits are usable
	ahead         time.Duration // until the caller's next lease could be granted with no wait
	validity      time.Duration // from the script's now until the lease ends
	processes     int
	configVersion int64
	rate          float64
	maxPermits    float64
	incarnation   int64 // the state's creation time: which incarnation answered
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
		l.kindArgLocked(),
		f64(l.rate),
		f64(l.cfg.maxBurstSeconds),
		micros(l.cfg.warmup),
		f64(l.cfg.coldFactor),
		l.configVersion,
		l.cfg.processID,
		micros(l.cfg.leaseValidity),
		micros(l.cfg.registryTTL),
	}
}

// leaseArgsLocked are the arguments of a lease in lease.lua's compact
// form (compactLease). Redis makes a Lua string of every argument of every
// call (a table slot and an interned string each), and converts every
// decimal one with strtod: the 18 arguments of the long form cost the
// server about as much as the lease's arithmetic.
func (l *Limiter) leaseArgsLocked(need int64, wait time.Duration) []any {
	kind := 0.0
	if l.kindArgLocked() == "w" {
		kind = 1
	}
	return compactLease(packDoubles(float64(l.redisNow()), kind, l.rate, l.cfg.maxBurstSeconds, float64(micros(l.cfg.warmup)),
		l.cfg.coldFactor, float64(l.configVersion), float64(micros(l.cfg.leaseValidity)),
		float64(micros(l.cfg.registryTTL)), float64(need), float64(l.wantLocked()), float64(micros(wait)),
		l.reported, float64(micros(l.cfg.leaseDuration)), l.joinArgLocked()), l.cfg.processID, l.unitArgLocked())
}

// compactLease is a lease in lease.lua's compact form, two arguments: the
// 15 numbers packed (packDoubles) followed by the unit's bytes, and the
// caller's registry field, "p:" and its process id.
func compactLease(numbers, pid, unit string) []any {
	return []any{numbers + unit, "p:" + pid}
}

// packDoubles packs xs as little-endian doubles, read back bit for bit.
func packDoubles(xs ...float64) string {
	return string(redisscript.AppendDoubles(make([]byte, 0, 8*len(xs)), xs...))
}

// unitArgLocked is the unit a lease records if it creates the state: once
// joined, the one this limiter adopted with the stored rate, so that a
// state lost and made again holds what the fleet had.
func (l *Limiter) unitArgLocked() string {
	if l.joined {
		return l.storedUnit
	}
	return l.cfg.unit
}

// kindArgLocked is the kind a call records if it creates the state: once
// joined, the one this limiter adopted, as unitArgLocked's unit.
func (l *Limiter) kindArgLocked() string {
	if l.joined && l.storedKind != "" {
		return l.storedKind
	}
	return l.kind
}

// joinArgLocked is lease.lua's join argument: until a lease has told the
// limiter what its name holds, ask (1), or ask and refuse a mismatch (2);
// then nothing (0).
func (l *Limiter) joinArgLocked() float64 {
	switch {
	case l.joined:
		return 0
	case l.cfg.refuseMismatch:
		return 2
	}
	return 1
}

func (l *Limiter) refundArgsLocked(n, configVersion int64, leave bool) []any {
	lv := "0"
	if leave {
		lv = "1"
	}
	return append(l.baseArgsLocked("refund"), n, configVersion, lv, l.incarnation)
}

// call runs lease.lua once, bounded by the call timeout (redisscript.Call:
// in a goroutine of its own, tracked by l.wg, which Close waits for, so
// the bound holds even with a client whose socket timeouts ignore
// contexts). Errors are sorted by redisscript.Classify: an outage matches
// ErrUnavailable (the caller falls back; ErrCallTimeout too when the call
// timed out); a misconfiguration, a panic of the client and a reply
// nothing here expects (a bug, or a server that runs the script otherwise
// than Redis) match ErrMisconfigured: no retry is known to fix them, and
// failing open on them would let a fleet run alone, sharing nothing, for
// as long as it lives.
func (l *Limiter) call(args []any) (reply, error) {
	v, err := redisscript.Call(context.Background(), l.cfg.callTimeout, false, &l.wg, l.gate, func(ctx context.Context) (any, error) {
		return leaseScript.Run(ctx, l.client, l.keys, args...).Result()
	})
	if err != nil {
		e := &redisscript.Error{Room: room, Class: redisscript.Classify(err), Err: err}
		switch e.Class {
		case redisscript.Misconfigured, redisscript.Bug:
			e.Class = redisscript.Misconfigured
		case redisscript.Outage:
			if errors.Is(err, redisscript.ErrTimeout) {
				// ErrTimeout keeps the client's error as text only, so
				// this does not match context.DeadlineExceeded: the
				// deadline was the limiter's, not the caller's.
				e.Kind = ErrCallTimeout
			}
		}
		return reply{}, e
	}
	r, err := parseReply(v)
	if err != nil {
		return reply{}, misconfigured(nil, err)
	}
	if r.refused {
		// Misconfigured: no fallback admits at a safe rate what the
		// fleet's limit was never meant to hold.
		err = misconfigured(ErrNameMismatch, fmt.Errorf("%s holds %s/s %s, unit %q; this limiter is %s/s %s, unit %q",
			l.keys[0], f64(r.rate), kindName(r.storedKind), r.storedUnit, f64(l.asked0), kindName(l.kind), l.cfg.unit))
	}
	return r, err
}

// room names this package in its Redis errors.
const room = "distributed"

// misconfigured is a Redis error no retry fixes, matching kind too (nil:
// none).
func misconfigured(kind, cause error) error {
	return &redisscript.Error{Room: room, Class: redisscript.Misconfigured, Kind: kind, Err: cause}
}

// isMisconfiguration reports whether err, an error of a Redis client, is
// one that no retry can fix: a configuration error (bad database index,
// NOAUTH or WRONGPASS, NOPERM, cluster support disabled, a cluster node
// talked to as a single server, unknown command, a script the server
// cannot compile, WRONGTYPE). The limiter reports such errors wrapped in
// ErrMisconfigured and never fails open on them. A caller checks at start
// with Join, whose error wraps ErrMisconfigured in that case.
func isMisconfiguration(err error) bool {
	return errors.Is(err, ErrMisconfigured) || redisscript.Classify(err) == redisscript.Misconfigured
}

// parseReply reads lease.lua's reply: integers (µs, counts, the version,
// the state's birth) and two packed little-endian doubles (the rate and
// the capacity), so that no value goes through a decimal string; or
// hot.lua's, the same nine numbers packed in one string.
func parseReply(r any) (reply, error) {
	if s, ok := r.(string); ok && len(s) == 72 {
		return parseHotReply(s)
	}
	v, ok := r.([]any)
	bad := func(why string) (reply, error) {
		return reply{}, fmt.Errorf("distributed: unexpected script reply %q: %s", r, why)
	}
	if !ok {
		return bad("not an array")
	}
	if len(v) != 9 && len(v) != 11 && len(v) != 12 {
		return bad("want 9, 11 or 12 elements")
	}
	if len(v) == 12 && v[11] != "refused" {
		return bad("element 12 is not \"refused\"")
	}
	var ints [9]int64
	for _, i := range []int{0, 1, 2, 3, 4, 5, 8} {
		x, ok := v[i].(int64)
		if !ok {
			return bad(fmt.Sprintf("element %d is not an integer", i+1))
		}
		ints[i] = x
	}
	var doubles [2]float64
	for k, i := range []int{6, 7} {
		b, ok := v[i].(string)
		if !ok || len(b) != 8 {
			return bad(fmt.Sprintf("element %d is not a packed double", i+1))
		}
		doubles[k] = redisscript.Double(b, 0)
	}
	for _, i := range []int{0, 1, 2, 3, 4} {
		if ints[i] < 0 {
			return bad("negative value")
		}
	}
	var joined [2]string
	if len(v) >= 11 {
		for k := range joined {
			s, ok := v[9+k].(string)
			if !ok {
				return bad(fmt.Sprintf("element %d is not a string", 10+k))
			}
			joined[k] = s
		}
	}
	out := numbersReply(ints, doubles[0], doubles[1])
	out.joined, out.refused = len(v) >= 11, len(v) == 12
	out.storedKind, out.storedUnit = joined[0], joined[1]
	return out, nil
}

// numbersReply is the reply of the nine numbers every lease.lua and hot.lua
// reply has: ints[6] and ints[7] are unused (the rate and the capacity are
// doubles).
func numbersReply(ints [9]int64, rate, maxPermits float64) reply {
	return reply{
		granted:       ints[0],
		wait:          sat.Scale(ints[1], time.Microsecond),
		ahead:         sat.Scale(ints[2], time.Microsecond),
		validity:      sat.Scale(ints[3], time.Microsecond),
		processes:     int(min(ints[4], 1<<31)),
		configVersion: ints[5],
		rate:          rate,
		maxPermits:    maxPermits,
		incarnation:   ints[8],
	}
}

// parseHotReply reads hot.lua's reply: lease.lua's nine numbers as
// little-endian doubles. The integers among them are converted as Redis
// converts a Lua number to an integer reply (a C cast), so that both
// paths answer alike.
func parseHotReply(s string) (reply, error) {
	var x [9]float64
	for i := range x {
		x[i] = redisscript.Double(s, i)
	}
	var ints [9]int64
	for _, i := range []int{0, 1, 2, 3, 4, 5, 8} {
		ints[i] = luaInteger(x[i])
	}
	for _, i := range []int{0, 1, 2, 3, 4} {
		if ints[i] < 0 {
			return reply{}, fmt.Errorf("distributed: unexpected script reply %v: negative value", x)
		}
	}
	return numbersReply(ints, x[6], x[7]), nil
}

// luaInteger is (long long)x as Redis's Lua-to-reply conversion does it on
// amd64 and arm64 alike for numbers in range: truncation toward zero. Out
// of range (and NaN) it is the smallest int64, which no reply accepts.
func luaInteger(x float64) int64 {
	if !(x > -0x1p63 && x < 0x1p63) {
		return math.MinInt64
	}
	return int64(x)
}
