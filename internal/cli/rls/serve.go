package rls

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log"
	"net"
	"net/http"
	"os"
	"runtime"
	"strings"
	"sync"
	"time"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protojson"

	"github.com/smoothrate/ratelimit/internal/cli/command"
	"github.com/smoothrate/ratelimit/internal/cli/metrics"
	"github.com/smoothrate/ratelimit/internal/cli/outage"
	"github.com/smoothrate/ratelimit/internal/cli/redisflag"
	"github.com/smoothrate/ratelimit/internal/cli/serve"
	"github.com/smoothrate/ratelimit/internal/tlsfiles"
	"github.com/smoothrate/ratelimit/internal/units"
	"github.com/smoothrate/ratelimit/rls"
)

// This file holds what rls serves: the gRPC service (with the standard
// health service), the reference's HTTP face (/json, /healthcheck) and the
// metrics, and their graceful stop.

// largeCall is the most descriptors of a call answered without a turn:
// calls of more (Envoy sends a handful; these come from a client of its
// own) take turns, at most half the processors' worth at once, so that
// however many arrive the ordinary calls always find a processor free
// (two callers of 10 000 descriptors each doubled ordinary calls' p99
// when they could take both processors of a 2-core machine).
const largeCall = 256

// maxJSONBody bounds a /json request: a RateLimitRequest is a few hundred
// bytes.
const maxJSONBody = 1 << 20

// runCheck is --check: load the configuration once, print one line.
func (c *rlsConfig) runCheck(stdout, stderr io.Writer) int {
	_, cfg, err := c.load()
	if err != nil {
		fmt.Fprintf(stderr, "ratelimit rls: %v\n", err)
		return command.ExitUsage
	}
	if len(cfg.Files()) == 0 {
		// Served, it would answer every call OK without a limit: a
		// check that passes it would hide a wrong path.
		fmt.Fprintf(stderr, "ratelimit rls: %s holds no configuration file\n", c.configPath)
		return command.ExitUsage
	}
	fmt.Fprintf(stdout, "ratelimit rls: %s is valid: %s\n", c.configPath, describeConfig(cfg))
	return command.ExitOK
}

// load reads the configuration at configPath once (readConfigFiles, within
// configReadTimeout) and parses it.
func (c *rlsConfig) load() (configSnapshot, *rls.Config, error) {
	if _, err := os.Stat(c.configPath); err != nil && c.configFromEnv && errors.Is(err, os.ErrNotExist) {
		return configSnapshot{}, nil, fmt.Errorf("%s: no such file or directory (the path RUNTIME_ROOT/RUNTIME_SUBDIRECTORY/RUNTIME_APPDIRECTORY names; give --config PATH)", c.configPath)
	}
	s, ok, _ := readBounded(readConfigFiles, c.configPath, configReadTimeout, nil, nil)
	if !ok {
		return s, nil, fmt.Errorf("%s: reading it took more than %v (a filesystem that does not answer?)", c.configPath, configReadTimeout)
	}
	cfg, err := c.parse(s)
	return s, cfg, err
}

// parse builds the configuration a snapshot holds.
func (c *rlsConfig) parse(s configSnapshot) (*rls.Config, error) {
	if s.err != nil {
		return nil, s.err
	}
	return rls.ParseConfig(s.files, rls.MergeDomains(c.mergeDomains))
}

// describeConfig names a configuration's domains and files, for messages.
func describeConfig(cfg *rls.Config) string {
	d := cfg.Domains()
	files := len(cfg.Files())
	return fmt.Sprintf("%d file%s, domain%s %s", files, command.Plural(int64(files), "", "s"), command.Plural(int64(len(d)), "", "s"), strings.Join(d, ", "))
}

// serviceOptions are the rls options the flags ask for.
func (c *rlsConfig) serviceOptions() []rls.Option {
	opts := []rls.Option{rls.WithStoreTimeout(c.storeTimeout), rls.WithMaxDescriptors(c.maxDescriptors),
		rls.WithMaxDescriptorBytes(int(c.maxDescriptorBytes)), rls.WithMetricSeriesLimit(c.metricSeries, int(c.metricLabelBytes))}
	if c.responseHeaders {
		opts = append(opts, rls.WithRateLimitHeaders(c.headerNames[0], c.headerNames[1], c.headerNames[2]))
	}
	if c.ietfHeaders {
		opts = append(opts, rls.WithIETFHeaders())
	}
	if c.countOnlyAdmitted {
		opts = append(opts, rls.WithCountOnlyAdmitted())
	}
	if c.nearLimitRatio != 0 {
		opts = append(opts, rls.WithNearLimitRatio(c.nearLimitRatio))
	}
	if c.shadowMode {
		opts = append(opts, rls.WithGlobalShadowMode())
	}
	return opts
}

