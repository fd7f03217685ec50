// Package redisscript is the one Redis layer that package distributed and
// package throttle share: it runs their Lua scripts (loaded once, EVALSHA,
// EVAL when the server does not have them), packs the numbers the scripts
// read and write as little-endian IEEE doubles, in Go and in Lua alike,
// with or without the server's struct library (miniredis and some
// Redis-compatible servers lack it), bounds each call in time, keeps calls
// away from a server it cannot reach (Gate: a client pointed nowhere makes
// go-redis log nothing), and sorts
// every error a Redis call can give into one of three classes: an outage
// (retry later), a misconfiguration (no retry will help) or a bug of ours.
// It holds the module's one set of failure errors (ErrStore,
// ErrUnavailable, ErrMisconfigured), which throttle, rls and distributed
// export, and the Error that names the package a failure came from once.
package redisscript
