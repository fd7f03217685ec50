// Package rls is `ratelimit rls`: Envoy's global rate limit service
// (package rls of the library) served over gRPC and the reference's HTTP
// face, configured as envoyproxy/ratelimit is (its YAML files, reloaded as
// they change, and its environment variables), with its counts in memory
// or in Redis.
package rls

import (
	"cmp"
	"errors"
	"flag"
	"fmt"
	"io"
	"math"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/smoothrate/ratelimit/internal/cli/command"
	"github.com/smoothrate/ratelimit/internal/cli/redisflag"
	"github.com/smoothrate/ratelimit/internal/cli/serve"
	"github.com/smoothrate/ratelimit/internal/tlsfiles"
	"github.com/smoothrate/ratelimit/rls"
	"github.com/smoothrate/ratelimit/throttle"
)

const rlsUsage = `Usage: ratelimit rls --config PATH [flags]
       ratelimit rls --xds HOST:PORT [flags]

Rls serves Envoy's global rate limit service (gRPC
envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit) from the
configuration format of envoyproxy/ratelimit, so that Envoy, Istio, Contour,
Emissary, Gloo or Envoy Gateway can ask it whether a request is over its
limit. PATH is a YAML file or a directory of them (one domain per file);
docs/rls.md describes the format, our additions to it and a complete
envoy.yaml. With --xds the configuration comes instead from an xDS
management server (RateLimitConfig resources over ADS, as Envoy Gateway
pushes them to envoyproxy/ratelimit): each one it sends replaces the whole
configuration; one that does not load is refused (NACK) and logged, the
previous one serving on. The gRPC service starts once the first has
arrived, or at once with --force-start (calls before it answered with an
error).

It also answers the reference's HTTP face on --http: POST /json with a
RateLimitRequest in JSON answers 200 or 429 with the RateLimitResponse in
JSON (503 when the store failed), and GET /healthcheck answers OK, or 500
until Redis has answered once (and, with --xds, until the first
configuration unless --force-start) and once the command is stopping.

gRPC is served on host:port or, with --grpc unix:PATH, on a Unix socket
(a socket file left by a process that is gone is replaced). With
--grpc-tls-cert and --grpc-tls-key it is served over TLS, the files read
again every --reload-interval when they change; --grpc-tls-client-ca
requires a client certificate signed by its CAs, --grpc-tls-client-san one
valid for that name.

State is kept in memory (one instance needs nothing else), or in Redis with
--redis URL so that every instance shares one count:
  redis://[user:password@]host:port[/db]    one server (rediss:// for TLS)
  redis+cluster://host:port,host:port       a Redis Cluster (rediss+cluster://)
The password is better given with --redis-password-file or $REDIS_PASSWORD
than in the URL, where every user of the machine can read it. Over TLS,
--redis-tls-cert and --redis-tls-key present a client certificate and
--redis-tls-ca names the CAs to trust.
A store that fails or takes longer than --store-timeout answers gRPC
UNAVAILABLE at once, so that Envoy's failure_mode_deny decides. A Redis
that answers but is set up wrong (a wrong password or database, a cluster
URL for a single server or the reverse, a replica) stops the command at
start with exit status 2; one that does not answer yet is a warning.

The configuration files are read again when a file under PATH changes
(looked at every --reload-interval) and on SIGHUP. A change is loaded once
it reads the same at two looks in a row, or at once when its files were
last modified before the previous look, so that a file still being
written is never served half; SIGHUP loads what the files hold at once.
Only regular files are read (a named pipe, a device or a socket is
refused), each at most 16 MiB and 64 MiB in all, within 10 s. A
configuration that does not load keeps the previous one, says why on
standard error and is counted (config_load_error). --check loads them once
and exits: 0 when they are valid, else 2 with one line naming the file and
the problem.

What one caller can cost is bounded (docs/rls.md, "Bounds"): a call with
more than --max-descriptors descriptors is answered INVALID_ARGUMENT at
once; a descriptor longer than --max-descriptor-bytes is counted under a
digest of it; the memory store keeps at most --max-keys counters and
--max-bytes; the metric series named by requests stop at --metric-series
and --metric-label-bytes (past them they are counted under "(other)").
A client holds at most --max-conns-per-client connections to the service
(gRPC, HTTP and metrics together); an idle HTTP connection is closed after
--idle-timeout, and a /json body that stalls for --read-timeout is cut off
(408).

Where a flag is not given, the reference's environment variables are read,
so that a deployment of envoyproxy/ratelimit keeps its manifests:
  --config   RUNTIME_ROOT/RUNTIME_SUBDIRECTORY/RUNTIME_APPDIRECTORY
             (defaults /srv/runtime_data/current, "", config)
  --xds      CONFIG_GRPC_XDS_SERVER_URL when CONFIG_TYPE=GRPC_XDS_SOTW
             (default localhost:18000); --xds-node-id CONFIG_GRPC_XDS_NODE_ID,
             --xds-tls-cert, -key, -ca, -san CONFIG_GRPC_XDS_CLIENT_TLS_CERT,
             _KEY, CONFIG_GRPC_XDS_SERVER_TLS_CACERT, _SAN (with
             CONFIG_GRPC_XDS_SERVER_USE_TLS), --force-start
             FORCE_START_WITHOUT_INITIAL_CONFIG; and, with no flag of their
             own, CONFIG_GRPC_XDS_NODE_METADATA,
             CONFIG_GRPC_XDS_CLIENT_ADDITIONAL_HEADERS, XDS_CLIENT_BACKOFF_*,
             CONFIG_GRPC_XDS_SERVER_CONNECT_RETRY_INTERVAL,
             XDS_CLIENT_MAX_MSG_SIZE_IN_BYTES
  --grpc     GRPC_UDS, else GRPC_HOST:GRPC_PORT     --http  HOST:PORT
  --grpc-tls-cert, -key, -client-ca, -client-san   GRPC_SERVER_TLS_CERT,
             _KEY, GRPC_CLIENT_TLS_CACERT, _SAN (with GRPC_SERVER_USE_TLS)
  --grpc-max-connection-age, -grace   GRPC_MAX_CONNECTION_AGE, _GRACE
  --redis    REDIS_URL with REDIS_SOCKET_TYPE (tcp or unix), REDIS_TYPE
             (single, cluster or sentinel), REDIS_AUTH ([user:]password)
             and REDIS_TLS; without REDIS_URL, the memory store
  --redis-tls-cert, -key, -ca, -skip-hostname-verification
             REDIS_TLS_CLIENT_CERT, _KEY, REDIS_TLS_CACERT,
             REDIS_TLS_SKIP_HOSTNAME_VERIFICATION
  --metrics  PROMETHEUS_ADDR when USE_PROMETHEUS=true (at PROMETHEUS_PATH,
             /metrics by default)
  --metrics-mapping      PROMETHEUS_MAPPER_YAML
  --response-headers     LIMIT_RESPONSE_HEADERS_ENABLED
  --merge-domains        MERGE_DOMAIN_CONFIG
  --count-only-admitted  STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT
  --refusal-cache        LOCAL_CACHE_SIZE_IN_BYTES / 128 (at least 4096)
  --store-timeout        REDIS_TIMEOUT
and, with no flag of their own: LIMIT_LIMIT_HEADER, LIMIT_REMAINING_HEADER,
LIMIT_RESET_HEADER, NEAR_LIMIT_RATIO, SHADOW_MODE, CACHE_KEY_PREFIX and
HEALTHY_WITH_AT_LEAST_ONE_CONFIG_LOADED. GRPC_SERVER_TLS_CA_CERT, which
Envoy Gateway sets and the reference does not read, is ignored as the
reference ignores it. With one of RUNTIME_ROOT, CONFIG_TYPE,
REDIS_SOCKET_TYPE, BACKEND_TYPE or USE_STATSD set, "ratelimit" with no
arguments runs "ratelimit rls", as the reference's image is started.
Each other flag but --check, a setting the reference does not have, is
read from RLS_ and its name in capitals when not given (RLS_IETF_HEADERS=
true, RLS_MAX_KEYS=100000), for a container run without arguments.

--metrics serves the reference's Prometheus series, named as its default
statsd_exporter mapping names them (ratelimit_service_rate_limit_total_hits
{domain,key1,key2}, _over_limit, _near_limit, ...) or as the mapping file
of --metrics-mapping says, with Go's runtime and process collectors.

SIGTERM makes /healthcheck answer 500 and the gRPC health service report
NOT_SERVING, keeps serving for --drain (6 s) so that load balancers and
Kubernetes see it and move callers away, then stops accepting calls and
lets the calls in flight finish (at most 30 s) before exiting; a second
signal ends the drain window at once. SIGINT (Ctrl-C) skips the window.

Examples:
  ratelimit rls --config /etc/ratelimit/config
  ratelimit rls --config config.yaml --redis redis://redis:6379/0 --metrics :9090
  ratelimit rls --config /etc/ratelimit/config --check
  ratelimit rls --xds envoy-gateway:18001 --xds-node-id envoy-ratelimit \
    --xds-tls-cert /certs/tls.crt --xds-tls-key /certs/tls.key --xds-tls-ca /certs/ca.crt

Exit status: 0 after a clean shutdown (or a valid --check), 1 if serving
fails (an address is taken), 2 for bad flags, an invalid configuration or a
Redis that is set up wrong.

Flags:
`

