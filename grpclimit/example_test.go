package grpclimit_test

import (
	"context"
	"fmt"
	"log"
	"net"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/smoothrate/ratelimit/grpclimit"
	"github.com/smoothrate/ratelimit/throttle"
)

// Two calls per hour per API key (per peer for a call without one), in
// front of a gRPC server. The third call is refused with a RetryInfo
// saying how long to wait.
func Example() {
	store, err := throttle.NewMemoryStore()
	if err != nil {
		log.Fatal(err)
	}
	lim, err := throttle.New(store, throttle.GCRA, throttle.PerHour(2))
	if err != nil {
		log.Fatal(err)
	}
	in, err := grpclimit.New(lim, grpclimit.WithKey(grpclimit.Metadata("x-api-key")))
	if err != nil {
		log.Fatal(err)
	}
	srv := grpc.NewServer(grpc.ChainUnaryInterceptor(in.Unary()), grpc.ChainStreamInterceptor(in.Stream()))
	healthpb.RegisterHealthServer(srv, health.NewServer())
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		log.Fatal(err)
	}
	go srv.Serve(ln)
	defer srv.Stop()

	conn, err := grpc.NewClient(ln.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		log.Fatal(err)
	}
	defer conn.Close()
	client := healthpb.NewHealthClient(conn)
	ctx := metadata.AppendToOutgoingContext(context.Background(), "x-api-key", "k-123")
	for range 3 {
		var md metadata.MD
		_, err := client.Check(ctx, &healthpb.HealthCheckRequest{}, grpc.Header(&md))
		st := status.Convert(err)
		fmt.Println(st.Code(), md.Get("ratelimit-policy"), md.Get("retry-after"))
		for _, d := range st.Details() {
			if ri, ok := d.(*errdetails.RetryInfo); ok {
				fmt.Println("retry in about", ri.RetryDelay.AsDuration().Round(60e9))
			}
		}
	}
	// Output:
	// OK ["default";q=2;w=3600] []
	// OK ["default";q=2;w=3600] []
	// ResourceExhausted ["default";q=2;w=3600] [1800]
	// retry in about 30m0s
}
