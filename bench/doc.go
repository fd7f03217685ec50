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
//   - cmd/ratios: runs those benchmarks -count times and prints the median
//     table and the ratios against the goals.
//   - cmd/accuracy: achieved rate of a blocking acquire loop on the real
//     clock, per library and rate.
//   - cmd/shaping: achieved byte rate and worst 100 ms window of rate-limited
//     writers on the real clock.
//   - perf.sh: runs all of the above; docs/performance.md shows its output.
//   - distbench and cmd/distbench: the distributed limiter against
//     github.com/go-redis/redis_rate on a real redis-server (see
//     docs/distributed.md).
//   - cmd/scriptinstr: the instructions a redis-server executes per
//     decision for throttle.RedisStore's scripts against redis_rate's,
//     counted exactly under valgrind's callgrind (immune to machine load).
//
// The peers are configured as in the research notes: 1e9 events/s with a
// bucket of 2^30, so that every call is a grant that never sleeps, and
// rate 1 with burst 1, after one grant, for refusals.
package bench