// rlsConfig is what the flags and the environment of rls describe.
type rlsConfig struct {
	configPath    string
	configFromEnv bool // configPath came from RUNTIME_* or their defaults
	grpcAddr      string
	httpAddr      string
	metricsAddr   string
	metricsPath   string // "": metrics.DefaultPath
	metricsMapper string // a statsd_exporter mapping file; "": the reference's default mapping
	// mapperOptional: the mapping file came from PROMETHEUS_MAPPER_YAML,
	// which Envoy Gateway always sets but mounts from an optional
	// ConfigMap: absent, the default mapping is used, with a warning.
	mapperOptional    bool
	redisURL          string // as given; "" for the memory store
	redisPasswordFile string
	newRedis          func() redis.UniversalClient
	redisWhere        string
	storeTimeout      time.Duration
	reloadInterval    time.Duration
	responseHeaders   bool
	headerNames       [3]string // the reference's header names; "" for the defaults
	ietfHeaders       bool
	countOnlyAdmitted bool
	nearLimitRatio    float32 // 0: the default
	shadowMode        bool
	keyPrefix         string
	refusalCache      int
	mergeDomains      bool
	maxKeys           int
	check             bool

	xds              xdsSettings   // url "" : the configuration comes from files
	healthWithConfig bool          // HEALTHY_WITH_AT_LEAST_ONE_CONFIG_LOADED
	grpc             grpcSettings  // TLS and connection ages
	redisTLS         redisflag.TLS // the --redis-tls-* flags
	redisCert        *tlsfiles.KeyPair

	// Bounds on what one caller can cost (docs/rls.md, "Bounds").
	maxDescriptors     int
	maxDescriptorBytes int64
	maxBytes           int64 // memory store
	metricSeries       int
	metricLabelBytes   int64

	conns serve.HTTPFlags // what one client may hold of the servers
	drain time.Duration
}

