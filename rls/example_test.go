package rls_test

import (
	"context"
	"fmt"
	"log"

	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"

	"github.com/smoothrate/ratelimit/rls"
)

// A configuration in the reference's format, with two of our additions on
// one descriptor: a limit per minute and a sliding window per day.
const config = `
domain: api
descriptors:
  - key: user
    rate_limits:
      - unit: minute
        requests_per_unit: 2
      - unit: day
        requests_per_unit: 100
        algorithm: sliding-window
`

func Example() {
	cfg, err := rls.ParseConfig([]rls.File{{Name: "api.yaml", Content: []byte(config)}})
	if err != nil {
		log.Fatal(err)
	}
	// nil: the embedded memory store. rls.NewRedisStore shares the
	// counters between instances.
	svc, err := rls.New(cfg, nil)
	if err != nil {
		log.Fatal(err)
	}
	// Register svc with rlsv3.RegisterRateLimitServiceServer on a
	// grpc.Server; here it is called directly, as Envoy would.
	req := &rlsv3.RateLimitRequest{
		Domain: "api",
		Descriptors: []*ratelimitv3.RateLimitDescriptor{{
			Entries: []*ratelimitv3.RateLimitDescriptor_Entry{{Key: "user", Value: "42"}},
		}},
	}
	for i := 0; i < 3; i++ {
		resp, err := svc.ShouldRateLimit(context.Background(), req)
		if err != nil {
			log.Fatal(err)
		}
		fmt.Println(resp.OverallCode, resp.Statuses[0].LimitRemaining)
	}
	// Output:
	// OK 1
	// OK 0
	// OVER_LIMIT 0
}

func ExampleConfigError() {
	_, err := rls.ParseConfig([]rls.File{{Name: "bad.yaml", Content: []byte("domain: api\ndescriptors:\n  - key: user\n    rate_limit: {unit: fortnight, requests_per_unit: 5}\n")}})
	fmt.Println(err)
	// Output: bad.yaml: invalid rate limit unit 'fortnight'
}
