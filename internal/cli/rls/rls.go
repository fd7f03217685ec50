// Package rls is `ratelimit rls`: Envoy's global rate limit service
// (package rls of the library) served over gRPC and the reference's HTTP
// face, configured as envoyproxy/ratelimit is (its YAML files, reloaded as
// they change, and its environment variables), with its counts in memory
// or in Redis.
package rls

import (
	"cmp"
	"crypto/tls"
	"errors"
	"flag"
	"fmt"
	"io"
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
	"github.com/smoothrate/ratelimit/rls"
	"github.com/smoothrate/ratelimit/throttle"
)

const rlsUsage = `Usage: ratelimit rls --config PATH [flags]

Rls serves Envoy's global rate limit service (gRPC
envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit) from the
configuration format of envoyproxy/ratelimit, so that Envoy, Istio, Contour,
Emissary or Gloo can ask it whether a request is over its limit. PATH is a
YAML file or a directory of them (one domain per file); docs/rls.md
describes the format, our additions to it and a complete envoy.yaml.

It also answers the reference's HTTP face on --http: POST /json with a
RateLimitRequest in JSON answers 200 or 429 with the RateLimitResponse in
JSON (503 when the store failed), and GET /healthcheck answers OK.

State is kept in memory (one instance needs nothing else), or in Redis with
--redis URL so that every instance shares one count:
  redis://[user:password@]host:port[/db]    one server (rediss:// for TLS)
  redis+cluster://host:port,host:port       a Redis Cluster (rediss+cluster://)
The password is better given with --redis-password-file or $REDIS_PASSWORD
than in the URL, where every user of the machine can read it.
A store that fails or takes longer than --store-timeout answers gRPC
UNAVAILABLE at once, so that Envoy's failure_mode_deny decides. A Redis
that answers but is set up wrong (a wrong password or database, a cluster
URL for a single server or the reverse) stops the command at start with
exit status 2; one that does not answer yet is a warning.

The configuration is read again when a file under PATH changes (polled
every --reload-interval) and on SIGHUP; a configuration that does not load
keeps the previous one, says why on standard error and is counted
(config_load_error). --check loads it once and exits: 0 when it is valid,
else 2 with one line naming the file and the problem.

Where a flag is not given, the reference's environment variables are read,
so that a deployment of envoyproxy/ratelimit keeps its manifests:
  --config   RUNTIME_ROOT/RUNTIME_SUBDIRECTORY/RUNTIME_APPDIRECTORY
             (defaults /srv/runtime_data/current, "", config)
  --grpc     GRPC_HOST:GRPC_PORT          --http     HOST:PORT
  --redis    REDIS_URL with REDIS_SOCKET_TYPE (tcp or unix), REDIS_TYPE
             (single, cluster or sentinel), REDIS_AUTH ([user:]password)
             and REDIS_TLS; without REDIS_URL, the memory store
  --metrics  PROMETHEUS_ADDR when USE_PROMETHEUS=true (at PROMETHEUS_PATH,
             /metrics by default)
  --metrics-mapping    PROMETHEUS_MAPPER_YAML
  --response-headers   LIMIT_RESPONSE_HEADERS_ENABLED
  --merge-domains      MERGE_DOMAIN_CONFIG
and, with no flag of their own: LIMIT_LIMIT_HEADER, LIMIT_REMAINING_HEADER,
LIMIT_RESET_HEADER, NEAR_LIMIT_RATIO, SHADOW_MODE and CACHE_KEY_PREFIX.

--metrics serves the reference's Prometheus series, named as its default
statsd_exporter mapping names them (ratelimit_service_rate_limit_total_hits
{domain,key1,key2}, _over_limit, _near_limit, ...) or as the mapping file
of --metrics-mapping says, with Go's runtime and process collectors.

SIGINT or SIGTERM make /healthcheck and the gRPC health service report
failure, stop accepting calls and let calls in flight finish (at most
30 s) before exiting.

Examples:
  ratelimit rls --config /etc/ratelimit/config
  ratelimit rls --config config.yaml --redis redis://redis:6379/0 --metrics :9090
  ratelimit rls --config /etc/ratelimit/config --check

Exit status: 0 after a clean shutdown (or a valid --check), 1 if serving
fails (an address is taken), 2 for bad flags, an invalid configuration or a
Redis that is set up wrong.

Flags:
`

