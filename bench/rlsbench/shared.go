package rlsbench

import (
	"context"
	"math/rand/v2"
	"sync"

	pb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"
)

// Shared is two servers on one Redis that answer calls in turn, chosen at
// random for each call: a fleet halfway through swapping the reference's
// image for ours. Compared with a reference that sees every call alone,
// it shows whether both count on the same counters.
func Shared(name string, a, b *Server, seed uint64) *Server {
	pick := &picker{servers: []*Server{a, b}, r: rand.New(rand.NewPCG(seed, 1))}
	return &Server{Name: name, Client: pick, Redis: a.Redis, pick: pick}
}

type picker struct {
	servers []*Server
	mu      sync.Mutex
	r       *rand.Rand
}

func (p *picker) next() *Server {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.servers[p.r.IntN(len(p.servers))]
}

func (p *picker) ShouldRateLimit(ctx context.Context, in *pb.RateLimitRequest, opts ...grpc.CallOption) (*pb.RateLimitResponse, error) {
	return p.next().Client.ShouldRateLimit(ctx, in, opts...)
}
