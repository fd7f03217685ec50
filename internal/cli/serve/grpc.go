package serve

import (
	"flag"
	"fmt"
	"math"

	"google.golang.org/grpc"
)

// DefaultMaxStreams is --grpc-max-concurrent-streams's default: far above
// the calls or streams one Envoy has open on a connection (a few tens), and
// a bound on the handlers one connection can start, which gRPC leaves
// unbounded (a goroutine a stream, and for rlqs a stream's buckets).
const DefaultMaxStreams = 1024

// RegisterMaxStreams adds --grpc-max-concurrent-streams to fs, into n.
func RegisterMaxStreams(fs *flag.FlagSet, n *int) {
	fs.IntVar(n, "grpc-max-concurrent-streams", DefaultMaxStreams, "the most streams (calls) one gRPC connection has open at once (HTTP/2's SETTINGS_MAX_CONCURRENT_STREAMS): a client past it waits, or opens another connection")
}

// CheckMaxStreams refuses a --grpc-max-concurrent-streams below 1 or above
// HTTP/2's range.
func CheckMaxStreams(n int) error {
	if n < 1 || uint64(n) >= math.MaxUint32 {
		return fmt.Errorf("--grpc-max-concurrent-streams %d: want at least 1", n)
	}
	return nil
}

// GRPCOptions are the bounds every serving command's gRPC server has:
//
//   - at most maxStreams streams open on a connection, which the server
//     says in its HTTP/2 settings; a connection whose streams fill it is
//     read no further until one ends, so that a client that opens and
//     resets streams as fast as it can (HTTP/2 "rapid reset") does not
//     start handlers faster than they end;
//   - a new connection's TLS handshake and HTTP/2 preface within
//     ReadHeaderTimeout, as HTTP request headers, not gRPC's default of
//     120 s: a client that connects and sends nothing holds a connection
//     a twelfth as long.
func GRPCOptions(maxStreams int) []grpc.ServerOption {
	return []grpc.ServerOption{
		grpc.MaxConcurrentStreams(uint32(maxStreams)),
		grpc.ConnectionTimeout(ReadHeaderTimeout),
	}
}
