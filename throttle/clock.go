package throttle

import "time"

// A Clock tells a store the time (WithStoreClock). Stores never sleep, so
// Now is all they need: a ratelimit.Clock, a clocktest fake or any type
// with this method will do.
type Clock interface {
	Now() time.Time
}