// Defaults of the reference (src/settings/settings.go).
const (
	defaultRuntimeRoot   = "/srv/runtime_data/current"
	defaultRuntimeAppDir = "config"
	defaultPromAddr      = ":9090"
)

// Summary is rls's line in the list of commands.
const Summary = "serve Envoy's global rate limit service (envoyproxy/ratelimit's configuration, memory or Redis)"

// Run runs `ratelimit rls` with args (what follows "rls" on the command
// line) and returns its exit status.
func Run(args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("rls", flag.ContinueOnError)
	fs.SetOutput(stderr)
	c := &rlsConfig{}
	var rf redisflag.Flags
	c.register(fs, &rf)
	fs.Usage = func() {
		fmt.Fprint(fs.Output(), rlsUsage)
		fs.PrintDefaults()
	}
	words, done, status := command.ParseFlags(fs, args, true, stdout, stderr)
	if done {
		return status
	}
	const prefix = "ratelimit rls"
	if len(words) > 0 {
		fmt.Fprintf(stderr, "%s: unexpected argument %q (the configuration is given with --config PATH)\n", prefix, words[0])
		return command.ExitUsage
	}
	if err := c.settle(fs, &rf, os.LookupEnv); err != nil {
		fmt.Fprintf(stderr, "%s: %v\n", prefix, err)
		return command.ExitUsage
	}
	if c.check {
		return c.runCheck(stdout, stderr)
	}
	ctx, stop := serve.SignalContext()
	defer stop()
	return c.serve(ctx, stdout, stderr)
}

