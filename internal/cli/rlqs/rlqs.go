// Package rlqs is `ratelimit rlqs`: Envoy's Rate Limit Quota Service
// (package rlqs of the library) served over gRPC, configured by one YAML
// file reloaded as it changes, alone or with replicas sharing each
// bucket's limit through Redis; /healthcheck on an HTTP address of its
// own, and Prometheus metrics from the server's counters.
package rlqs

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"os"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/smoothrate/ratelimit/internal/cli/command"
	"github.com/smoothrate/ratelimit/internal/cli/redisflag"
	"github.com/smoothrate/ratelimit/internal/cli/serve"
	"github.com/smoothrate/ratelimit/internal/tlsfiles"
	"github.com/smoothrate/ratelimit/rlqs"
)

const rlqsUsage = `Usage: ratelimit rlqs --config FILE [flags]

Rlqs serves Envoy's Rate Limit Quota Service (gRPC
envoy.service.rate_limit_quota.v3.RateLimitQuotaService) for Envoy's
rate_limit_quota HTTP filter: every Envoy decides each request itself
from a token bucket this server assigns it, and reports what it allowed
and denied every reporting interval; the server splits each bucket's limit
among the Envoys that report it, max-min fairly by their demands. FILE is
the YAML file of the buckets' limits; docs/rlqs.md describes it, the
bound the limits hold to, and a complete envoy.yaml.

One process serves alone. With --redis URL, every replica on that Redis
shares each bucket's limit among all their Envoys:
` + redisflag.URLForms + `The password is better given with --redis-password-file or $REDIS_PASSWORD
than in the URL, where every user of the machine can read it; a rediss://
URL takes a client certificate and CAs with the --redis-tls-* flags.
A Redis that answers but is set up wrong (a wrong password or database, a
cluster URL for a single server or the reverse) stops the command at start
with exit status 2; one that does not answer yet is a warning, and the
server starts: a bucket gets no assignment until a claim succeeds. When
Redis goes away later, each replica goes on with the shares it last had;
the outage's start, summaries and end are logged on standard error.

The file is read again when it changes (looked at every --reload-interval,
and loaded once it reads the same at two looks, so that a file being
written is not taken half-written) and at once on SIGHUP. A file that does
not load keeps the previous configuration, says why on standard error and
is counted (ratelimit_rlqs_config_loads_total{result="error"}). --check
loads it once and exits: 0 when it is valid, else 2 with one line naming
the file and the problem.

--http serves GET /healthcheck: OK while serving, 500 once stopping; the
gRPC port also answers the standard gRPC health service. --metrics serves
Prometheus metrics at /metrics.

SIGINT or SIGTERM stop it gracefully: every Envoy is sent its assignments
again with a time to live of 0, so that it falls back at once to its
expired-assignment behaviour (instead of running a share nobody renews),
its stream is ended, and with --redis the claims are given back to the
other replicas; a restarted server rebuilds the shares from the Envoys'
next reports.

The tuning flags (--settle-time, --allocation-interval, --store-timeout,
--server-id, --max-buckets-per-stream) are the library's options of the
same names; their defaults suit Envoys within a few milliseconds of the
server.

Examples:
  ratelimit rlqs --config rlqs.yaml
  ratelimit rlqs --config rlqs.yaml --redis redis://redis:6379/0 --metrics :9090
  ratelimit rlqs --config rlqs.yaml --check

Exit status: 0 after a clean shutdown (or a valid --check), 1 if serving
fails (an address is taken), 2 for bad flags, an invalid configuration or a
Redis that is set up wrong.

Flags:
`

// Summary is rlqs's line in the list of commands.
const Summary = "serve Envoy's Rate Limit Quota Service (fleet-wide limits the Envoys apply themselves; alone or on Redis)"

// rlqsConfig is what the flags of rlqs describe.
type rlqsConfig struct {
	configPath     string
	grpcAddr       string
	httpAddr       string
	metricsAddr    string
	redisURL       string // as given; "" alone
	newRedis       func() redis.UniversalClient
	redisWhere     string
	redisCert      *tlsfiles.KeyPair // a client certificate kept fresh
	redisTLSCert   string            // its file
	reloadInterval time.Duration
	settle         time.Duration
	allocation     time.Duration
	storeTimeout   time.Duration
	serverID       string
	maxPerStream   int
	maxStreams     int // per gRPC connection
	check          bool
	drain          time.Duration   // how long to serve on after SIGTERM, health failing
	conns          serve.HTTPFlags // what one client may hold of the servers
}

// Default addresses: the rate limit service's ports (rls: 8081 and 8080)
// with a 1 in front, so that both services can run on one host; docs/rlqs.md's
// envoy.yaml points at 18081.
const (
	defaultGRPC = ":18081"
	defaultHTTP = ":18080"
)

