// Package distbench measures package distributed in the same run as the
// local limiter and as go-redis/redis_rate, and the keyed limiters'
// RedisStore (package throttle) against redis_rate (keyed_test.go), on
// one redis-server that its benchmarks start on a free loopback port:
//
//	cd bench && go run ./cmd/distbench -count 5     # the table of docs/performance.md
//	cd bench && go run ./cmd/distbench -count 5 -bench Keyed   # throttle.RedisStore against redis_rate
//	cd bench && go test -run '^$' -bench . -benchmem ./distbench/
//
// It is a package of its own, not part of package bench, so that the peer
// benchmarks of package bench (run with -bench .) never need a Redis
// server. It holds only benchmarks; see distbench_test.go for what each
// one measures.
package distbench