// settle completes c, whose flags fs has parsed, from the environment
// (lookup is os.LookupEnv): the additions' variables (additionsFromEnv),
// then the reference's (resolve).
func (c *rlsConfig) settle(fs *flag.FlagSet, rf *redisflag.Flags, lookup lookupFunc) error {
	c.redisPasswordFile = rf.PasswordFile
	given := command.Given(fs)
	fromEnv, err := additionsFromEnv(fs, given, lookup)
	if err != nil {
		return err
	}
	return fromAddition(c.resolve(given, rf.URL, lookup), fromEnv)
}

// register defines rls's flags on fs, into c and rf, with their defaults.
func (c *rlsConfig) register(fs *flag.FlagSet, rf *redisflag.Flags) {
	fs.StringVar(&c.configPath, "config", "", "the configuration: a YAML `PATH` or a directory of them")
	fs.StringVar(&c.grpcAddr, "grpc", ":8081", "serve ShouldRateLimit (gRPC) on this `address`: host:port, or unix:PATH for a Unix socket")
	fs.StringVar(&c.httpAddr, "http", ":8080", "serve POST /json and GET /healthcheck on this `address`")
	rf.Register(fs, "keep the counts in Redis at `URL`, shared by every instance (default: in memory)")
	fs.StringVar(&c.metricsAddr, "metrics", "", "serve Prometheus metrics on this `address` at /metrics (or PROMETHEUS_PATH)")
	fs.StringVar(&c.metricsMapper, "metrics-mapping", "", "name the metrics with this statsd_exporter mapping `file` instead of the reference's default mapping")
	fs.DurationVar(&c.storeTimeout, "store-timeout", rls.DefaultStoreTimeout, "answer UNAVAILABLE when the store takes longer than this `duration` (else $REDIS_TIMEOUT)")
	fs.DurationVar(&c.reloadInterval, "reload-interval", time.Second, "look for changes under --config this often")
	fs.BoolVar(&c.responseHeaders, "response-headers", false, "add the reference's RateLimit-Limit, -Remaining and -Reset to response_headers_to_add")
	fs.BoolVar(&c.ietfHeaders, "ietf-headers", false, "add the IETF RateLimit-Policy and RateLimit fields (and Retry-After when over the limit) to response_headers_to_add")
	fs.BoolVar(&c.countOnlyAdmitted, "count-only-admitted", false, "the reference's fixed windows count only the hits they admit (the reference counts refused hits too)")
	fs.IntVar(&c.refusalCache, "refusal-cache", 0, "remember up to this many over-limit counters in this process until their window ends, answering them without asking the store (0: off)")
	fs.BoolVar(&c.mergeDomains, "merge-domains", false, "let several files configure one domain (the reference's MERGE_DOMAIN_CONFIG)")
	fs.IntVar(&c.maxKeys, "max-keys", throttle.DefaultMaxKeys, "without --redis: the most counters kept, for the windows and for the additions each (past it the least recently used addition's key is forgotten, or a window's counter at random); ended windows are dropped")
	c.maxBytes, c.maxDescriptorBytes, c.metricLabelBytes = rls.DefaultMaxBytes, rls.DefaultMaxDescriptorBytes, rls.DefaultMaxMetricLabelBytes
	fs.Var(command.Size{P: &c.maxBytes, Min: rls.MinMaxBytes, Max: math.MaxInt}, "max-bytes", "without --redis: the most bytes the counters take, for the windows and for the additions each (past it, counters are forgotten as past --max-keys)")
	fs.IntVar(&c.maxDescriptors, "max-descriptors", rls.DefaultMaxDescriptors, "answer INVALID_ARGUMENT at once to a call with more descriptors than this")
	fs.Var(command.Size{P: &c.maxDescriptorBytes, Min: 0, Max: rls.MaxDescriptorBytesLimit}, "max-descriptor-bytes", "count a descriptor whose entries take more than this `size` in a store key under a digest of them (0: every descriptor)")
	fs.IntVar(&c.metricSeries, "metric-series", rls.DefaultMaxMetricSeries, "the most metric series that requests name (detailed_metric values, unknown domains), each kind apart; past it they are counted under \"(other)\"")
	fs.Var(command.Size{P: &c.metricLabelBytes, Min: 1, Max: math.MaxInt}, "metric-label-bytes", "the most bytes the labels of those series take, each kind apart (and a 256th of it one label); past it they are counted under \"(other)\"")
	c.conns.Register(fs, "")
	serve.RegisterDrain(fs, &c.drain, serve.DefaultDrain, true)
	fs.BoolVar(&c.check, "check", false, "validate the configuration and exit: 0 if valid, 2 with the file and the problem if not")
	registerXDSFlags(fs, &c.xds)
	registerGRPCFlags(fs, &c.grpc)
	c.redisTLS.Register(fs)
}

