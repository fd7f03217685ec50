package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log"
	"math"
	"net"
	"net/http"
	"net/netip"
	"net/url"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/smoothrate/ratelimit/distributed"
	"github.com/smoothrate/ratelimit/httplimit"
	"github.com/smoothrate/ratelimit/internal/netprefix"
	"github.com/smoothrate/ratelimit/internal/units"
	"github.com/smoothrate/ratelimit/throttle"
)

const proxyUsage = `Usage: ratelimit proxy --listen ADDR --limit COUNT/PERIOD [flags] TARGET_URL

Proxy serves HTTP on ADDR and forwards every request to TARGET_URL, unless
the client is over its limit: then it answers 429 Too Many Requests with
Retry-After, without bothering the target. Every response carries the IETF
RateLimit-Policy and RateLimit fields (docs/http.md says what they mean).

Limits: COUNT/PERIOD, PERIOD one of s, min, h, d (or second, minute, hour,
day) or a duration such as 10s or 1m30s: 100/min, 10/s, 5000/h, 20/15s.

Like nginx's limit_req, excess requests can be held instead of refused:
--burst K serves up to K at once, --queue Q holds up to Q more and sends
each on when the rate allows (nginx's rate=10r/s burst=5 nodelay is
--limit 10/s --burst 6; burst=6 delay=2 is --burst 3 --queue 4; burst=4 is
--burst 1 --queue 4; no burst is --burst 1). --status sets the refusal's
code (nginx's default is 503), --dry-run only counts and sets headers.
Several --limit all apply, atomically; the longest hold wins.

Clients are told apart by their IP address (IPv6 by /64), by a header
(--key header:X-Api-Key, falling back to the IP when it is missing), or not
at all but per route (--key route: the URL path). Behind a load balancer,
name it with --trusted-proxy: the client is then the rightmost address in
X-Forwarded-For that is not a trusted proxy. Without --trusted-proxy,
X-Forwarded-For is ignored (a client could write anything there).

The path is cleaned before it is keyed and forwarded (//a, /./a, /b/../a
and /%61 are all /a). The backend gets X-Forwarded-For, X-Real-IP,
X-Forwarded-Host, X-Forwarded-Proto and Forwarded as the proxy knows them:
what a client wrote there itself is replaced.

State is kept in memory (bounded: least recently seen clients are
forgotten first), or in Redis with --redis URL so that several proxies share
one limit per client (redis://host:6379/0, redis+cluster://h1:p1,h2:p2). Give
the password with --redis-password-file or $REDIS_PASSWORD rather than in
the URL, which every user of the machine can read on the command line.
When Redis fails or takes more than 200 ms to answer, requests get 503 with
Retry-After (--fail-open: they pass, unlimited, until Redis answers again).
A Redis that answers but is set up wrong (a wrong password or database, a
cluster URL for one server) never fails open: at start the proxy exits with
status 2; found later, requests get 503. Each outage of Redis or of the
backend is logged when it begins (why) and when it ends (how long, how many
requests it failed).

Connections: a client may hold --max-conns-per-client connections at once
(--trusted-proxy addresses have no cap), a refused client's connection is
closed after its 429, an idle one after --idle-timeout, and a request body
that stalls for --read-timeout is cut off (408); the backend has
--upstream-timeout to answer (then 504). Headers past --max-header-bytes get
431.

With --config FILE, the limit flags (--limit, --burst, --algorithm, --key)
come from FILE, written as on the command line ("#" starts a comment), and
SIGHUP reads it again without dropping a request; a file with an error
leaves the limits as they were, and the log says why. SIGINT or SIGTERM stop
accepting connections and let requests in flight finish (at most 30 s)
before exiting.

Examples:
  ratelimit proxy --listen :8080 --limit 100/min http://127.0.0.1:3000
  ratelimit proxy --listen :8080 --limit 10/s --burst 20 --key header:X-Api-Key \
      --trusted-proxy 10.0.0.0/8 --redis redis://redis:6379/0 --metrics :9090 http://api:3000

Exit status: 0 after a clean shutdown, 1 if serving fails (the address is
taken), 2 for bad flags or values or a Redis set up wrong.

Flags:
`

// proxyConfig is what the flags of proxy describe.
type proxyConfig struct {
	listen, metrics string
	target          *url.URL
	limits          *limitConfig // at start; SIGHUP re-reads them from configFile
	configFile      string
	trusted         []string
	trustedPrefixes []netip.Prefix
	redisURL        string
	newRedis        func() redis.UniversalClient
	redisWhere      string
	failOpen        bool
	maxKeys         int

	idleTimeout, readTimeout, upstreamTimeout time.Duration
	maxHeaderBytes                            int
	maxConnsPerClient                         int
}

