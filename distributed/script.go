package distributed

import (
	_ "embed"

	"github.com/smoothrate/ratelimit/internal/fairshare"
	"github.com/smoothrate/ratelimit/internal/redisscript"
)

// The Lua sources. engine.lua is the smooth limiter's arithmetic (a port of
// package smooth in microsecond mode); lease.lua is the protocol on top of
// it; hot.lua, which runs first, answers the common lease without them
// (see there why). The water filling over the demand histogram is
// internal/fairshare's, which package rlqs's script runs too. Redis has no
// include, so the script sent is their concatenation.
var (
	//go:embed hot.lua
	hotLua string
	//go:embed engine.lua
	engineLua string
	//go:embed lease.lua
	leaseLua string
)

// leaseScript is run with redisscript's Run: EVALSHA, then EVAL when the
// server may lack the script (NOSCRIPT after a restart, a failover or
// SCRIPT FLUSH, or a proxy's rewrite of it). redisscript's prelude comes
// first: packd and unpackd, with or without the server's struct library.
var leaseScript = redisscript.New(fairshare.WaterLevelLua + "\n" + hotLua + "\n" + engineLua + "\n" + leaseLua)
