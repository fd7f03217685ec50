// Package rlsbench runs envoyproxy/ratelimit (the reference, built
// unchanged from the Go module proxy by the module in bench/envoyref) and
// `ratelimit rls` side by side, each a child process on free loopback
// ports, with redis-servers of their own:
//
//   - diff_test.go (TestDifferential): the same random ShouldRateLimit
//     calls to both, at the same instants, every field of every answer
//     compared, with and without LIMIT_RESPONSE_HEADERS_ENABLED, against
//     ours on Redis and on the memory store (started with flags), ours
//     started with no flag on the reference's environment, and a
//     reference and ours sharing one Redis and answering in turn (a fleet
//     halfway through the swap);
//   - gateway_test.go (TestGatewayDifferential): both started as Envoy
//     Gateway starts the reference (GatewayEnv: no argument, the
//     configuration over xDS with mutual TLS from one go-control-plane ADS
//     server that both subscribe to as node envoy-ratelimit, gRPC over
//     TLS, Redis as host:port, Prometheus with the reference's mapping),
//     sent calls of Envoy Gateway's shape (route names as key and value,
//     rule-N-match-M, masked_remote_address, remote_address, shadow_mode,
//     units to year, per-descriptor hits_addend with 0) through three
//     snapshots: the first, a changed one that both apply, and one that
//     both refuse while the second serves on. Every answer is compared,
//     and after each snapshot's calls every ratelimit_service_rate_limit_*
//     series of the two /metrics pages, once the reference has flushed its
//     stats (STATS_FLUSH_INTERVAL, 1 s here, -rls.flush; 10 s by default):
//     the test polls its page until total_requests counts every call sent;
//   - cmd/rlsbench: calls per second, latency and Redis commands per call
//     under the same gRPC load, in plain text or, with -tls, over TLS on
//     both sides.
//
// The commands:
//
//	cd bench && go test -count=1 -v -run TestDifferential ./rlsbench/
//	cd bench && go test -count=1 -v -run TestGatewayDifferential ./rlsbench/
//	cd bench && go run ./cmd/rlsbench -d 10s -rounds 3
//	cd bench && go run ./cmd/rlsbench -d 10s -rounds 3 -tls
//
// Both build the reference into bench/.bin/envoyref (from
// bench/envoyref/go.mod: the first build downloads it from the module
// proxy) and ours from the working tree into bench/.bin/ratelimit. They
// need redis-server on PATH. -args -rls.ours ref runs either test with a
// second reference in ours's place, to see the harness agree with itself;
// -rls.ours-env gives that server a setting of its own, to see it catch a
// difference.
package rlsbench