// limitConfig is what a limit step decides with: the part of the
// configuration that a --config file holds and SIGHUP replaces.
type limitConfig struct {
	limit   throttle.Limit
	alg     throttle.Algorithm
	key     string // "ip", "route" or "header:NAME", as given
	keyPart httplimit.KeyPart
	queue   *queueConfig // nginx's limit_req beyond one plain limit (proxy_queue.go); nil: none
}

// limitFlags are the flags that say what is limited and how: the ones a
// --config file may hold, read again on SIGHUP.
type limitFlags struct {
	alg, key   string
	queueFlags // --limit, --burst, --queue, --status, --dry-run (proxy_queue.go)
}

func (f *limitFlags) register(fs *flag.FlagSet) {
	f.queueFlags.define(fs)
	fs.StringVar(&f.alg, "algorithm", "gcra", "`algorithm`: gcra, token-bucket, leaky-bucket, fixed-window, sliding-window or sliding-log")
	fs.StringVar(&f.key, "key", "ip", "what a limit is per: ip, header:NAME or route")
}

// limitFlagNames are the flags limitFlags registers.
var limitFlagNames = []string{"limit", "burst", "queue", "status", "dry-run", "algorithm", "key"}

// check reads the flags into a limitConfig.
func (f *limitFlags) check() (*limitConfig, error) {
	lc := &limitConfig{key: f.key}
	if len(f.limits) == 0 {
		return nil, errors.New("--limit is required (e.g. --limit 100/min)")
	}
	limit, burst := f.limits[0], "" // the first; parseQueueFlags reads them all
	if len(f.bursts) == 1 {
		burst = f.bursts[0]
	}
	var err error
	if lc.limit, err = parseLimit(limit); err != nil {
		return nil, fmt.Errorf("--limit %q: %v", limit, err)
	}
	if burst != "" {
		n, err := strconv.Atoi(burst)
		if err != nil || n < 1 {
			return nil, fmt.Errorf("--burst %q: want a whole number of requests, at least 1", burst)
		}
		lc.limit.Burst = n
	}
	if lc.alg, err = throttle.ParseAlgorithm(f.alg); err != nil {
		return nil, fmt.Errorf("--algorithm: %v", err)
	}
	probe, err := throttle.NewMemoryStore(throttle.WithMaxKeys(1))
	if err != nil {
		return nil, err
	}
	if _, err := throttle.New(probe, lc.alg, lc.limit); err != nil {
		return nil, fmt.Errorf("--limit %s with --algorithm %s: %v", limit, f.alg, err)
	}
	switch name, ok := strings.CutPrefix(f.key, "header:"); {
	case f.key == "ip":
		lc.keyPart = httplimit.IP()
	case f.key == "route":
		lc.keyPart = httplimit.Route()
	case ok && name != "" && validHeaderName(name):
		lc.keyPart = httplimit.Header(name)
	default:
		return nil, fmt.Errorf("--key %q: want ip, route or header:NAME (e.g. header:X-Api-Key)", f.key)
	}
	if lc.queue, err = parseQueueFlags(&f.queueFlags, lc.alg); err != nil {
		return nil, err
	}
	return lc, nil
}

func (lc *limitConfig) String() string {
	if lc.queue != nil {
		return fmt.Sprintf("%s per %s (%s)", lc.queue.describe(), lc.key, lc.alg)
	}
	return fmt.Sprintf("%s per %s (%s)", lc.limit, lc.key, lc.alg)
}

// proxyFlags are all of proxy's flags.
type proxyFlags struct {
	limitFlags
	listen, redis, redisPasswordFile, metrics, config, maxHeaderBytes string
	trusted                                                           stringsFlag
	failOpen                                                          bool
	maxKeys, maxConnsPerClient                                        int
	idleTimeout, readTimeout, upstreamTimeout                         time.Duration
}

