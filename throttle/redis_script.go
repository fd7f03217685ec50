package throttle

import (
	"context"
	"embed"
	"errors"
	"fmt"
	"strings"

	"github.com/smoothrate/ratelimit/internal/redisscript"
)

// The Lua sources: lua/prelude.lua holds what every script shares (exact
// integer division, the state's layout, TTLs, meter), each algorithm's
// file is a line-by-line port of its function in algorithms.go, and one.lua
// or all.lua is the entry point. Redis has no include, so a script is their
// concatenation: one per algorithm for single requests, and one holding all
// six for AllowAll. The meters' single requests (GCRA, the token and the
// leaky bucket), the common case, run instead meter_head.lua, the
// algorithm's *_debt.lua and meter_tail.lua, which compute only the key's
// debt (and write) on the server and leave the Decision to meter on the Go
// side: see meter_head.lua why.
//
//go:embed lua/*.lua
var luaFS embed.FS

// luaFiles names each algorithm's Lua file.
var luaFiles = [...]string{
	GCRA:          "gcra.lua",
	TokenBucket:   "tb.lua",
	LeakyBucket:   "lb.lua",
	FixedWindow:   "fw.lua",
	SlidingWindow: "sw.lua",
	SlidingLog:    "sl.lua",
}

func mustLua(name string) string {
	b, err := luaFS.ReadFile("lua/" + name)
	if err != nil {
		panic(err) // embedded at build time: cannot happen
	}
	return string(b)
}

// meterDebt names the file that computes the debt of each meter, whose
// single requests run a meter script (isMeter).
var meterDebt = [...]string{
	GCRA:        "gcra_debt.lua",
	TokenBucket: "tb_debt.lua",
	LeakyBucket: "lb_debt.lua",
	SlidingLog:  "",
}

// isMeter reports whether alg's single requests run a meter script.
func isMeter(alg Algorithm) bool { return meterDebt[alg] != "" }

var (
	// oneScripts[alg] decides one request under alg.
	oneScripts [SlidingLog + 1]*redisscript.Script
	// allScript decides several requests of any algorithms as one step.
	allScript *redisscript.Script
)

func init() {
	prelude := mustLua("prelude.lua")
	all := prelude
	for a := GCRA; a <= SlidingLog; a++ {
		alg := mustLua(luaFiles[a])
		oneScripts[a] = redisscript.New(prelude + "\n" + alg + "\n" + mustLua("one.lua"))
		all += "\n" + alg
	}
	// The meters' single requests run the flat scripts, without the
	// prelude.
	for a, debt := range meterDebt {
		if debt != "" {
			oneScripts[a] = redisscript.New(mustLua("meter_head.lua") + mustLua(debt) + mustLua("meter_tail.lua"))
		}
	}
	allScript = redisscript.New(all + "\n" + mustLua("all.lua"))
}

// oneArgs is a single-request script's one argument (one.lua): now, n,
// the params and the TTL floor as little-endian IEEE doubles, which the
// script unpacks with unpackd in one call instead of converting ten
// decimal strings. Every value is an integer below 2^53 (params, micros),
// so the doubles are exact.
func oneArgs(now int64, r *request, ttlFloor int64) []byte {
	p := r.p
	return redisscript.AppendInts(make([]byte, 0, 80), now, r.n, p.count, p.burst, p.period, p.emission, p.den, p.tau, p.limit, ttlFloor)
}

// meterArgs is a meter script's one argument: now, cost, room, den, the
// TTL floor and, for the token bucket, tau as little-endian IEEE doubles
// (see meter_head.lua). A
// request that can write nothing (a peek, or n > burst, which never fits)
// gets cost 0 and room −1, so the script only reads the debt. Otherwise
// 0 < cost = n × emission ≤ tau, so room = tau − cost ≥ 0, and the script
// writes exactly when debt ≤ room, that is debt + n × emission ≤ tau:
// when meter allows.
func meterArgs(now int64, r *request, ttlFloor int64) []byte {
	p := r.p
	cost, room := int64(0), int64(-1)
	if r.n > 0 && r.n <= p.burst {
		cost = r.n * p.emission
		room = p.tau - cost
	}
	b := redisscript.AppendInts(make([]byte, 0, 48), now, cost, room, p.den, ttlFloor)
	if p.alg == TokenBucket {
		b = redisscript.AppendInts(b, p.tau) // tb_debt.lua's sixth double
	}
	return b
}

// luaWrongType marks the scripts' own WRONGTYPE (prelude.lua's wrongtype,
// meter_head.lua); redisscript knows it and THROTTLE-ERR, their other
// errors, too.
const luaWrongType = "THROTTLE-WRONGTYPE "

// run runs sc (redisscript.Script.Run: EVALSHA, then EVAL when the
// server may lack it), bounded by the store's call timeout, and returns its
// reply of integers.
func (s *RedisStore) run(ctx context.Context, sc *redisscript.Script, keys []string, args []any) ([]int64, error) {
	v, err := redisscript.Call(ctx, s.cfg.callTimeout, s.inline, nil, s.gate, func(ctx context.Context) ([]int64, error) {
		return sc.Run(ctx, s.client, keys, args...).Int64Slice()
	})
	if err != nil {
		return nil, storeError(err, keys)
	}
	return v, nil
}

// runInt is run for a script that replies with one integer.
func (s *RedisStore) runInt(ctx context.Context, sc *redisscript.Script, keys []string, args []any) (int64, error) {
	v, err := redisscript.Call(ctx, s.cfg.callTimeout, s.inline, nil, s.gate, func(ctx context.Context) (int64, error) {
		return sc.Run(ctx, s.client, keys, args...).Int64()
	})
	if err != nil {
		return 0, storeError(err, keys)
	}
	return v, nil
}

// storeError is a failed call's error (a redisscript.Error of this
// package's): it matches ErrStore always; ErrWrongType and
// ErrMisconfigured when a key held another program's value; else
// ErrUnavailable or ErrMisconfigured by the failure's class
// (redisscript.Classify). A bug (a reply nothing expects) and the caller's
// own cancelled context match neither.
func storeError(err error, keys []string) error {
	msg := err.Error()
	if !strings.Contains(msg, luaWrongType) && strings.Contains(msg, "WRONGTYPE") {
		// Redis's own, from a script's first read of a key.
		return wrongType(fmt.Errorf("one of %q holds a value of another type (%v)", keys, err))
	}
	if i := strings.Index(msg, luaWrongType); i >= 0 {
		what := msg[i+len(luaWrongType):]
		if j := strings.Index(what, " script: "); j >= 0 { // Redis 7 appends where the error came from
			what = what[:j]
		}
		return wrongType(errors.New(what))
	}
	return redisscript.Fail(room, err)
}

// room names this package in its store errors.
const room = "throttle"

func wrongType(cause error) error {
	return &redisscript.Error{Room: room, Class: redisscript.Misconfigured, Kind: ErrWrongType, Err: cause}
}

// storeBug is the error of a reply nothing here expects: it matches
// ErrStore only.
func storeBug(format string, args ...any) error {
	return &redisscript.Error{Room: room, Class: redisscript.Bug, Err: fmt.Errorf(format, args...)}
}
