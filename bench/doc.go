// Package bench compares github.com/smoothrate/ratelimit with its Go peers
// (golang.org/x/time/rate, go.uber.org/ratelimit, github.com/juju/ratelimit)
// on this machine, in the same run, so that every ratio quoted in
// docs/performance.md can be regenerated.
//
// It is a separate module so that the main module never depends on the
// peers. What it holds:
//
//   - bench_test.go: Go benchmarks of the non-blocking hot paths (granted,
//     denied, reserve, blocking call that does not wait, RunParallel).
//
//   - cmd/ratios: runs those benchmarks -count times and prints the median
//     table and the ratios against the goals.
//
//   - cmd/accuracy: achieved rate of a blocking acquire loop on the real
//     clock, per library and rate.
//
//   - cmd/shaping: achieved byte rate and worst 100 ms window of rate-limited
//     writers on the real clock.
//
//   - perf.sh: runs all of the above; docs/performance.md shows its output.
//
//   - distbench and cmd/distbench: the distributed limiter against
//     github.com/go-redis/redis_rate on a real redis-server (see
//     docs/distributed.md).
//
//   - cmd/scriptinstr: the instructions a redis-server executes per
//     decision for throttle.RedisStore's scripts against redis_rate's,
//     counted exactly under valgrind's callgrind (immune to machine load).
//
//   - envoyref: a module of its own that builds envoyproxy/ratelimit, the
//     reference of `ratelimit rls`, unchanged from the Go module proxy
//     (its gRPC and go-control-plane are older than ours).
//
//   - rlsbench: runs the reference and `ratelimit rls` side by side.
//     TestDifferential sends both the same random ShouldRateLimit calls at
//     the same instants and compares every field of every answer, on our
//     Redis and memory stores (it is run by hand, like the benchmarks).
//
//   - cmd/rlsbench: calls per second, p50/p99 latency and Redis commands
//     per call of `ratelimit rls` (Redis and memory store) against the
//     reference under the same gRPC load, 32 callers, two descriptors a
//     call, and the ratios against the goals (docs/performance.md).
//
// The commands for Envoy's rate limit service (they need redis-server on
// PATH, build both servers into bench/.bin, the reference from the module
// proxy, and print the mismatches or the table):
//
//	cd bench && go test -count=1 -v -run TestDifferential ./rlsbench/
//	cd bench && go test -count=1 -v -run TestDifferential ./rlsbench/ -args -rls.batches 60 -rls.seed 7
//	cd bench && go run ./cmd/rlsbench -d 10s -rounds 3
//
// The peers are configured as in the research notes: 1e9 events/s with a
// bucket of 2^30, so that every call is a grant that never sleeps, and
// rate 1 with burst 1, after one grant, for refusals.
package bench