// Defaults for the connection flags, nginx's where it has one: a proxy
// that one hostile client can exhaust is not a limiter. docs/http.md says
// why each.
const (
	defaultIdleTimeout       = 75 * time.Second // nginx's keepalive_timeout
	defaultReadTimeout       = 60 * time.Second // nginx's client_body_timeout
	defaultUpstreamTimeout   = 60 * time.Second // nginx's proxy_read_timeout
	defaultMaxHeaderBytes    = "32KiB"          // nginx's large_client_header_buffers (4 x 8k)
	defaultMaxConnsPerClient = 256
	// readHeaderTimeout bounds the request line and headers, so that a
	// client cannot hold a connection by sending them a byte at a time.
	readHeaderTimeout = 10 * time.Second
	// upstreamIdlePerHost is the idle pool to the backend: as many
	// connections as requests at once under load, so that a busy proxy
	// reuses them instead of opening one per request (and leaving as
	// many sockets in TIME_WAIT).
	upstreamIdlePerHost = 1024
)

func (f *proxyFlags) register(fs *flag.FlagSet) {
	fs.StringVar(&f.listen, "listen", "", "serve on this `address` (host:port; port 0 picks a free one, printed at start)")
	f.limitFlags.register(fs)
	fs.StringVar(&f.config, "config", "", "read the limit flags (--limit, --burst, --algorithm, --key) from this `file`, one per line; SIGHUP reads it again")
	fs.Var(&f.trusted, "trusted-proxy", "a load balancer's `CIDR` or address whose X-Forwarded-For is believed (repeatable)")
	fs.StringVar(&f.redis, "redis", "", "share limits with other proxies through Redis at `URL`")
	fs.StringVar(&f.redisPasswordFile, "redis-password-file", "", "with --redis: read the password from this `file` (else from $REDIS_PASSWORD, else the URL)")
	fs.StringVar(&f.metrics, "metrics", "", "serve Prometheus counters on this `address` at /metrics")
	fs.IntVar(&f.maxKeys, "max-keys", throttle.DefaultMaxKeys, "without --redis: remember at most this many clients (the least recently seen are forgotten)")
	fs.BoolVar(&f.failOpen, "fail-open", false, "let requests through when the store (Redis) cannot be reached, instead of answering 503 (never when it is set up wrong)")
	fs.DurationVar(&f.idleTimeout, "idle-timeout", defaultIdleTimeout, "close a keep-alive connection idle this `long`")
	fs.DurationVar(&f.readTimeout, "read-timeout", defaultReadTimeout, "cut off a client that sends nothing of its request body for this `long`")
	fs.DurationVar(&f.upstreamTimeout, "upstream-timeout", defaultUpstreamTimeout, "answer 504 when the backend has not answered within this `long`")
	fs.StringVar(&f.maxHeaderBytes, "max-header-bytes", defaultMaxHeaderBytes, "answer 431 to a request whose headers are larger than this `size`")
	fs.IntVar(&f.maxConnsPerClient, "max-conns-per-client", defaultMaxConnsPerClient, "most connections open at once from one client address (IPv6: /64); --trusted-proxy addresses are exempt; 0: no cap")
}

// stringsFlag collects a repeated flag.
type stringsFlag []string

func (s *stringsFlag) String() string     { return strings.Join(*s, ",") }
func (s *stringsFlag) Set(v string) error { *s = append(*s, v); return nil }

func runProxy(args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("proxy", flag.ContinueOnError)
	var f proxyFlags
	f.register(fs)
	fs.Usage = func() {
		fmt.Fprint(fs.Output(), proxyUsage)
		fs.PrintDefaults()
	}
	words, done, status := parseFlags(fs, args, true, stdout, stderr)
	if done {
		return status
	}
	cfg, err := proxyConfigFrom(&f, fs, words)
	if err != nil {
		fmt.Fprintf(stderr, "ratelimit proxy: %v\n", err)
		return exitUsage
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	return cfg.serve(ctx, stdout, stderr)
}

// given reports which flags the command line set.
func given(fs *flag.FlagSet) map[string]bool {
	set := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { set[f.Name] = true })
	return set
}

