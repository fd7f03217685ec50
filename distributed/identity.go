package distributed

import (
	"math/rand/v2"

	"github.com/redis/go-redis/v9"

	"github.com/smoothrate/ratelimit/internal/redisscript"
)

// identity is who a Limiter is: the client and the keys of its name, the
// kind of limiter it asks for and the rate New was given. Set by New, then
// only read (rng is used under Limiter.mu).
type identity struct {
	client redis.UniversalClient
	// gate dials the server before a call while it is not known to be
	// reachable, so that a client pointed nowhere fails here instead
	// of logging go-redis's dial errors (redisscript.Gate).
	gate   *redisscript.Gate
	keys   []string
	kind   string  // "b" or "w", as in engine.lua
	asked0 float64 // the rate New was given
	rng    *rand.Rand
}

// fleet is what Redis last told this process about the fleet and the
// name's stored limiter. Guarded by Limiter.mu.
type fleet struct {
	rate          float64 // the fleet's rate as last reported (or configured)
	configVersion int64   // config version as last reported
	incarnation   int64   // the state's incarnation as last reported
	maxPermits    float64 // the global burst capacity as last reported
	processes     int     // live processes as last reported
	// What the name holds, learnt from the first lease reply: joined is
	// set then, and mismatch if the stored rate, kind or unit differs from
	// this limiter's.
	joined     bool
	storedRate float64 // as learnt then; joined, l.rate follows SetRate
	storedKind string
	storedUnit string
	mismatch   bool
}
