package throttle

import (
	"context"
	"crypto/sha1"
	"embed"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"math"
	"net"
	"strings"

	"github.com/redis/go-redis/v9"
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

// luaScript is a script's source and its SHA1, for EVALSHA.
type luaScript struct {
	src string
	sha string
}

func newLuaScript(src string) *luaScript {
	h := sha1.Sum([]byte(src))
	return &luaScript{src: src, sha: hex.EncodeToString(h[:])}
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
	oneScripts [SlidingLog + 1]*luaScript
	// allScript decides several requests of any algorithms as one step.
	allScript *luaScript
)

func init() {
	prelude := mustLua("prelude.lua")
	all := prelude
	for a := GCRA; a <= SlidingLog; a++ {
		alg := mustLua(luaFiles[a])
		oneScripts[a] = newLuaScript(prelude + "\n" + alg + "\n" + mustLua("one.lua"))
		all += "\n" + alg
	}
	// The meters' single requests run the flat scripts, without the
	// prelude.
	for a, debt := range meterDebt {
		if debt != "" {
			oneScripts[a] = newLuaScript(mustLua("meter_head.lua") + mustLua(debt) + mustLua("meter_tail.lua"))
		}
	}
	allScript = newLuaScript(all + "\n" + mustLua("all.lua"))
}

// oneArgs is a single-request script's one argument (one.lua): now, n,
// the params and the TTL floor as little-endian IEEE doubles, which the
// script unpacks with struct.unpack in one call instead of converting ten
// decimal strings. Every value is an integer below 2^53 (params, micros),
// so the doubles are exact.
func oneArgs(now int64, r *request, ttlFloor int64) []byte {
	p := r.p
	return packDoubles(make([]byte, 0, 80), now, r.n, p.count, p.burst, p.period, p.emission, p.den, p.tau, p.limit, ttlFloor)
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
	b := packDoubles(make([]byte, 0, 48), now, cost, room, p.den, ttlFloor)
	if p.alg == TokenBucket {
		b = packDoubles(b, p.tau) // tb_debt.lua's sixth double
	}
	return b
}

func packDoubles(b []byte, vs ...int64) []byte {
	for _, v := range vs {
		b = binary.LittleEndian.AppendUint64(b, math.Float64bits(float64(v)))
	}
	return b
}

// Markers of the scripts' own errors (prelude.lua's wrongtype and fail).
const (
	luaWrongType = "THROTTLE-WRONGTYPE "
	luaFail      = "THROTTLE-ERR "
)

// run runs s (see eval) and returns its reply of integers.
func run(ctx context.Context, c redis.UniversalClient, s *luaScript, keys []string, args []any) ([]int64, error) {
	v, err := eval(ctx, c, s, keys, args).Int64Slice()
	if err != nil {
		return nil, storeError(err, keys)
	}
	return v, nil
}

// runInt is run for a script that replies with one integer.
func runInt(ctx context.Context, c redis.UniversalClient, s *luaScript, keys []string, args []any) (int64, error) {
	v, err := eval(ctx, c, s, keys, args).Int64()
	if err != nil {
		return 0, storeError(err, keys)
	}
	return v, nil
}

// eval runs s with EVALSHA and falls back to EVAL when the server does not
// know the script. It does so on any Redis error reply that is not one of
// the script's own: NOSCRIPT after a restart, a failover or SCRIPT FLUSH,
// and also when a proxy rewrites the NOSCRIPT text (go-redis/redis_rate
// #88). This is safe because a script writes nothing before the last point
// where it can fail, so a failed run changed nothing.
func eval(ctx context.Context, c redis.UniversalClient, s *luaScript, keys []string, args []any) *redis.Cmd {
	cmd := c.EvalSha(ctx, s.sha, keys, args...)
	if err := cmd.Err(); err != nil && isReplyError(err) && !isOwnError(err) {
		cmd = c.Eval(ctx, s.src, keys, args...)
	}
	return cmd
}

// isReplyError reports whether err is an error reply from Redis (not a
// connection failure or a timeout, after which the script may have run).
func isReplyError(err error) bool {
	var re redis.Error
	return errors.As(err, &re) && !errors.Is(err, redis.Nil)
}

// isOwnError reports whether err is an error the script raised on
// purpose, or a WRONGTYPE from its first read: both are final.
func isOwnError(err error) bool {
	msg := err.Error()
	return strings.Contains(msg, luaWrongType) || strings.Contains(msg, luaFail) || strings.Contains(msg, "WRONGTYPE")
}

// storeError wraps a failed call: ErrStore always, ErrWrongType (and
// ErrMisconfigured) when a key held another program's value, else
// ErrMisconfigured or ErrUnavailable when the failure is one of theirs.
func storeError(err error, keys []string) error {
	msg := err.Error()
	if !strings.Contains(msg, luaWrongType) && strings.Contains(msg, "WRONGTYPE") {
		// Redis's own, from a script's first read of a key.
		return fmt.Errorf("%w: %w: %w: one of %q holds a value of another type (%v)", ErrWrongType, ErrMisconfigured, ErrStore, keys, err)
	}
	if i := strings.Index(msg, luaWrongType); i >= 0 {
		what := msg[i+len(luaWrongType):]
		if j := strings.Index(what, " script: "); j >= 0 { // Redis 7 appends where the error came from
			what = what[:j]
		}
		return fmt.Errorf("%w: %w: %w: %s", ErrWrongType, ErrMisconfigured, ErrStore, what)
	}
	switch classify(err) {
	case classMisconfigured:
		return fmt.Errorf("%w: %w: %w", ErrMisconfigured, ErrStore, err)
	case classUnavailable:
		return fmt.Errorf("%w: %w: %w", ErrUnavailable, ErrStore, err)
	}
	return fmt.Errorf("%w: %w", ErrStore, err)
}

type errClass int

const (
	classOther errClass = iota
	classUnavailable
	classMisconfigured
)

// misconfigReplies and outageReplies are parts of Redis error replies.
var (
	misconfigReplies = []string{
		"NOAUTH", "WRONGPASS", "NOPERM", "Protocol error: unauthenticated",
		"called without any password configured",
		"DB index is out of range", "invalid DB index",
		"cluster support disabled", "unknown command",
		"Error compiling script", "WRONGTYPE",
	}
	outageReplies = []string{"LOADING", "CLUSTERDOWN", "MASTERDOWN", "TRYAGAIN", "READONLY", "BUSY"}
)

// classify sorts a failed call into outage, misconfiguration or other.
func classify(err error) errClass {
	if errors.Is(err, context.Canceled) {
		return classOther // the caller's choice, not Redis's state
	}
	if isReplyError(err) {
		msg := err.Error()
		for _, m := range misconfigReplies {
			if strings.Contains(msg, m) {
				return classMisconfigured
			}
		}
		for _, m := range outageReplies {
			if strings.HasPrefix(msg, m) {
				return classUnavailable
			}
		}
		return classOther
	}
	var ne net.Error
	if errors.As(err, &ne) || errors.Is(err, context.DeadlineExceeded) || errors.Is(err, io.EOF) ||
		errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, redis.ErrPoolTimeout) {
		return classUnavailable
	}
	return classOther
}
