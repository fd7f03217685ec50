package distributed

import (
	_ "embed"

	"github.com/redis/go-redis/v9"
)

// The Lua sources. engine.lua is the smooth limiter's arithmetic (a port of
// package smooth in microsecond mode); lease.lua is the protocol on top of
// it; hot.lua, which runs first, answers the common lease without them
// (see there why). Redis has no include, so the script sent is their
// concatenation.
var (
	//go:embed hot.lua
	hotLua string
	//go:embed engine.lua
	engineLua string
	//go:embed lease.lua
	leaseLua string
)

// leaseScript is run with Script.Run: EVALSHA, then EVAL when the server
// answers NOSCRIPT (after a restart, a failover or SCRIPT FLUSH).
var leaseScript = redis.NewScript(hotLua + "\n" + engineLua + "\n" + leaseLua)
