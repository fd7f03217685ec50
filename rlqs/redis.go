package rlqs

import (
	"context"
	_ "embed"
	"fmt"
	"math"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/smoothrate/ratelimit/internal/check"
	"github.com/smoothrate/ratelimit/internal/fairshare"
	"github.com/smoothrate/ratelimit/internal/redisscript"
)

//go:embed claim.lua
var claimLua string

// claimScript is run with redisscript's Run (EVALSHA, then EVAL when the
// server may lack it), after redisscript's prelude and fairshare's
// waterLevel.
var claimScript = redisscript.New(fairshare.WaterLevelLua + "\n" + claimLua)

// RedisStore shares each bucket's limit among the Servers (replicas) that
// use the same Redis: a single server, a failover setup or a Redis
// Cluster (each bucket is one key, so one slot). Each replica claims, per
// bucket, the rate its own clients may run, in one atomic script per
// bucket and allocation: what its clients run now (which it cannot take
// back before they are told) raised toward their max-min fair shares
// among all the bucket's clients, within what the other replicas' claims
// leave. A claim counts until the assignments it covers would expire, so
// a replica that dies keeps its part until its Envoys have dropped it.
// Time is Redis's (TIME).
//
// When Redis cannot be reached, each replica keeps the shares it last had
// (a bucket it never claimed gets an equal part of its limit among the
// replicas last seen); when Redis answers again, replicas claim as before.
type RedisStore struct {
	client redis.UniversalClient
	gate   *redisscript.Gate
	inline bool
	// scriptTime, when set (tests), is the script's time in µs instead
	// of Redis's TIME.
	scriptTime func() int64
}

var _ Store = (*RedisStore)(nil)

// NewRedisStore returns a store on client: any redis.UniversalClient. Give
// the client ContextTimeoutEnabled: true so that the store timeout also
// bounds the socket I/O. It makes no call: Check does.
func NewRedisStore(client redis.UniversalClient) (*RedisStore, error) {
	if check.IsNil(client) {
		return nil, fmt.Errorf("%w: nil redis client", ErrInvalidOption)
	}
	return &RedisStore{client: client, gate: redisscript.NewGate(client, DefaultStoreTimeout),
		inline: redisscript.HonoursDeadlines(client)}, nil
}

// Check runs the claim script once, on a key of its own, writing nothing,
// so that a program finds out at start whether Redis is set up right: an
// error wrapping ErrMisconfigured (a wrong password or database, a
// cluster client on a single server or the reverse, no EVAL, a key of
// another type) should stop it; one wrapping ErrUnavailable is an
// outage, which the Server rides out. ctx bounds the call.
func (r *RedisStore) Check(ctx context.Context) error {
	if ctx == nil {
		return check.ErrNilContext
	}
	timeout := DefaultStoreTimeout
	if d, ok := ctx.Deadline(); ok {
		timeout = max(time.Until(d), time.Millisecond)
	}
	_, err := r.run(ctx, timeout, "ratelimit:rlqs:{check}", "s:check", claimArgs(0, &claim{}, 2, 0))
	return err
}

// liveDemand is how long a server's demands count after its last claim:
// a live server claims every bucket it serves at least once per
// claimRefresh.
const liveDemand = 3 * claimRefresh

func (r *RedisStore) claim(timeout time.Duration, c *claim) (grant, error) {
	op := 0.0
	if c.release {
		op = 1
	}
	now := int64(0)
	if r.scriptTime != nil {
		now = r.scriptTime()
	}
	v, err := r.run(context.Background(), timeout, c.key, "s:"+c.server, claimArgs(now, c, op, liveDemand))
	if err != nil {
		return grant{}, err
	}
	return grant{budget: redisscript.Double(v, 0), target: redisscript.Double(v, 1),
		servers: int(redisscript.Double(v, 2)), clients: int(redisscript.Double(v, 3)),
		contested: redisscript.Double(v, 4) != 0}, nil
}

// room names this package in its store errors.
const room = "rlqs"

// run runs the script, bounded by timeout, and sorts its errors.
func (r *RedisStore) run(ctx context.Context, timeout time.Duration, key, field string, numbers []byte) (string, error) {
	v, err := redisscript.Call(ctx, timeout, r.inline, nil, r.gate, func(ctx context.Context) (any, error) {
		return claimScript.Run(ctx, r.client, []string{key}, string(numbers), field).Result()
	})
	if err != nil {
		return "", redisscript.Fail(room, redisscript.Ended(ctx, err))
	}
	s, ok := v.(string)
	if !ok || len(s) != 40 {
		return "", &redisscript.Error{Room: room, Class: redisscript.Misconfigured, Err: fmt.Errorf("the claim script answered %q", v)}
	}
	return s, nil
}

// claimArgs packs the script's first argument: the numbers, then the
// demands as (k, count) pairs of the 1/16-octave histogram (an unmeasured
// demand counts as the whole limit).
func claimArgs(now int64, c *claim, op float64, live time.Duration) []byte {
	known := 0.0
	if c.known {
		known = 1
	}
	b := redisscript.AppendDoubles(make([]byte, 0, 56+16*len(c.demands)), float64(now), c.rate, c.floor,
		float64(c.hold.Microseconds()), float64(live.Microseconds()), known, op)
	counts := map[float64]float64{}
	var order []float64
	for _, d := range c.demands {
		if math.IsInf(d, 1) || d > c.rate {
			d = c.rate
		}
		if !(d > 0) {
			continue
		}
		k := math.Floor(float64(math.Log2(d)*16) + 0.5)
		if counts[k] == 0 {
			order = append(order, k)
		}
		counts[k]++
	}
	for _, k := range order {
		b = redisscript.AppendDoubles(b, k, counts[k])
	}
	return b
}