func proxyConfigFrom(f *proxyFlags, fs *flag.FlagSet, words []string) (*proxyConfig, error) {
	set := given(fs)
	c := &proxyConfig{listen: f.listen, metrics: f.metrics, trusted: f.trusted, redisURL: f.redis, failOpen: f.failOpen,
		configFile: f.config, idleTimeout: f.idleTimeout, readTimeout: f.readTimeout, upstreamTimeout: f.upstreamTimeout,
		maxConnsPerClient: f.maxConnsPerClient}
	switch len(words) {
	case 0:
		return nil, errors.New("missing TARGET_URL (the service to forward to, e.g. http://127.0.0.1:3000)")
	case 1:
	default:
		return nil, fmt.Errorf("one TARGET_URL expected, got %d: %q", len(words), words)
	}
	u, err := url.Parse(words[0])
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return nil, fmt.Errorf("TARGET_URL %q: want an http:// or https:// URL with a host", words[0])
	}
	c.target = u
	if f.listen == "" {
		return nil, errors.New("--listen is required (e.g. --listen :8080)")
	}
	if _, _, err := net.SplitHostPort(f.listen); err != nil {
		return nil, fmt.Errorf("--listen %q: want host:port or :port", f.listen)
	}
	if f.metrics != "" {
		if _, _, err := net.SplitHostPort(f.metrics); err != nil {
			return nil, fmt.Errorf("--metrics %q: want host:port or :port", f.metrics)
		}
	}
	if f.config != "" {
		for _, name := range limitFlagNames {
			if set[name] {
				return nil, fmt.Errorf("--%s is read from --config %s: give it there, not on the command line", name, f.config)
			}
		}
		if c.limits, err = readLimitFile(f.config); err != nil {
			return nil, err
		}
	} else if c.limits, err = f.limitFlags.check(); err != nil {
		return nil, err
	}
	for _, s := range f.trusted {
		p, err := netprefix.Parse(s)
		if err != nil {
			return nil, fmt.Errorf("--trusted-proxy %q: want a CIDR (10.0.0.0/8) or an address", s)
		}
		c.trustedPrefixes = append(c.trustedPrefixes, p)
	}
	for _, d := range []struct {
		name string
		v    time.Duration
	}{{"idle-timeout", f.idleTimeout}, {"read-timeout", f.readTimeout}, {"upstream-timeout", f.upstreamTimeout}} {
		if d.v <= 0 {
			return nil, fmt.Errorf("--%s %v: want a positive duration", d.name, d.v)
		}
	}
	n, err := units.Size(f.maxHeaderBytes)
	if err != nil {
		return nil, fmt.Errorf("--max-header-bytes %v", err)
	}
	if n < 1024 || n > 1<<30 {
		return nil, fmt.Errorf("--max-header-bytes %q: want between 1KiB and 1GiB", f.maxHeaderBytes)
	}
	c.maxHeaderBytes = int(n)
	if f.maxConnsPerClient < 0 {
		return nil, fmt.Errorf("--max-conns-per-client %d: want 0 (no cap) or more", f.maxConnsPerClient)
	}
	if f.redis != "" {
		password, err := redisPassword(f.redisPasswordFile)
		if err != nil {
			return nil, err
		}
		if c.newRedis, c.redisWhere, err = parseRedisURL(f.redis, password); err != nil {
			return nil, fmt.Errorf("--redis %q: %v", redactURL(f.redis), err)
		}
	} else if f.redisPasswordFile != "" {
		return nil, errors.New("--redis-password-file only applies with --redis URL")
	}
	switch {
	case set["max-keys"] && c.redisURL != "":
		return nil, errors.New("--max-keys applies to the memory store; Redis bounds its memory with key expiry and maxmemory")
	case f.maxKeys < 1:
		return nil, fmt.Errorf("--max-keys %d: want at least 1", f.maxKeys)
	}
	c.maxKeys = f.maxKeys
	return c, nil
}

// readLimitFile reads a --config file: the limit flags, as on the command
// line, any number per line; "#" starts a comment. For example:
//
//	# the API's limits
//	--limit 100/min --burst 20
//	--key header:X-Api-Key
func readLimitFile(path string) (*limitConfig, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("--config: %v", err)
	}
	var args []string
	for line := range strings.Lines(string(b)) {
		line, _, _ = strings.Cut(line, "#")
		args = append(args, strings.Fields(line)...)
	}
	fs := flag.NewFlagSet("proxy --config", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	var f limitFlags
	f.register(fs)
	if err := fs.Parse(args); err != nil {
		return nil, fmt.Errorf("--config %s: %v (it holds only %s)", path, err, "--"+strings.Join(limitFlagNames, ", --"))
	}
	if fs.NArg() > 0 {
		return nil, fmt.Errorf("--config %s: %q is not a flag", path, fs.Arg(0))
	}
	lc, err := f.check()
	if err != nil {
		return nil, fmt.Errorf("--config %s: %v", path, err)
	}
	return lc, nil
}

