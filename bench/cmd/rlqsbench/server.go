package main

import (
	"context"
	"fmt"
	"net"
	"os"
	"runtime/pprof"
	"strings"
	"time"

	rlqsv3 "github.com/envoyproxy/go-control-plane/envoy/service/rate_limit_quota/v3"
	"github.com/redis/go-redis/v9"
	"google.golang.org/grpc"

	"github.com/smoothrate/ratelimit/rlqs"
)

// runServer is the measured server: buckets entries {bucket: b0} ...
// {bucket: b<buckets-1>} of rate requests per second each, alone or on
// the Redis at redisAddr, served on addr until SIGTERM, its CPU profile
// written to profile if not empty. It prints the address it listens on.
func runServer(addr, redisAddr string, buckets int, rate float64, interval time.Duration, profile string) error {
	if profile != "" {
		f, err := os.Create(profile)
		if err != nil {
			return err
		}
		defer f.Close()
		if err := pprof.StartCPUProfile(f); err != nil {
			return err
		}
		defer pprof.StopCPUProfile()
	}
	var b strings.Builder
	fmt.Fprintf(&b, "domain: bench\nreporting_interval: %v\nbuckets:\n", interval)
	for i := range buckets {
		fmt.Fprintf(&b, "  - bucket_id: {bucket: b%d}\n    requests_per_unit: %d\n    unit: second\n", i, int64(rate))
	}
	cfg, err := rlqs.ParseConfig("bench.yaml", []byte(b.String()))
	if err != nil {
		return err
	}
	var store rlqs.Store
	if redisAddr != "" {
		c := redis.NewClient(&redis.Options{Addr: redisAddr, ContextTimeoutEnabled: true})
		defer c.Close()
		s, err := rlqs.NewRedisStore(c)
		if err != nil {
			return err
		}
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		err = s.Check(ctx)
		cancel()
		if err != nil {
			return err
		}
		store = s
	}
	srv, err := rlqs.New(cfg, store)
	if err != nil {
		return err
	}
	lis, err := net.Listen("tcp", addr)
	if err != nil {
		return err
	}
	g := grpc.NewServer()
	rlqsv3.RegisterRateLimitQuotaServiceServer(g, srv)
	go func() { _ = g.Serve(lis) }()
	fmt.Println(lis.Addr().String())
	waitForSignal()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	err = srv.Shutdown(ctx)
	g.GracefulStop()
	return err
}