// rlsConfig is what the flags and the environment of rls describe.
type rlsConfig struct {
	configPath        string
	configFromEnv     bool // configPath came from RUNTIME_* or their defaults
	grpcAddr          string
	httpAddr          string
	metricsAddr       string
	metricsPath       string // "": metrics.DefaultPath
	metricsMapper     string // a statsd_exporter mapping file; "": the reference's default mapping
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
	fs.StringVar(&c.configPath, "config", "", "the configuration: a YAML `PATH` or a directory of them")
	fs.StringVar(&c.grpcAddr, "grpc", ":8081", "serve ShouldRateLimit (gRPC) on this `address`")
	fs.StringVar(&c.httpAddr, "http", ":8080", "serve POST /json and GET /healthcheck on this `address`")
	var rf redisflag.Flags
	rf.Register(fs, "keep the counts in Redis at `URL`, shared by every instance (default: in memory)")
	fs.StringVar(&c.metricsAddr, "metrics", "", "serve Prometheus metrics on this `address` at /metrics (or PROMETHEUS_PATH)")
	fs.StringVar(&c.metricsMapper, "metrics-mapping", "", "name the metrics with this statsd_exporter mapping `file` instead of the reference's default mapping")
	fs.DurationVar(&c.storeTimeout, "store-timeout", rls.DefaultStoreTimeout, "answer UNAVAILABLE when the store takes longer than this `duration`")
	fs.DurationVar(&c.reloadInterval, "reload-interval", time.Second, "look for changes under --config this often")
	fs.BoolVar(&c.responseHeaders, "response-headers", false, "add the reference's RateLimit-Limit, -Remaining and -Reset to response_headers_to_add")
	fs.BoolVar(&c.ietfHeaders, "ietf-headers", false, "add the IETF RateLimit-Policy and RateLimit fields (and Retry-After when over the limit) to response_headers_to_add")
	fs.BoolVar(&c.countOnlyAdmitted, "count-only-admitted", false, "the reference's fixed windows count only the hits they admit (the reference counts refused hits too)")
	fs.IntVar(&c.refusalCache, "refusal-cache", 0, "remember up to this many over-limit counters in this process until their window ends, answering them without asking the store (0: off)")
	fs.BoolVar(&c.mergeDomains, "merge-domains", false, "let several files configure one domain (the reference's MERGE_DOMAIN_CONFIG)")
	fs.IntVar(&c.maxKeys, "max-keys", throttle.DefaultMaxKeys, "without --redis: the most keys the additions' algorithms keep (the least recently used are forgotten first); the reference's windows are dropped when they end")
	fs.BoolVar(&c.check, "check", false, "validate the configuration and exit: 0 if valid, 2 with the file and the problem if not")
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
	c.redisPasswordFile = rf.PasswordFile
	if err := c.resolve(command.Given(fs), rf.URL, os.LookupEnv); err != nil {
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

// resolve fills what the flags left out from the reference's environment
// variables (lookup is os.LookupEnv) and checks every value. given holds
// the names of the flags on the command line.
func (c *rlsConfig) resolve(given map[string]bool, redisURL string, lookup func(string) (string, bool)) error {
	env := func(name string) string { v, _ := lookup(name); return v }
	if !given["config"] {
		root := cmp.Or(env("RUNTIME_ROOT"), defaultRuntimeRoot)
		app := cmp.Or(env("RUNTIME_APPDIRECTORY"), defaultRuntimeAppDir)
		c.configPath = filepath.Join(root, env("RUNTIME_SUBDIRECTORY"), app)
		c.configFromEnv = true
	}
	if c.configPath == "" {
		return errors.New("--config needs a PATH (a YAML file or a directory of them)")
	}
	var err error
	if !given["grpc"] {
		if c.grpcAddr, err = envAddr(lookup, "GRPC_HOST", "GRPC_PORT", c.grpcAddr); err != nil {
			return err
		}
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
	if c.refusalCache < 0 {
		return fmt.Errorf("--refusal-cache %d: want 0 (off) or a number of counters", c.refusalCache)
	}
	if !given["merge-domains"] {
		if c.mergeDomains, err = envBool(lookup, "MERGE_DOMAIN_CONFIG"); err != nil {
			return err
		}
	}
	for _, a := range []struct{ flag, addr string }{{"--grpc", c.grpcAddr}, {"--http", c.httpAddr}, {"--metrics", c.metricsAddr}} {
		if a.addr == "" && a.flag == "--metrics" {
			continue
		}
		if _, _, err := net.SplitHostPort(a.addr); err != nil {
			return fmt.Errorf("%s %q: want host:port or :port", a.flag, a.addr)
		}
	}
	if c.storeTimeout <= 0 {
		return fmt.Errorf("--store-timeout %v: want a positive duration, e.g. 50ms", c.storeTimeout)
	}
	if c.reloadInterval <= 0 {
		return fmt.Errorf("--reload-interval %v: want a positive duration, e.g. 1s", c.reloadInterval)
	}
	if c.maxKeys < 1 {
		return fmt.Errorf("--max-keys %d: want at least 1", c.maxKeys)
	}
	if given["redis"] {
		if redisURL == "" {
			return errors.New("--redis needs a URL, e.g. redis://127.0.0.1:6379/0")
		}
		c.redisURL = redisURL
		rf := redisflag.Flags{URL: redisURL, PasswordFile: c.redisPasswordFile}
		if c.newRedis, c.redisWhere, err = rf.Client(env); err != nil {
			return err
		}
	} else if c.redisPasswordFile != "" {
		return redisflag.ErrPasswordFileAlone
	} else if u := env("REDIS_URL"); u != "" {
		c.redisURL = u
		if c.newRedis, c.redisWhere, err = redisFromEnv(u, lookup); err != nil {
			return err
		}
	}
	if err := checkUnsupported(lookup, c.redisURL != ""); err != nil {
		return err
	}
	if c.refusalCache > 0 && c.redisURL == "" {
		return errors.New("--refusal-cache applies to Redis: the memory store has no round trip to save")
	}
	if given["max-keys"] && c.redisURL != "" {
		return errors.New("--max-keys applies to the memory store; Redis bounds its memory with key expiry")
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

// envBool reads a boolean variable as the reference's envconfig does
// (strconv.ParseBool); unset or empty is false.
func envBool(lookup func(string) (string, bool), name string) (bool, error) {
	v, ok := lookup(name)
	if !ok || v == "" {
		return false, nil
	}
	b, err := strconv.ParseBool(v)
	if err != nil {
		return false, fmt.Errorf("%s=%q: want true or false", name, v)
	}
	return b, nil
}

// redisFromEnv builds the Redis client the reference's variables describe:
// REDIS_URL is an address (host:port, or a socket path when
// REDIS_SOCKET_TYPE is unix, the reference's default), a comma-separated
// list of them for REDIS_TYPE=cluster, or the master's name followed by the
// sentinels' addresses for REDIS_TYPE=sentinel. A REDIS_URL in our own URL
// form (redis://, redis+cluster://) is read as --redis reads it.
func redisFromEnv(u string, lookup func(string) (string, bool)) (func() redis.UniversalClient, string, error) {
	env := func(name string) string { v, _ := lookup(name); return v }
	if strings.Contains(u, "://") {
		nc, where, err := redisflag.ParseURL(u, env("REDIS_PASSWORD"))
		if err != nil {
			return nil, "", fmt.Errorf("REDIS_URL %q: %v", redisflag.Redact(u), err)
		}
		return nc, where, nil
	}
	socket := strings.ToLower(cmp.Or(env("REDIS_SOCKET_TYPE"), "unix"))
	if socket != "tcp" && socket != "unix" {
		return nil, "", fmt.Errorf("REDIS_SOCKET_TYPE=%q: want tcp or unix", env("REDIS_SOCKET_TYPE"))
	}
	user, pass := "", env("REDIS_AUTH")
	if u, p, ok := strings.Cut(pass, ":"); ok {
		user, pass = u, p
	}
	useTLS, err := envBool(lookup, "REDIS_TLS")
	if err != nil {
		return nil, "", err
	}
	var tlsConf *tls.Config
	if useTLS {
		tlsConf = &tls.Config{MinVersion: tls.VersionTLS12}
	}
	addrs := strings.Split(u, ",")
	for _, a := range addrs {
		if a == "" {
			return nil, "", fmt.Errorf("REDIS_URL=%q: an empty address in the list", u)
		}
	}
	switch typ := strings.ToLower(cmp.Or(env("REDIS_TYPE"), "single")); typ {
	case "single":
		if len(addrs) != 1 {
			return nil, "", fmt.Errorf("REDIS_URL=%q: REDIS_TYPE single takes one address (REDIS_TYPE=cluster for a list)", u)
		}
		opt := &redis.Options{Network: socket, Addr: u, Username: user, Password: pass, TLSConfig: tlsConf}
		return redisflag.NewClient(opt), u, nil
	case "cluster":
		if socket != "tcp" {
			return nil, "", errors.New("REDIS_TYPE=cluster needs REDIS_SOCKET_TYPE=tcp")
		}
		opt := &redis.ClusterOptions{Addrs: addrs, Username: user, Password: pass, TLSConfig: tlsConf}
		return redisflag.NewClusterClient(opt), u, nil
	case "sentinel":
		if len(addrs) < 2 {
			return nil, "", fmt.Errorf("REDIS_URL=%q: REDIS_TYPE sentinel wants the master's name and the sentinels' addresses: name,host:port,...", u)
		}
		opt := &redis.FailoverOptions{MasterName: addrs[0], SentinelAddrs: addrs[1:], Username: user, Password: pass,
			TLSConfig: tlsConf}
		return redisflag.NewFailoverClient(opt), "sentinel " + u, nil
	default:
		return nil, "", fmt.Errorf("REDIS_TYPE=%q: want single, cluster or sentinel", typ)
	}
}
