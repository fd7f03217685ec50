package rlqs_test

import (
	"context"
	"fmt"
	"net"

	rlqsv3 "github.com/envoyproxy/go-control-plane/envoy/service/rate_limit_quota/v3"
	"google.golang.org/grpc"

	"github.com/smoothrate/ratelimit/rlqs"
)

// A Server alone (no Redis) on a gRPC server. With replicas, pass
// rlqs.NewRedisStore(client) instead of nil, and call its Check first.
func Example() {
	cfg, err := rlqs.ParseConfig("rlqs.yaml", []byte(`
domain: edge
buckets:
  - bucket_id: {route: api}
    requests_per_unit: 100
    unit: second
  - bucket_id: {route: login, user: "*"}
    requests_per_unit: 5
    unit: minute
`))
	if err != nil {
		fmt.Println(err)
		return
	}
	srv, err := rlqs.New(cfg, nil)
	if err != nil {
		fmt.Println(err)
		return
	}
	g := grpc.NewServer()
	rlqsv3.RegisterRateLimitQuotaServiceServer(g, srv)
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		fmt.Println(err)
		return
	}
	go func() { _ = g.Serve(lis) }()
	fmt.Println("serving domain", cfg.Domain(), "with", cfg.Buckets(), "bucket entries")

	// On SIGTERM: Envoys drop their assignments first, then the streams
	// end and the gRPC server stops.
	_ = srv.Shutdown(context.Background())
	g.GracefulStop()
	// Output: serving domain edge with 2 bucket entries
}

// A configuration that the file refuses says where and why, on one line.
func ExampleParseConfig() {
	_, err := rlqs.ParseConfig("rlqs.yaml", []byte(`
domain: edge
buckets:
  - bucket_id: {route: api}
    requests_per_unit: 100
    unit: fortnight
`))
	fmt.Println(err)
	// Output: rlqs.yaml: buckets[1]: unit 'fortnight' is not second, minute, hour or day
}
