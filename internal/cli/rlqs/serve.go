package rlqs

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"

	rlqsv3 "github.com/envoyproxy/go-control-plane/envoy/service/rate_limit_quota/v3"
	"google.golang.org/grpc"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"

	"github.com/smoothrate/ratelimit/internal/cli/command"
	"github.com/smoothrate/ratelimit/internal/cli/metrics"
	"github.com/smoothrate/ratelimit/internal/cli/outage"
	"github.com/smoothrate/ratelimit/internal/cli/redisflag"
	"github.com/smoothrate/ratelimit/internal/cli/serve"
	"github.com/smoothrate/ratelimit/rlqs"
)

// This file holds what rlqs serves: the gRPC service (with the standard
// health service), /healthcheck, the metrics, and their graceful stop.

const prefix = "ratelimit rlqs"

// runCheck is --check: load the configuration once, print one line.
func (c *rlqsConfig) runCheck(stdout, stderr io.Writer) int {
	cfg, err := readConfig(c.configPath).parse(c.configPath)
	if err != nil {
		fmt.Fprintf(stderr, "%s: %v\n", prefix, err)
		return command.ExitUsage
	}
	fmt.Fprintf(stdout, "%s: %s is valid: %s\n", prefix, c.configPath, describeConfig(cfg))
	return command.ExitOK
}

// options are the library's options the flags ask for, and the store
// hook.
func (c *rlqsConfig) options(hook func(error)) []rlqs.Option {
	opts := []rlqs.Option{rlqs.WithSettleTime(c.settle), rlqs.WithAllocationInterval(c.allocation),
		rlqs.WithStoreTimeout(c.storeTimeout), rlqs.WithMaxBucketsPerStream(c.maxPerStream), rlqs.WithStoreHook(hook)}
	if c.serverID != "" {
		opts = append(opts, rlqs.WithServerID(c.serverID))
	}
	return opts
}

// openStore makes the store: none (this process alone), or Redis checked
// at start. A Redis that answers but is set up wrong is an error wrapping
// rlqs.ErrMisconfigured (exit status 2); one that does not answer is
// returned as unreachable, for a warning: the server starts, and its
// buckets get assignments once a claim succeeds. A Redis that may evict
// the store's keys is a warning, given to warn.
func (c *rlqsConfig) openStore(warn func(string)) (store rlqs.Store, where string, closeStore func(), unreachable, err error) {
	if c.newRedis == nil {
		return nil, "alone (no --redis)", func() {}, nil, nil
	}
	redisflag.Quiet() // store errors are counted, and logged as outages
	client := c.newRedis()
	rs, err := rlqs.NewRedisStore(client)
	if err != nil {
		client.Close()
		return nil, "", nil, nil, err
	}
	if unreachable, err = redisflag.CheckAtStart(client, c.redisWhere, rs.Check); err != nil {
		client.Close()
		return nil, "", nil, nil, err
	}
	if unreachable == nil {
		ctx, cancel := context.WithTimeout(context.Background(), redisflag.StartTimeout)
		defer cancel()
		if w := redisflag.Evictions(ctx, client); w != "" {
			warn("redis at " + c.redisWhere + " " + w)
		}
	}
	return rs, "redis " + c.redisWhere, func() { client.Close() }, unreachable, nil
}

// noteStore records a claim's outcome in the store's outage log: a line
// when an outage begins, with its reason, summaries while it lasts, a line
// when it ends.
func noteStore(l *outage.Log, err error) {
	switch {
	case err == nil:
		l.OK()
	case errors.Is(err, rlqs.ErrMisconfigured):
		l.Fail(err, "skipped (Redis set up wrong: no wait ends it; the buckets keep their last shares, new ones get none)")
	default:
		l.Fail(err, "skipped (the buckets keep their last shares)")
	}
}

// stoppingServer is the gRPC server of the service: its graceful stop
// first has the rlqs server send every Envoy its assignments with a time
// to live of 0 and end the streams (Shutdown), then stops the gRPC server
// gracefully, which writes out what the streams sent (Stop would drop
// it).
type stoppingServer struct {
	*grpc.Server
	srv *rlqs.Server
	log *log.Logger
}

func (s stoppingServer) GracefulStop() {
	ctx, cancel := context.WithTimeout(context.Background(), serve.ShutdownTimeout)
	defer cancel()
	if err := s.srv.Shutdown(ctx); err != nil {
		s.log.Printf("shutdown: %v", err)
	}
	s.Server.GracefulStop()
}