// openStore makes the store: memory, or Redis checked at start. A Redis
// that answers but is set up wrong is an error wrapping
// rls.ErrMisconfigured (exit status 2); one that does not answer is a
// warning on stderr: the service answers UNAVAILABLE until it does, and
// down is how to ask it again (nil when it answered).
func (c *rlsConfig) openStore(stderr io.Writer) (store rls.Store, where string, closeStore func(), down func(context.Context) error, err error) {
	if c.newRedis == nil {
		// CACHE_KEY_PREFIX names Redis keys: nothing to do in memory.
		m, err := rls.NewMemoryStore(rls.WithMaxKeys(c.maxKeys), rls.WithMaxBytes(int(c.maxBytes)))
		if err != nil {
			return nil, "", nil, nil, err
		}
		return m, fmt.Sprintf("memory store (at most %d keys and %s, for the windows and for the additions each)", c.maxKeys, units.SizeText(c.maxBytes)), func() {}, nil, nil
	}
	redisflag.Quiet() // store errors are counted, and logged by the service
	var sopts []rls.StoreOption
	if c.keyPrefix != "" {
		sopts = append(sopts, rls.WithKeyPrefix(c.keyPrefix))
	}
	if c.refusalCache > 0 {
		sopts = append(sopts, rls.WithRefusalCache(c.refusalCache))
	}
	client := c.newRedis()
	rs, err := rls.NewRedisStore(client, sopts...)
	if err != nil {
		client.Close()
		return nil, "", nil, nil, err
	}
	ctx, cancel := context.WithTimeout(context.Background(), redisflag.StartTimeout)
	defer cancel()
	if err := redisflag.SetUpWrong(ctx, client); err != nil {
		client.Close()
		return nil, "", nil, nil, fmt.Errorf("redis at %s is set up wrong: %w", c.redisWhere, err)
	}
	if err := rs.Check(ctx); err != nil {
		if redisflag.Misconfigured(err) {
			client.Close()
			return nil, "", nil, nil, fmt.Errorf("redis at %s is set up wrong: %w", c.redisWhere, err)
		}
		fmt.Fprintf(stderr, "ratelimit rls: warning: redis at %s does not answer (%v); answering UNAVAILABLE, and /healthcheck 500, until it does\n", c.redisWhere, err)
		down = rs.Check
	} else if w := redisflag.Evictions(ctx, client); w != "" {
		fmt.Fprintf(stderr, "ratelimit rls: warning: redis at %s %s\n", c.redisWhere, w)
	}
	return rs, "redis " + c.redisWhere, func() { client.Close() }, down, nil
}

// jsonHandler is the reference's POST /json: a RateLimitRequest in
// protojson, answered 200 (OK) or 429 (OVER_LIMIT) with the response in
// protojson; 400 for a body that is not a request, 408 (and the connection
// closed) for one that stalls for readTimeout, and 503 when the store
// failed (the reference answers 400 there too, which blames the client).
func jsonHandler(svc rlsv3.RateLimitServiceServer, readTimeout time.Duration) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		serve.NewTimedBody(w, r, readTimeout)
		body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, maxJSONBody))
		if serve.BodyTimedOut(err) {
			w.Header().Set("Connection", "close")
			http.Error(w, "the request body stalled for longer than --read-timeout", http.StatusRequestTimeout)
			return
		}
		if err != nil {
			http.Error(w, "reading the body: "+err.Error(), http.StatusBadRequest)
			return
		}
		var req rlsv3.RateLimitRequest
		if err := protojson.Unmarshal(body, &req); err != nil {
			http.Error(w, "not a RateLimitRequest in JSON: "+err.Error(), http.StatusBadRequest)
			return
		}
		resp, err := svc.ShouldRateLimit(r.Context(), &req)
		if err != nil {
			code := http.StatusBadRequest // the reference's answer to every error
			switch status.Code(err) {
			case codes.Unavailable, codes.DeadlineExceeded, codes.Canceled:
				code = http.StatusServiceUnavailable
			case codes.Internal:
				code = http.StatusInternalServerError
			}
			http.Error(w, status.Convert(err).Message(), code)
			return
		}
		out, err := protojson.Marshal(resp)
		if err != nil {
			http.Error(w, err.Error(), http.StatusInternalServerError)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		switch resp.GetOverallCode() {
		case rlsv3.RateLimitResponse_OVER_LIMIT:
			w.WriteHeader(http.StatusTooManyRequests)
		case rlsv3.RateLimitResponse_OK:
		default:
			w.WriteHeader(http.StatusInternalServerError)
		}
		w.Write(out)
	})
}

