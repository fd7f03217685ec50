package rls

import "google.golang.org/grpc"

// rlsStreamWorkers is how many goroutines serve ShouldRateLimit calls and
// stay for the next: more than the calls in flight under load (a worker
// blocked on the store counts), so that few calls pay for a new goroutine
// and the growth of its stack; the calls beyond them get one, as without
// workers.
const rlsStreamWorkers = 64

// rlsServerOptions are the gRPC server's options for `ratelimit rls`.
func rlsServerOptions() []grpc.ServerOption {
	return []grpc.ServerOption{grpc.NumStreamWorkers(rlsStreamWorkers)}
}