// Run runs `ratelimit rlqs` with args (what follows "rlqs" on the command
// line) and returns its exit status.
func Run(args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	c := &rlqsConfig{}
	var rf redisflag.Flags
	fs := c.flags(&rf)
	fs.SetOutput(stderr)
	words, done, status := command.ParseFlags(fs, args, true, stdout, stderr)
	if done {
		return status
	}
	if len(words) > 0 {
		fmt.Fprintf(stderr, "%s: unexpected argument %q (the configuration is given with --config FILE)\n", prefix, words[0])
		return command.ExitUsage
	}
	if err := c.resolve(command.Given(fs), rf, os.Getenv); err != nil {
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

// flags defines rlqs's flags, into c and rf.
func (c *rlqsConfig) flags(rf *redisflag.Flags) *flag.FlagSet {
	fs := flag.NewFlagSet("rlqs", flag.ContinueOnError)
	fs.StringVar(&c.configPath, "config", "", "the buckets' limits: a YAML `FILE` (docs/rlqs.md)")
	fs.StringVar(&c.grpcAddr, "grpc", defaultGRPC, "serve StreamRateLimitQuotas (gRPC) and the gRPC health service on this `address`")
	fs.StringVar(&c.httpAddr, "http", defaultHTTP, "serve GET /healthcheck on this `address`")
	rf.Register(fs, "share each bucket's limit with the replicas on the Redis at `URL` (default: this process alone)")
	rf.TLS.Register(fs)
	fs.StringVar(&c.metricsAddr, "metrics", "", "serve Prometheus metrics on this `address` at /metrics")
	fs.DurationVar(&c.reloadInterval, "reload-interval", time.Second, "look for a change of --config this often")
	fs.DurationVar(&c.settle, "settle-time", rlqs.DefaultSettleTime, "how long an assignment takes to reach its Envoy: a rate taken from one is given to another only after it (above the slowest Envoy's one-way latency)")
	fs.DurationVar(&c.allocation, "allocation-interval", rlqs.DefaultAllocationInterval, "compute the shares of buckets whose demand moved this often: the longest a report waits for the assignment it causes")
	fs.DurationVar(&c.storeTimeout, "store-timeout", rlqs.DefaultStoreTimeout, "with --redis: a claim that takes longer is an outage (the bucket keeps its last shares)")
	fs.StringVar(&c.serverID, "server-id", "", "with --redis: this replica's `name` among those sharing the Redis, unique to each (default: hostname-pid-start time)")
	fs.IntVar(&c.maxPerStream, "max-buckets-per-stream", rlqs.DefaultMaxBucketsPerStream, "most buckets one Envoy's stream holds at once: a new bucket past it gets no assignment (the Envoy's no-assignment behaviour) until one of its buckets is abandoned")
	c.conns.Register(fs, "")
	serve.RegisterMaxStreams(fs, &c.maxStreams)
	serve.RegisterDrain(fs, &c.drain, serve.DefaultDrain, true)
	fs.BoolVar(&c.check, "check", false, "validate the configuration and exit: 0 if valid, 2 with the file and the problem if not")
	fs.Usage = func() {
		fmt.Fprint(fs.Output(), rlqsUsage)
		fs.PrintDefaults()
	}
	return fs
}

// resolve checks the flags' values and reads --redis into a client maker.
// given holds the names of the flags on the command line; getenv reads
// $REDIS_PASSWORD.
func (c *rlqsConfig) resolve(given map[string]bool, rf redisflag.Flags, getenv func(string) string) error {
	if c.configPath == "" {
		return errors.New("--config needs a FILE (the buckets' limits, in YAML)")
	}
	for _, a := range []struct{ flag, addr string }{{"--grpc", c.grpcAddr}, {"--http", c.httpAddr}, {"--metrics", c.metricsAddr}} {
		if a.addr == "" && a.flag == "--metrics" {
			continue
		}
		if _, _, err := net.SplitHostPort(a.addr); err != nil {
			return fmt.Errorf("%s %q: want host:port or :port", a.flag, a.addr)
		}
	}
	if c.reloadInterval <= 0 {
		return fmt.Errorf("--reload-interval %v: want a positive duration, e.g. 1s", c.reloadInterval)
	}
	if err := c.conns.Check(); err != nil {
		return err
	}
	if err := serve.CheckMaxStreams(c.maxStreams); err != nil {
		return err
	}
	if err := serve.CheckDrain(c.drain); err != nil {
		return err
	}
	// The library's bounds, checked here so that the error names the
	// flag; rlqs.New checks --server-id.
	for _, d := range []struct {
		flag string
		v    time.Duration
	}{{"--settle-time", c.settle}, {"--allocation-interval", c.allocation}, {"--store-timeout", c.storeTimeout}} {
		if d.v <= 0 || d.v > time.Minute {
			return fmt.Errorf("%s %v: want a positive duration of at most a minute", d.flag, d.v)
		}
	}
	if c.maxPerStream < 1 {
		return fmt.Errorf("--max-buckets-per-stream %d: want 1 or more", c.maxPerStream)
	}
	if !given["redis"] {
		if rf.PasswordFile != "" {
			return redisflag.ErrPasswordFileAlone
		}
		if rf.TLS.Given() {
			return errors.New("the --redis-tls-* flags apply to a rediss:// --redis URL")
		}
		for _, f := range []string{"store-timeout", "server-id"} {
			if given[f] {
				return fmt.Errorf("--%s applies to replicas sharing a Redis: give --redis URL", f)
			}
		}
		return nil
	}
	if rf.URL == "" {
		return errors.New("--redis needs a URL, e.g. redis://127.0.0.1:6379/0")
	}
	c.redisURL = rf.URL
	var err error
	c.newRedis, c.redisWhere, c.redisCert, err = rf.Open(getenv)
	c.redisTLSCert = rf.TLS.CertFile
	return err
}