// rlsAnswerer is a function serving as the RateLimitServiceServer.
type rlsAnswerer func(context.Context, *rlsv3.RateLimitRequest) (*rlsv3.RateLimitResponse, error)

func (f rlsAnswerer) ShouldRateLimit(ctx context.Context, req *rlsv3.RateLimitRequest) (*rlsv3.RateLimitResponse, error) {
	return f(ctx, req)
}

// noteStore records a call's outcome in the store's outage log (the proxy
// keeps the same: a line when an outage begins, with its reason, summaries
// while it lasts, a line when it ends): a store failure by its answer, a
// call that consulted the store (a status with a limit) as the store
// working.
func noteStore(l *outage.Log, resp *rlsv3.RateLimitResponse, err error) {
	switch {
	case err == nil:
		for _, st := range resp.GetStatuses() {
			if st.GetCurrentLimit() != nil {
				l.OK()
				return
			}
		}
	case errors.Is(err, rls.ErrMisconfigured):
		l.Fail(err, "answered INTERNAL (Redis set up wrong: no wait ends it)")
	case errors.Is(err, rls.ErrStore) && !errors.Is(err, context.Canceled) && !errors.Is(err, context.DeadlineExceeded):
		// A store failure, the store timeout included; a caller that
		// gave up (its own cancel or deadline) says nothing of the store.
		l.Fail(err, "answered "+status.Code(err).String())
	}
}

// Health conditions: what /healthcheck waits for, as the reference's
// health checker's components.
const (
	healthStore  = "store"         // Redis answered a first time
	healthConfig = "configuration" // a first configuration (xDS), one with a domain (HEALTHY_WITH_AT_LEAST_ONE_CONFIG_LOADED)
)

// storeRetryEvery is how often a Redis that did not answer at start is
// asked again, for the health check.
const storeRetryEvery = 250 * time.Millisecond

// awaitStore asks the store (down) again every storeRetryEvery until it
// answers or ctx ends, then turns the health's store condition on and
// says so.
func awaitStore(ctx context.Context, down func(context.Context) error, h *serve.Health, where string, l *log.Logger) {
	t := time.NewTicker(storeRetryEvery)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		check, cancel := context.WithTimeout(ctx, redisflag.StartTimeout)
		err := down(check)
		cancel()
		if err == nil {
			h.Set(healthStore, true)
			l.Printf("%s answers", where)
			return
		}
	}
}

