package rlqstest

import (
	"context"
	"errors"
	"net"
	"sync"

	rlqsv3 "github.com/envoyproxy/go-control-plane/envoy/service/rate_limit_quota/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/test/bufconn"
)

// Network is an in-memory network (bufconn) for servers and Envoys in one
// process: it works in a testing/synctest bubble, where real sockets do
// not. Envoys dial whichever server listens last, so that a test can stop
// a server and start another in its place.
type Network struct {
	mu  sync.Mutex
	lis *bufconn.Listener
}

// Serve serves srv on a new listener of the network, which Envoys dial
// from now on, and returns the gRPC server (Stop it).
func (n *Network) Serve(srv rlqsv3.RateLimitQuotaServiceServer) *grpc.Server {
	lis := bufconn.Listen(1 << 20)
	n.mu.Lock()
	n.lis = lis
	n.mu.Unlock()
	g := grpc.NewServer()
	rlqsv3.RegisterRateLimitQuotaServiceServer(g, srv)
	go func() { _ = g.Serve(lis) }()
	return g
}

// Dial returns a client connection to whichever server listens when it
// connects (Close it).
func (n *Network) Dial() *grpc.ClientConn {
	conn, err := grpc.NewClient("passthrough:///rlqs",
		grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithContextDialer(func(ctx context.Context, _ string) (net.Conn, error) {
			n.mu.Lock()
			lis := n.lis
			n.mu.Unlock()
			if lis == nil {
				return nil, errors.New("rlqstest: no server listens")
			}
			return lis.DialContext(ctx)
		}))
	if err != nil {
		panic(err) // only a bad option makes NewClient fail
	}
	return conn
}
