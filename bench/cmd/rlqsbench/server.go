package main

import (
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime/pprof"
	"strconv"
	"strings"
	"time"

	rlqsv3 "github.com/envoyproxy/go-control-plane/envoy/service/rate_limit_quota/v3"
	"github.com/redis/go-redis/v9"
	"google.golang.org/grpc"

	"github.com/smoothrate/ratelimit/bench/rlsbench"
	"github.com/smoothrate/ratelimit/rlqs"
)

// benchConfig is the measured server's file: buckets entries {bucket: b0}
// ... {bucket: b<buckets-1>} of rate requests per second each.
func benchConfig(buckets int, rate float64, interval time.Duration) string {
	var b strings.Builder
	fmt.Fprintf(&b, "domain: bench\nreporting_interval: %v\nbuckets:\n", interval)
	for i := range buckets {
		fmt.Fprintf(&b, "  - bucket_id: {bucket: b%d}\n    requests_per_unit: %d\n    unit: second\n", i, int64(rate))
	}
	return b.String()
}

// serverRunner starts the measured server, -server binary or library.
type serverRunner struct {
	c       config
	bin     string // the ratelimit binary, or this program
	cfgFile string // binary: the file of benchConfig
	cleanup func()
}

func newServerRunner(c config) (*serverRunner, error) {
	r := &serverRunner{c: c, cleanup: func() {}}
	if c.server == "library" {
		self, err := os.Executable()
		if err != nil {
			return nil, err
		}
		r.bin = self
		return r, nil
	}
	_, root, err := rlsbench.Dirs()
	if err != nil {
		return nil, err
	}
	if r.bin, err = rlsbench.BuildOurs(root); err != nil {
		return nil, err
	}
	dir, err := os.MkdirTemp("", "rlqsbench-")
	if err != nil {
		return nil, err
	}
	r.cleanup = func() { os.RemoveAll(dir) }
	r.cfgFile = filepath.Join(dir, "rlqs.yaml")
	if err := os.WriteFile(r.cfgFile, []byte(benchConfig(c.buckets, c.rate, c.interval)), 0o644); err != nil {
		r.cleanup()
		return nil, err
	}
	return r, nil
}

// bannerGRPC finds the gRPC address in `ratelimit rlqs`'s first line.
var bannerGRPC = regexp.MustCompile(`gRPC on ([^,]+),`)

// start starts the server for store (memory: alone), on the Redis at
// redisAddr when not empty, and returns it with its gRPC address.
func (r *serverRunner) start(store, redisAddr string) (*exec.Cmd, string, error) {
	if r.c.server == "library" {
		args := []string{"-serve", "127.0.0.1:0", "-buckets", strconv.Itoa(r.c.buckets),
			"-rate", strconv.FormatFloat(r.c.rate, 'g', -1, 64), "-interval", r.c.interval.String()}
		if r.c.profile != "" {
			args = append(args, "-server-cpuprofile", r.c.profile+"."+store)
		}
		if redisAddr != "" {
			args = append(args, "-redis", redisAddr)
		}
		return startServer(r.bin, args, r.c.serverProcs, func(line string) string { return line })
	}
	// Every simulated Envoy connects from 127.0.0.1: no per-client cap
	// (by default one address holds at most 256 connections).
	args := []string{"rlqs", "--config", r.cfgFile, "--grpc", "127.0.0.1:0", "--http", "127.0.0.1:0", "--max-conns-per-client", "0"}
	if redisAddr != "" {
		args = append(args, "--redis", "redis://"+redisAddr+"/0")
	}
	return startServer(r.bin, args, r.c.serverProcs, func(line string) string {
		if m := bannerGRPC.FindStringSubmatch(line); m != nil {
			return m[1]
		}
		return ""
	})
}

// runServer is the measured server of -server library: package rlqs on
// benchConfig's file, alone or on the Redis at redisAddr, served on addr
// until SIGTERM, its CPU profile written to profile if not empty. It
// prints the address it listens on.
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
	cfg, err := rlqs.ParseConfig("bench.yaml", []byte(benchConfig(buckets, rate, interval)))
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