// serve runs the service until ctx ends, then drains it.
func (c *rlsConfig) serve(ctx context.Context, stdout, stderr io.Writer) int {
	const prefix = "ratelimit rls"
	fail := func(status int, err error) int {
		fmt.Fprintf(stderr, "%s: %v\n", prefix, err)
		return status
	}
	var cfg *rls.Config
	var loaded configSnapshot
	if c.xds.url == "" {
		var err error
		if loaded, cfg, err = c.load(); err != nil {
			return fail(command.ExitUsage, err)
		}
	}
	store, storeName, closeStore, storeDown, err := c.openStore(stderr)
	if err != nil {
		return fail(command.ExitUsage, err)
	}
	defer closeStore()
	svc, err := rls.New(cfg, store, c.serviceOptions()...)
	if err != nil {
		return fail(command.ExitUsage, err)
	}
	grpcOpts, grpcCert, err := c.grpcServerOptions()
	if err != nil {
		return fail(command.ExitUsage, err)
	}
	mapping, err := newMapper(c.metricsMapper)
	if errors.Is(err, fs.ErrNotExist) && c.mapperOptional {
		fmt.Fprintf(stderr, "%s: PROMETHEUS_MAPPER_YAML=%s does not exist: the reference's default metric mapping is used\n", prefix, c.metricsMapper)
		mapping, err = newMapper("")
	}
	if err != nil {
		return fail(command.ExitUsage, err)
	}
	errLog := log.New(stderr, prefix+": ", 0)

	// Listen on everything first, so that a taken address stops the
	// command before it serves anything.
	var listeners serve.Listeners
	grpcLn, err := c.listenGRPC(&listeners)
	if err != nil {
		return fail(command.ExitFail, err)
	}
	httpLn, err := listeners.Listen("--http", c.httpAddr)
	if err != nil {
		return fail(command.ExitFail, err)
	}
	var metricsLn net.Listener
	if c.metricsAddr != "" {
		if metricsLn, err = listeners.Listen("--metrics", c.metricsAddr); err != nil {
			return fail(command.ExitFail, err)
		}
	}
	sm := newServiceMetrics(svc, mapping)
	// One cap for every listener: a client holds at most
	// --max-conns-per-client connections to the whole process, so that one
	// opening thousands leaves file descriptors for gRPC and /healthcheck.
	if cc := c.conns.Cap(nil, &sm.connsRefused, errLog); cc != nil {
		grpcLn, httpLn = cc.Wrap(grpcLn), cc.Wrap(httpLn)
		if metricsLn != nil {
			metricsLn = cc.Wrap(metricsLn)
		}
	}

	background, stopBackground := context.WithCancel(ctx)
	var wg sync.WaitGroup
	defer func() {
		stopBackground()
		wg.Wait()
	}()
	// "ratelimit" is the name the reference's health service answers for.
	hl := serve.NewHealth(rlsv3.RateLimitService_ServiceDesc.ServiceName, "ratelimit")
	if storeDown != nil {
		hl.Set(healthStore, false)
		wg.Go(func() { awaitStore(background, storeDown, hl, storeName, errLog) })
	}
	if c.healthWithConfig && cfg != nil {
		hl.Set(healthConfig, len(cfg.Domains()) > 0)
	}
	for _, p := range []struct {
		pair *tlsfiles.KeyPair
		file string
	}{{grpcCert, c.grpc.tls.CertFile}, {c.redisCert, c.redisTLS.CertFile}} {
		if p.pair != nil {
			wg.Go(func() { watchPair(background, p.pair, p.file, c.reloadInterval, errLog) })
		}
	}

	storeLog := outage.New("store ("+storeName+")", errLog)
	defer storeLog.Close()
	// What both faces call: counted in flight, large calls taking turns,
	// store failures logged.
	large := make(chan struct{}, max(1, runtime.GOMAXPROCS(0)/2))
	answer := rlsAnswerer(func(ctx context.Context, req *rlsv3.RateLimitRequest) (*rlsv3.RateLimitResponse, error) {
		sm.inFlight.Add(1)
		defer sm.inFlight.Add(-1)
		if len(req.GetDescriptors()) > largeCall {
			select {
			case large <- struct{}{}:
				defer func() { <-large }()
			case <-ctx.Done():
				return nil, status.FromContextError(ctx.Err()).Err()
			}
		}
		resp, err := svc.ShouldRateLimit(ctx, req)
		noteStore(storeLog, resp, err)
		return resp, err
	})
	gs := grpc.NewServer(append(grpcOpts, grpc.ChainUnaryInterceptor(sm.intercept))...)
	rlsv3.RegisterRateLimitServiceServer(gs, answer)
	healthpb.RegisterHealthServer(gs, hl.GRPC())

	// The configuration: files, watched; or an xDS server's, with the
	// gRPC service held until the first arrives unless --force-start.
	var grpcServer serve.GRPCServer = gs
	var source string
	if c.xds.url == "" {
		source = fmt.Sprintf("%s from %s", describeConfig(cfg), c.configPath)
		w := newConfigWatcher(c, svc, loaded, errLog)
		if c.healthWithConfig {
			w.onLoad = func(cfg *rls.Config) { hl.Set(healthConfig, len(cfg.Domains()) > 0) }
		}
		stopWatch := w.start()
		defer stopWatch()
	} else {
		var stopXDS func()
		if grpcServer, source, stopXDS, err = c.serveXDS(background, svc, gs, hl, errLog); err != nil {
			listeners.Close()
			return fail(command.ExitUsage, err)
		}
		defer stopXDS()
	}

	servers := &serve.Group{Prefix: prefix, Stderr: stderr, Work: "calls", Drain: c.drain}
	servers.GRPC(grpcServer, grpcLn)
	mux := http.NewServeMux()
	mux.Handle("POST /json", jsonHandler(answer, c.conns.ReadTimeout))
	mux.Handle("/healthcheck", hl)
	servers.HTTP(c.conns.Apply(&http.Server{Handler: mux, ErrorLog: errLog}), httpLn)
	metricsNote := ""
	if metricsLn != nil {
		reg, err := metrics.NewRegistry(sm)
		if err != nil {
			return fail(command.ExitFail, err)
		}
		servers.HTTP(c.conns.Apply(metrics.Server(reg, c.metricsPath, errLog)), metricsLn)
		metricsNote = metrics.Banner(metricsLn, c.metricsPath)
	}

	tlsNote := ""
	if c.grpc.useTLS {
		tlsNote = " (TLS"
		if c.grpc.tls.ClientCAFile != "" {
			tlsNote += ", client certificates required"
		}
		tlsNote += ")"
	}
	fmt.Fprintf(stdout, "%s: gRPC on %s%s, HTTP on http://%s%s; %s; %s\n",
		prefix, grpcAddrString(grpcLn), tlsNote, httpLn.Addr(), metricsNote, source, storeName)

	return servers.Run(ctx, hl.Stopping)
}