// redisPassword is the Redis password from --redis-password-file or
// $REDIS_PASSWORD ("" if neither), so that it need not be in the URL on
// the command line, where every user of the machine can read it.
func redisPassword(file string) (string, error) {
	if file == "" {
		return os.Getenv("REDIS_PASSWORD"), nil
	}
	b, err := os.ReadFile(file)
	if err != nil {
		return "", fmt.Errorf("--redis-password-file: %v", err)
	}
	pw := strings.TrimRight(string(b), "\r\n")
	if pw == "" {
		return "", fmt.Errorf("--redis-password-file %s is empty", file)
	}
	return pw, nil
}

// redactURL hides a URL's password, for messages.
func redactURL(s string) string {
	if u, err := url.Parse(s); err == nil {
		return u.Redacted()
	}
	return s
}

// validHeaderName: an RFC 9110 token.
func validHeaderName(s string) bool {
	for i := 0; i < len(s); i++ {
		b := s[i]
		if !(b >= 'a' && b <= 'z' || b >= 'A' && b <= 'Z' || b >= '0' && b <= '9' || strings.IndexByte("!#$%&'*+-.^_`|~", b) >= 0) {
			return false
		}
	}
	return true
}

// parseLimit reads COUNT/PERIOD: 100/min, 10/s, 20/15s, 5/1m30s.
func parseLimit(s string) (throttle.Limit, error) {
	countS, periodS, ok := strings.Cut(s, "/")
	if !ok {
		return throttle.Limit{}, errors.New("want COUNT/PERIOD, e.g. 100/min, 10/s or 20/15s")
	}
	count, err := strconv.Atoi(countS)
	if errors.Is(err, strconv.ErrRange) && !strings.HasPrefix(countS, "-") {
		return throttle.Limit{}, fmt.Errorf("count %q: too large (at most %d)", countS, math.MaxInt)
	}
	if err != nil || count < 1 {
		return throttle.Limit{}, fmt.Errorf("count %q: want a whole number, at least 1", countS)
	}
	period, err := units.Period(periodS)
	if err != nil {
		// The caller quotes the whole value; say only what is wrong.
		if ue, ok := errors.AsType[*units.Error](err); ok {
			return throttle.Limit{}, errors.New(ue.Why)
		}
		return throttle.Limit{}, err
	}
	return throttle.Limit{Count: count, Period: period}, nil
}

// serve runs the proxy until ctx ends, then drains it.
func (c *proxyConfig) serve(ctx context.Context, stdout, stderr io.Writer) int {
	errLog := log.New(stderr, "ratelimit proxy: ", 0)
	var store throttle.Store
	var storeName string
	if c.newRedis != nil {
		redis.SetLogger(quietLogger{}) // store errors are counted and logged by the outage log
		client := c.newRedis()
		defer client.Close()
		// The store's bound on a call, as distributed's for pipe and
		// run (redisCallTimeout says why 200 ms).
		rs, err := throttle.NewRedisStore(client, throttle.WithCallTimeout(redisCallTimeout))
		if err != nil {
			fmt.Fprintf(stderr, "ratelimit proxy: %v\n", err)
			return exitUsage
		}
		store = rs
		storeName = "redis " + c.redisWhere
		if err := c.checkRedis(ctx, client, store, stderr); err != nil {
			fmt.Fprintf(stderr, "ratelimit proxy: %v\n", err)
			return exitUsage
		}
	} else {
		ms, err := throttle.NewMemoryStore(throttle.WithMaxKeys(c.maxKeys), throttle.WithStoreClock(millisecondClock{}))
		if err != nil {
			fmt.Fprintf(stderr, "ratelimit proxy: --max-keys: %v\n", err)
			return exitUsage
		}
		store = ms
		storeName = fmt.Sprintf("memory store (at most %d keys)", c.maxKeys)
	}
	p, err := c.newProxy(store, storeName, errLog)
	if err != nil {
		fmt.Fprintf(stderr, "ratelimit proxy: %v\n", err)
		return exitUsage
	}

	ln, err := net.Listen("tcp", c.listen)
	if err != nil {
		fmt.Fprintf(stderr, "ratelimit proxy: %v\n", err)
		return exitFail
	}
	if c.maxConnsPerClient > 0 {
		cl := &capLog{max: c.maxConnsPerClient, log: errLog, now: time.Now}
		ln = newConnCap(ln, c.maxConnsPerClient, c.trustedAddr, &p.metrics.connsRefused, cl.refused)
	}
	srv := &http.Server{
		Handler:           p,
		ReadHeaderTimeout: min(readHeaderTimeout, c.readTimeout),
		IdleTimeout:       c.idleTimeout,
		MaxHeaderBytes:    c.maxHeaderBytes,
		ErrorLog:          errLog,
	}
	servers := []*http.Server{srv}
	listeners := []net.Listener{ln}
	metricsNote := ""
	if c.metrics != "" {
		mln, err := net.Listen("tcp", c.metrics)
		if err != nil {
			ln.Close()
			fmt.Fprintf(stderr, "ratelimit proxy: --metrics: %v\n", err)
			return exitFail
		}
		mux := http.NewServeMux()
		mux.Handle("GET /metrics", &p.metrics)
		servers = append(servers, &http.Server{Handler: mux, ReadHeaderTimeout: readHeaderTimeout, IdleTimeout: c.idleTimeout, ErrorLog: errLog})
		listeners = append(listeners, mln)
		metricsNote = fmt.Sprintf(", metrics on http://%s/metrics", mln.Addr())
	}
	// Before the line that says the proxy is up: a SIGHUP from then on
	// reloads, and never kills.
	stopReload := p.reloadOnHangup(c.configFile)
	defer stopReload()
	fmt.Fprintf(stdout, "ratelimit proxy: listening on http://%s, forwarding to %s, %s, %s%s\n",
		ln.Addr(), c.target.Redacted(), c.limits, storeName, metricsNote)

	failed := make(chan error, len(servers))
	for i, s := range servers {
		go func() { failed <- s.Serve(listeners[i]) }()
	}
	status := exitOK
	select {
	case <-ctx.Done():
	case err := <-failed:
		fmt.Fprintf(stderr, "ratelimit proxy: %v\n", err)
		status = exitFail
	}
	fmt.Fprintln(stderr, "ratelimit proxy: shutting down, letting requests in flight finish")
	drain, cancel := context.WithTimeout(context.Background(), shutdownTimeout)
	defer cancel()
	for _, s := range servers {
		if err := s.Shutdown(drain); err != nil {
			fmt.Fprintf(stderr, "ratelimit proxy: shutdown: %v\n", err)
			status = exitFail
		}
	}
	p.store.close()
	p.backend.close()
	return status
}

