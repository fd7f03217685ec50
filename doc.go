// Package ratelimit limits how fast work is done: it hands out permits at a
// steady rate, so that a loop of jobs, a stream of requests or a flow of
// bytes never goes faster than a given number of permits per second. It is a
// faithful port of Guava's RateLimiter (its SmoothBursty and SmoothWarmingUp
// kinds) with an injectable clock, context-aware waits and errors instead of
// exceptions.
//
// A Limiter is used in one of three ways: Acquire blocks until the permits
// may be used (most callers want this), TryAcquire takes them only if it can
// within a timeout, and Reserve books them without sleeping and says how long
// to wait. The doc of Limiter explains the model in a paragraph; package
// smooth explains it in full, and docs/design.md has plots.
//
// # Which limiter to choose
//
//	You want                                          Use
//	------------------------------------------------  -------------------------------------------
//	a steady rate that may catch up after a pause,    NewBursty(rate)
//	  e.g. calls to an API with a per-second quota      (stores up to 1 s of unused permits)
//	a steady rate with a bigger or no catch-up        NewBursty(rate, WithMaxBurstSeconds(s))
//	                                                    (s = 0: a strict metronome)
//	the burst ready at start instead of after 1 s     NewBursty(rate, WithInitiallyFull())
//	to spare a backend that is slow when cold         NewWarmingUp(rate, warmup)
//	  (caches, connection pools, JIT): start slow       (starts at rate/3, reaches the rate after
//	  and ramp up, and slow down again after a pause    warmup of sustained use)
//	a gentler or steeper ramp                         NewWarmingUp(rate, warmup, WithColdFactor(f))
//	Guava's results to the microsecond                add WithResolution(time.Microsecond)
//	one rate shared by many processes                 distributed.New(redisClient, name, rate)
//	                                                    (bursty, or warming up with WithWarmup)
//	to limit bytes through an io.Reader, io.Writer    package shape, over any of the above
//	  or net.Conn
//	to run work items at a rate, n at a time          jobs.Run or jobs.Stream, over any of the above
//	deterministic tests of code that uses a limiter   WithClock and package clocktest, or
//	                                                    testing/synctest with no option at all
//	a limiter from the shell                          the ratelimit command (cmd/ratelimit):
//	                                                    trace, pipe, run, proxy and rls
//
// Every limiter, local or distributed, satisfies Acquirer, the small
// interface that code taking "a rate limiter" should accept; shape and jobs
// take an Acquirer.
//
// # Errors
//
// Invalid arguments (a rate that is not positive, a negative warm-up, an
// option that does not apply to the kind of limiter) return errors that wrap
// the sentinels of this package, for errors.Is. Nothing panics on bad input,
// and a rejected call changes no state.
//
// # Options
//
// Every package of this module treats options alike: a nil option, an
// option with an invalid value and an option that does not apply to the
// constructor it is given to (or does not go with another option) are
// errors returned by the constructor, wrapping the package's
// ErrInvalidOption (and the value's own sentinel, such as ErrInvalidBurst).
// An option name means one thing: WithClock here is the limiter's whole
// time; package throttle's stores take WithStoreClock and package
// distributed's local side WithLocalClock.
package ratelimit