// resolve fills what the flags left out from the reference's environment
// variables (lookup is os.LookupEnv) and checks every value. given holds
// the names of the flags on the command line.
func (c *rlsConfig) resolve(given map[string]bool, redisURL string, lookup func(string) (string, bool)) error {
	env := func(name string) string { v, _ := lookup(name); return v }
	if err := c.resolveSource(given, lookup); err != nil {
		return err
	}
	if c.xds.url == "" && !given["config"] {
		root := cmp.Or(env("RUNTIME_ROOT"), defaultRuntimeRoot)
		app := cmp.Or(env("RUNTIME_APPDIRECTORY"), defaultRuntimeAppDir)
		c.configPath = filepath.Join(root, env("RUNTIME_SUBDIRECTORY"), app)
		c.configFromEnv = true
	}
	if c.xds.url == "" && c.configPath == "" {
		return errors.New("--config needs a PATH (a YAML file or a directory of them)")
	}
	var err error
	if c.healthWithConfig, err = envBool(lookup, "HEALTHY_WITH_AT_LEAST_ONE_CONFIG_LOADED"); err != nil {
		return err
	}
	if err := c.resolveGRPC(given, lookup); err != nil {
		return err
	}
	if !given["http"] {
		if c.httpAddr, err = envAddr(lookup, "HOST", "PORT", c.httpAddr); err != nil {
			return err
		}
	}
	if !given["metrics"] {
		if on, err := envBool(lookup, "USE_PROMETHEUS"); err != nil {
			return err
		} else if on {
			c.metricsAddr = cmp.Or(env("PROMETHEUS_ADDR"), defaultPromAddr)
		}
	}
	if !given["metrics-mapping"] {
		c.metricsMapper = env("PROMETHEUS_MAPPER_YAML")
		c.mapperOptional = c.metricsMapper != ""
	}
	if p := env("PROMETHEUS_PATH"); p != "" {
		if !strings.HasPrefix(p, "/") {
			return fmt.Errorf("PROMETHEUS_PATH=%q: want a path starting with /", p)
		}
		c.metricsPath = p
	}
	if !given["response-headers"] {
		if c.responseHeaders, err = envBool(lookup, "LIMIT_RESPONSE_HEADERS_ENABLED"); err != nil {
			return err
		}
	}
	c.headerNames = [3]string{env("LIMIT_LIMIT_HEADER"), env("LIMIT_REMAINING_HEADER"), env("LIMIT_RESET_HEADER")}
	if c.shadowMode, err = envBool(lookup, "SHADOW_MODE"); err != nil {
		return err
	}
	c.keyPrefix = env("CACHE_KEY_PREFIX")
	if v := env("NEAR_LIMIT_RATIO"); v != "" {
		r, err := strconv.ParseFloat(v, 32)
		if err != nil || !(r > 0 && r <= 1) {
			return fmt.Errorf("NEAR_LIMIT_RATIO=%q: want a number above 0, at most 1", v)
		}
		c.nearLimitRatio = float32(r)
	}
	if !given["count-only-admitted"] {
		if c.countOnlyAdmitted, err = envBool(lookup, "STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT"); err != nil {
			return err
		}
	}
	if c.refusalCache < 0 {
		return fmt.Errorf("--refusal-cache %d: want 0 (off) or a number of counters", c.refusalCache)
	}
	refusalCacheFrom := "--refusal-cache"
	if !given["refusal-cache"] {
		bytes := 0
		if err := envInt(lookup, "LOCAL_CACHE_SIZE_IN_BYTES", &bytes); err != nil {
			return err
		}
		if bytes < 0 {
			return fmt.Errorf("LOCAL_CACHE_SIZE_IN_BYTES=%d: want 0 (off) or a size in bytes", bytes)
		}
		if bytes > 0 {
			c.refusalCache, refusalCacheFrom = refusalCacheKeys(bytes), "LOCAL_CACHE_SIZE_IN_BYTES"
		}
	}
	if !given["merge-domains"] {
		if c.mergeDomains, err = envBool(lookup, "MERGE_DOMAIN_CONFIG"); err != nil {
			return err
		}
	}
	for _, a := range []struct{ flag, addr string }{{"--http", c.httpAddr}, {"--metrics", c.metricsAddr}} {
		if a.addr == "" && a.flag == "--metrics" {
			continue
		}
		if _, _, err := net.SplitHostPort(a.addr); err != nil {
			return fmt.Errorf("%s %q: want host:port or :port", a.flag, a.addr)
		}
	}
	storeTimeoutFrom := "--store-timeout " + c.storeTimeout.String()
	if !given["store-timeout"] {
		// The reference's bound on each Redis operation (10 s there when
		// unset, a wait its users have asked to shorten) bounds a call's
		// store time here: where no flag can be given (Envoy Gateway
		// runs the image without arguments), it is how to set it.
		if err := envDuration(lookup, "REDIS_TIMEOUT", &c.storeTimeout); err != nil {
			return err
		}
		storeTimeoutFrom = "REDIS_TIMEOUT=" + env("REDIS_TIMEOUT")
	}
	if c.storeTimeout <= 0 {
		return fmt.Errorf("%s: want a positive duration, e.g. 50ms", storeTimeoutFrom)
	}
	if c.reloadInterval <= 0 {
		return fmt.Errorf("--reload-interval %v: want a positive duration, e.g. 1s", c.reloadInterval)
	}
	if c.maxKeys < 1 {
		return fmt.Errorf("--max-keys %d: want at least 1", c.maxKeys)
	}
	if c.maxDescriptors < 1 {
		return fmt.Errorf("--max-descriptors %d: want at least 1", c.maxDescriptors)
	}
	if c.metricSeries < 1 {
		return fmt.Errorf("--metric-series %d: want at least 1", c.metricSeries)
	}
	if err := c.conns.Check(); err != nil {
		return err
	}
	if err := serve.CheckDrain(c.drain); err != nil {
		return err
	}
	if given["redis"] {
		if redisURL == "" {
			return errors.New("--redis needs a URL, e.g. redis://127.0.0.1:6379/0")
		}
		c.redisURL = redisURL
		rf := redisflag.Flags{URL: redisURL, PasswordFile: c.redisPasswordFile, TLS: c.redisTLS}
		if c.newRedis, c.redisWhere, c.redisCert, err = rf.Open(env); err != nil {
			return err
		}
	} else if c.redisPasswordFile != "" {
		return redisflag.ErrPasswordFileAlone
	} else if u := env("REDIS_URL"); u != "" {
		c.redisURL = u
		if c.newRedis, c.redisWhere, c.redisCert, err = redisFromEnv(u, c.redisTLS, given, lookup); err != nil {
			return err
		}
	} else if c.redisTLS.Given() {
		return errors.New("the --redis-tls-* flags apply with --redis rediss://... (or REDIS_URL)")
	}
	if err := checkUnsupported(lookup, c.redisURL != ""); err != nil {
		return err
	}
	if c.refusalCache > 0 && c.redisURL == "" {
		return fmt.Errorf("%s applies to Redis: the memory store has no round trip to save", refusalCacheFrom)
	}
	for _, name := range []string{"max-keys", "max-bytes"} {
		if given[name] && c.redisURL != "" {
			return fmt.Errorf("--%s applies to the memory store; Redis bounds its memory with key expiry and maxmemory", name)
		}
	}
	return nil
}

// envAddr is host:port from two of the reference's variables, or def when
// neither is set. The reference listens on 0.0.0.0 by default: so do we
// (an empty host).
func envAddr(lookup func(string) (string, bool), hostVar, portVar, def string) (string, error) {
	host, hostSet := lookup(hostVar)
	port, portSet := lookup(portVar)
	if !hostSet && !portSet {
		return def, nil
	}
	if !portSet {
		_, p, err := net.SplitHostPort(def)
		if err != nil {
			return "", err
		}
		port = p
	} else if n, err := strconv.Atoi(port); err != nil || n < 0 || n > 65535 {
		return "", fmt.Errorf("%s=%q: want a port number", portVar, port)
	}
	if host == "0.0.0.0" {
		host = ""
	}
	return net.JoinHostPort(host, port), nil
}