// checkRedis looks at Redis before the proxy serves. A Redis that answers
// but is set up wrong (a wrong password, no such database, a cluster URL
// for a single server, a script it cannot run) is an error: no retry and
// no --fail-open fixes it, and failing open on it would run unlimited
// forever. A Redis that does not answer is a warning: it may come up
// later, and until it does requests fail open or closed as configured.
func (c *proxyConfig) checkRedis(ctx context.Context, client redis.UniversalClient, store throttle.Store, stderr io.Writer) error {
	ping, cancel := context.WithTimeout(ctx, redisStartTimeout)
	defer cancel()
	err := client.Ping(ping).Err()
	if err == nil {
		// PING passes where the limiter's script may not run (an ACL
		// user without EVALSHA, a key of another type): one decision
		// that counts nothing runs it.
		lim, lerr := throttle.New(store, c.limits.alg, c.limits.limit)
		if lerr != nil {
			return lerr
		}
		_, err = lim.AllowN(ping, "ratelimit-proxy:start-check", 0)
	}
	switch {
	case err == nil:
		return nil
	case storeMisconfigured(err):
		return fmt.Errorf("redis at %s answers but is set up wrong: %v (check its password, database, URL scheme and ACL); not starting, --fail-open or not", c.redisWhere, err)
	}
	fmt.Fprintf(stderr, "ratelimit proxy: warning: Redis at %s does not answer (%v); until it does, requests %s\n",
		c.redisWhere, err, map[bool]string{false: "get 503", true: "pass unlimited (--fail-open)"}[c.failOpen])
	return nil
}

// storeMisconfigured reports whether a store error is one that no retry
// fixes (Redis set up wrong), as opposed to an outage: the proxy never
// fails open on it.
func storeMisconfigured(err error) bool {
	return errors.Is(err, throttle.ErrMisconfigured) || errors.Is(err, throttle.ErrInvalidOption) ||
		distributed.IsMisconfiguration(err) // a PING's error, which no store classified
}

// shutdownTimeout bounds how long requests in flight may take to finish
// after SIGINT or SIGTERM.
const shutdownTimeout = 30 * time.Second

// trustedAddr reports whether a is one of --trusted-proxy's.
func (c *proxyConfig) trustedAddr(a netip.Addr) bool {
	for _, p := range c.trustedPrefixes {
		if p.Contains(a) {
			return true
		}
	}
	return false
}
