// Package keyed benchmarks throttle's MemoryStore next to the keyed
// limiters users compare it with (sethvargo/go-limiter's memorystore,
// throttled's GCRA memstore, ulule/limiter's memory store and
// go-chi/httprate's local counter), all at 100 000 live keys, in one run
// whose tables docs/performance.md shows:
//
//	cd bench && go run ./cmd/keyedbench -count 15 -benchtime 300ms
//
// instructions.sh counts the instructions and cache misses of one decision
// under callgrind, which the load of a shared machine does not move.
//
// The package has no code besides its benchmarks; it lives in the bench
// module so that the peers never enter the root module's dependencies.
package keyed