// serve runs the service until ctx ends, then stops it gracefully.
func (c *rlqsConfig) serve(ctx context.Context, stdout, stderr io.Writer) int {
	loaded := readConfig(c.configPath) // its digest is the watcher's start
	cfg, err := loaded.parse(c.configPath)
	if err != nil {
		fmt.Fprintf(stderr, "%s: %v\n", prefix, err)
		return command.ExitUsage
	}
	store, storeName, closeStore, unreachable, err := c.openStore(func(w string) { fmt.Fprintf(stderr, "%s: warning: %s\n", prefix, w) })
	if err != nil {
		fmt.Fprintf(stderr, "%s: %v\n", prefix, err)
		return command.ExitUsage
	}
	defer closeStore()
	errLog := log.New(stderr, prefix+": ", 0)
	storeLog := outage.New("store ("+storeName+")", errLog)
	defer storeLog.Close()
	srv, err := rlqs.New(cfg, store, c.options(func(err error) { noteStore(storeLog, err) })...)
	if err != nil {
		fmt.Fprintf(stderr, "%s: %v\n", prefix, err)
		return command.ExitUsage
	}
	// Stopped by the gRPC server's graceful stop; this covers the paths
	// that never serve (an address taken).
	defer srv.Shutdown(context.Background())

	var listeners serve.Listeners
	grpcLn, err := listeners.Listen("--grpc", c.grpcAddr)
	if err != nil {
		fmt.Fprintf(stderr, "%s: %v\n", prefix, err)
		return command.ExitFail
	}
	httpLn, err := listeners.Listen("--http", c.httpAddr)
	if err != nil {
		fmt.Fprintf(stderr, "%s: %v\n", prefix, err)
		return command.ExitFail
	}
	var metricsLn net.Listener
	if c.metricsAddr != "" {
		if metricsLn, err = listeners.Listen("--metrics", c.metricsAddr); err != nil {
			fmt.Fprintf(stderr, "%s: %v\n", prefix, err)
			return command.ExitFail
		}
	}

	stopCertWatch := redisflag.WatchCert(c.redisCert, c.redisTLSCert, c.reloadInterval, errLog.Printf)
	defer stopCertWatch()

	sm := &serverMetrics{stats: srv.Stats}
	// One cap for every listener: a client holds at most
	// --max-conns-per-client connections to the whole process.
	if cc := c.conns.Cap(nil, &sm.connsRefused, errLog); cc != nil {
		grpcLn, httpLn = cc.Wrap(grpcLn), cc.Wrap(httpLn)
		if metricsLn != nil {
			metricsLn = cc.Wrap(metricsLn)
		}
	}
	hl := serve.NewHealth(rlqsv3.RateLimitQuotaService_ServiceDesc.ServiceName)
	gs := grpc.NewServer(serve.GRPCOptions(c.maxStreams)...)
	rlqsv3.RegisterRateLimitQuotaServiceServer(gs, srv)
	healthpb.RegisterHealthServer(gs, hl.GRPC())
	servers := &serve.Group{Prefix: prefix, Stderr: stderr, Work: "streams", Drain: c.drain}
	servers.GRPC(stoppingServer{Server: gs, srv: srv, log: errLog}, grpcLn)
	mux := http.NewServeMux()
	mux.Handle("/healthcheck", hl)
	servers.HTTP(c.conns.Apply(&http.Server{Handler: mux, ErrorLog: errLog}), httpLn)
	metricsNote := ""
	if metricsLn != nil {
		reg, err := metrics.NewRegistry(sm)
		if err != nil {
			fmt.Fprintf(stderr, "%s: %v\n", prefix, err)
			return command.ExitFail
		}
		servers.HTTP(c.conns.Apply(metrics.Server(reg, "", errLog)), metricsLn)
		metricsNote = metrics.Banner(metricsLn, "")
	}

	w := newConfigWatcher(c.configPath, srv, loaded, errLog, &sm.loadsFailed)
	stopWatch := serve.Reload(c.reloadInterval, w.look)
	defer stopWatch()

	fmt.Fprintf(stdout, "%s: gRPC on %s, HTTP on http://%s%s; %s from %s; %s\n",
		prefix, grpcLn.Addr(), httpLn.Addr(), metricsNote, describeConfig(cfg), c.configPath, storeName)
	if unreachable != nil {
		errLog.Printf("warning: redis at %s does not answer (%v); serving, buckets get assignments once it does", c.redisWhere, unreachable)
		noteStore(storeLog, unreachable)
	}
	return servers.Run(ctx, hl.Stopping)
}
