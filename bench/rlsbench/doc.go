// Package rlsbench runs envoyproxy/ratelimit (the reference, built
// unchanged from the Go module proxy by the module in bench/envoyref) and
// `ratelimit rls` side by side, each a child process on free loopback
// ports, with redis-servers of their own:
//
//   - diff_test.go (TestDifferential): the same random ShouldRateLimit
//     calls to both, at the same instants, every field of every answer
//     compared (ours must answer as the reference does by default), with
//     and without
//     LIMIT_RESPONSE_HEADERS_ENABLED, against ours on Redis and on the
//     memory store (started with flags), ours started with no flag on the
//     reference's environment, and a reference and ours sharing one Redis
//     and answering in turn (a fleet halfway through the swap);
//   - cmd/rlsbench: calls per second, latency and Redis commands per call
//     under the same gRPC load.
//
// The commands:
//
//	cd bench && go test -count=1 -v -run TestDifferential ./rlsbench/
//	cd bench && go run ./cmd/rlsbench -d 10s -rounds 3
//
// Both build the reference into bench/.bin/envoyref (from
// bench/envoyref/go.mod: the first build downloads it from the module
// proxy) and ours from the working tree into bench/.bin/ratelimit. They
// need redis-server on PATH.
package rlsbench
