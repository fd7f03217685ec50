package xds_test

import (
	"context"
	"fmt"
	"log"
	"net"

	discoverygrpc "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"github.com/envoyproxy/go-control-plane/pkg/cache/types"
	"github.com/envoyproxy/go-control-plane/pkg/cache/v3"
	"github.com/envoyproxy/go-control-plane/pkg/resource/v3"
	"github.com/envoyproxy/go-control-plane/pkg/server/v3"
	rlconfv3 "github.com/envoyproxy/go-control-plane/ratelimit/config/ratelimit/v3"
	"google.golang.org/grpc"

	"github.com/smoothrate/ratelimit/rls"
	"github.com/smoothrate/ratelimit/rls/xds"
)

// A service configured by an xDS server: here go-control-plane's, started
// in process with one snapshot for the node envoy-ratelimit.
func Example() {
	addr := startManagementServer(&rlconfv3.RateLimitConfig{
		Name: "edge", Domain: "edge",
		Descriptors: []*rlconfv3.RateLimitDescriptor{{
			Key:       "remote_address",
			RateLimit: &rlconfv3.RateLimitPolicy{Unit: rlconfv3.RateLimitUnit_SECOND, RequestsPerUnit: 10},
		}},
	})

	svc, err := rls.New(nil, nil)
	if err != nil {
		log.Fatal(err)
	}
	c, err := xds.NewClient(addr, svc, xds.WithNodeID("envoy-ratelimit"),
		xds.WithEvents(func(e xds.Event) {
			if e.Kind == xds.Rejected {
				log.Printf("xDS configuration refused: %v", e.Err)
			}
		}))
	if err != nil {
		log.Fatal(err)
	}
	defer c.Close()
	go c.Run(context.Background())

	cfg, err := c.WaitConfig(context.Background())
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("domains:", cfg.Domains())
	// Output: domains: [edge]
}

func startManagementServer(cfgs ...*rlconfv3.RateLimitConfig) string {
	snapshots := cache.NewSnapshotCache(true, cache.IDHash{}, nil)
	res := make([]types.Resource, len(cfgs))
	for i, c := range cfgs {
		res[i] = c
	}
	snap, err := cache.NewSnapshot("1", map[resource.Type][]types.Resource{resource.RateLimitConfigType: res})
	if err != nil {
		log.Fatal(err)
	}
	if err := snapshots.SetSnapshot(context.Background(), "envoy-ratelimit", snap); err != nil {
		log.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		log.Fatal(err)
	}
	g := grpc.NewServer()
	discoverygrpc.RegisterAggregatedDiscoveryServiceServer(g, server.NewServer(context.Background(), snapshots, nil))
	go g.Serve(ln)
	return ln.Addr().String()
}
