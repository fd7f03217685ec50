package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"net/http/httputil"
	"net/netip"
	"net/url"
	"os/signal"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/redis/go-redis/v9"

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

Clients are told apart by their IP address (IPv6 by /64), by a header
(--key header:X-Api-Key, falling back to the IP when it is missing), or not
at all but per route (--key route: the URL path). Behind a load balancer,
name it with --trusted-proxy: the client is then the rightmost address in
X-Forwarded-For that is not a trusted proxy. Without --trusted-proxy,
X-Forwarded-For is ignored (a client could write anything there).

State is kept in memory (bounded: least recently seen clients are
forgotten first), or in Redis with --redis URL so that several proxies share
one limit per client (redis://host:6379/0, redis+cluster://h1:p1,h2:p2).
When Redis fails or takes more than 200 ms to answer, requests get 503 with
Retry-After (--fail-open: they pass, unlimited, until Redis answers again);
each failure is counted.

SIGINT or SIGTERM stop accepting connections and let requests in flight
finish (at most 30 s) before exiting.

Examples:
  ratelimit proxy --listen :8080 --limit 100/min http://127.0.0.1:3000
  ratelimit proxy --listen :8080 --limit 10/s --burst 20 --key header:X-Api-Key \
      --trusted-proxy 10.0.0.0/8 --redis redis://redis:6379/0 --metrics :9090 http://api:3000

Exit status: 0 after a clean shutdown, 1 if serving fails (the address is
taken), 2 for bad flags or values.

Flags:
`

// proxyConfig is what the flags of proxy describe.
type proxyConfig struct {
	listen, metrics string
	target          *url.URL
	limit           throttle.Limit
	alg             throttle.Algorithm
	key             string // "ip", "route" or "header:NAME", as given
	keyPart         httplimit.KeyPart
	trusted         []string
	trustedPrefixes []netip.Prefix
	redisURL        string
	newRedis        func() redis.UniversalClient
	redisWhere      string
	failOpen        bool
	maxKeys         int
}

// stringsFlag collects a repeated flag.
type stringsFlag []string

func (s *stringsFlag) String() string     { return strings.Join(*s, ",") }
func (s *stringsFlag) Set(v string) error { *s = append(*s, v); return nil }

func runProxy(args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("proxy", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var f struct {
		listen, limit, burst, alg, key, redis, metrics string
		trusted                                        stringsFlag
		failOpen                                       bool
		maxKeys                                        int
	}
	fs.StringVar(&f.listen, "listen", "", "serve on this `address` (host:port; port 0 picks a free one, printed at start)")
	fs.StringVar(&f.limit, "limit", "", "requests per client: `COUNT/PERIOD`, e.g. 100/min, 10/s, 20/15s")
	fs.StringVar(&f.burst, "burst", "", "most requests at once (gcra, token-bucket, leaky-bucket; default COUNT)")
	fs.StringVar(&f.alg, "algorithm", "gcra", "`algorithm`: gcra, token-bucket, leaky-bucket, fixed-window, sliding-window or sliding-log")
	fs.StringVar(&f.key, "key", "ip", "what a limit is per: ip, header:NAME or route")
	fs.Var(&f.trusted, "trusted-proxy", "a load balancer's `CIDR` or address whose X-Forwarded-For is believed (repeatable)")
	fs.StringVar(&f.redis, "redis", "", "share limits with other proxies through Redis at `URL`")
	fs.StringVar(&f.metrics, "metrics", "", "serve Prometheus counters on this `address` at /metrics")
	fs.IntVar(&f.maxKeys, "max-keys", throttle.DefaultMaxKeys, "without --redis: remember at most this many clients (the least recently seen are forgotten)")
	fs.BoolVar(&f.failOpen, "fail-open", false, "let requests through when the store (Redis) fails, instead of answering 503")
	fs.Usage = func() {
		fmt.Fprint(fs.Output(), proxyUsage)
		fs.PrintDefaults()
	}
	words, err := parseInterspersed(fs, args)
	if errors.Is(err, flag.ErrHelp) {
		return exitOK
	}
	if err != nil {
		return exitUsage
	}
	cfg, err := proxyConfigFrom(f.listen, f.limit, f.burst, f.alg, f.key, f.redis, f.metrics, f.trusted, f.failOpen, words)
	if err == nil {
		err = cfg.setMaxKeys(f.maxKeys, fs)
	}
	if err != nil {
		fmt.Fprintf(stderr, "ratelimit proxy: %v\n", err)
		return exitUsage
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	return cfg.serve(ctx, stdout, stderr)
}

func proxyConfigFrom(listen, limit, burst, alg, key, redisURL, metrics string, trusted []string, failOpen bool, words []string) (*proxyConfig, error) {
	c := &proxyConfig{listen: listen, metrics: metrics, key: key, trusted: trusted, redisURL: redisURL, failOpen: failOpen}
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
	if listen == "" {
		return nil, errors.New("--listen is required (e.g. --listen :8080)")
	}
	if _, _, err := net.SplitHostPort(listen); err != nil {
		return nil, fmt.Errorf("--listen %q: want host:port or :port", listen)
	}
	if metrics != "" {
		if _, _, err := net.SplitHostPort(metrics); err != nil {
			return nil, fmt.Errorf("--metrics %q: want host:port or :port", metrics)
		}
	}
	if limit == "" {
		return nil, errors.New("--limit is required (e.g. --limit 100/min)")
	}
	if c.limit, err = parseLimit(limit); err != nil {
		return nil, fmt.Errorf("--limit %q: %v", limit, err)
	}
	if burst != "" {
		n, err := strconv.Atoi(burst)
		if err != nil || n < 1 {
			return nil, fmt.Errorf("--burst %q: want a whole number of requests, at least 1", burst)
		}
		c.limit.Burst = n
	}
	if c.alg, err = throttle.ParseAlgorithm(alg); err != nil {
		return nil, fmt.Errorf("--algorithm: %v", err)
	}
	probe, err := throttle.NewMemoryStore(throttle.WithMaxKeys(1))
	if err != nil {
		return nil, err
	}
	if _, err := throttle.New(probe, c.alg, c.limit); err != nil {
		return nil, fmt.Errorf("--limit %s with --algorithm %s: %v", limit, alg, err)
	}
	switch name, ok := strings.CutPrefix(key, "header:"); {
	case key == "ip":
		c.keyPart = httplimit.IP()
	case key == "route":
		c.keyPart = httplimit.Route()
	case ok && name != "" && validHeaderName(name):
		c.keyPart = httplimit.Header(name)
	default:
		return nil, fmt.Errorf("--key %q: want ip, route or header:NAME (e.g. header:X-Api-Key)", key)
	}
	for _, s := range trusted {
		p, err := netprefix.Parse(s)
		if err != nil {
			return nil, fmt.Errorf("--trusted-proxy %q: want a CIDR (10.0.0.0/8) or an address", s)
		}
		c.trustedPrefixes = append(c.trustedPrefixes, p)
	}
	if redisURL != "" {
		if c.newRedis, c.redisWhere, err = parseRedisURL(redisURL); err != nil {
			return nil, fmt.Errorf("--redis %q: %v", redisURL, err)
		}
	}
	return c, nil
}

// setMaxKeys checks --max-keys, which only a memory store has.
func (c *proxyConfig) setMaxKeys(n int, fs *flag.FlagSet) error {
	given := false
	fs.Visit(func(f *flag.Flag) { given = given || f.Name == "max-keys" })
	switch {
	case given && c.redisURL != "":
		return errors.New("--max-keys applies to the memory store; Redis bounds its memory with key expiry and maxmemory")
	case n < 1:
		return fmt.Errorf("--max-keys %d: want at least 1", n)
	}
	c.maxKeys = n
	return nil
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
	var store throttle.Store
	var storeName string
	if c.newRedis != nil {
		redis.SetLogger(quietLogger{}) // store errors are counted and logged by the error hook
		client := c.newRedis()
		defer client.Close()
		rs, err := throttle.NewRedisStore(client)
		if err != nil {
			fmt.Fprintf(stderr, "ratelimit proxy: %v\n", err)
			return exitUsage
		}
		store = rs
		storeName = "redis " + c.redisWhere
		// A wrong address should show at start, not with the first
		// request; but Redis may come up later, so it is a warning.
		ping, cancel := context.WithTimeout(ctx, redisStartTimeout)
		if err := client.Ping(ping).Err(); err != nil {
			fmt.Fprintf(stderr, "ratelimit proxy: warning: Redis at %s does not answer (%v); until it does, requests %s\n",
				c.redisWhere, err, map[bool]string{false: "get 503", true: "pass unlimited (--fail-open)"}[c.failOpen])
		}
		cancel()
	} else {
		ms, err := throttle.NewMemoryStore(throttle.WithMaxKeys(c.maxKeys))
		if err != nil {
			fmt.Fprintf(stderr, "ratelimit proxy: --max-keys: %v\n", err)
			return exitUsage
		}
		store = ms
		storeName = fmt.Sprintf("memory store (at most %d keys)", c.maxKeys)
	}
	var m proxyMetrics
	errLog := log.New(stderr, "ratelimit proxy: ", 0)
	rp := &httputil.ReverseProxy{
		Rewrite: func(pr *httputil.ProxyRequest) {
			pr.SetURL(c.target)
			// Pass on the chain of addresses only when it came from a
			// proxy we trust; a client's own X-Forwarded-For is noise.
			if c.trustedPeer(pr.In.RemoteAddr) {
				pr.Out.Header["X-Forwarded-For"] = pr.In.Header["X-Forwarded-For"]
			}
			pr.SetXForwarded()
		},
		ErrorLog: errLog,
	}
	handler, err := c.handler(store, rp, &m, errLog)
	if err != nil {
		fmt.Fprintf(stderr, "ratelimit proxy: %v\n", err)
		return exitUsage
	}

	ln, err := net.Listen("tcp", c.listen)
	if err != nil {
		fmt.Fprintf(stderr, "ratelimit proxy: %v\n", err)
		return exitFail
	}
	srv := &http.Server{Handler: handler, ReadHeaderTimeout: 10 * time.Second, ErrorLog: errLog}
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
		mux.Handle("GET /metrics", &m)
		servers = append(servers, &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second, ErrorLog: errLog})
		listeners = append(listeners, mln)
		metricsNote = fmt.Sprintf(", metrics on http://%s/metrics", mln.Addr())
	}
	fmt.Fprintf(stdout, "ratelimit proxy: listening on http://%s, forwarding to %s, %s per %s (%s), %s%s\n",
		ln.Addr(), c.target.Redacted(), c.limit, c.key, c.alg, storeName, metricsNote)

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
	return status
}

// handler is the proxy without its network: the limiter over store in
// front of next, counting into m, store errors logged on errLog.
func (c *proxyConfig) handler(store throttle.Store, next http.Handler, m *proxyMetrics, errLog *log.Logger) (http.Handler, error) {
	lim, err := throttle.New(store, c.alg, c.limit)
	if err != nil {
		return nil, err
	}
	opts := []httplimit.Option{
		httplimit.WithKey(c.keyPart),
		httplimit.WithRefusalHook(func(*http.Request, throttle.Decision) { m.refused.Add(1) }),
		httplimit.WithErrorHook(func(r *http.Request, err error) {
			// The first error and then one in 1000: a dead Redis
			// must not flood the log at the request rate.
			if n := m.storeErrors.Add(1); n%1000 == 1 {
				errLog.Printf("store error (%d so far, failing %s): %v", n, c.failMode(), err)
			}
		}),
	}
	if len(c.trusted) > 0 {
		opts = append(opts, httplimit.WithTrustedProxies(c.trusted...))
	}
	if c.failOpen {
		opts = append(opts, httplimit.WithFailOpen())
	}
	if c.newRedis != nil {
		opts = append(opts, httplimit.WithStoreTimeout(redisCallTimeout))
	}
	mw, err := httplimit.New(lim, opts...)
	if err != nil {
		return nil, err
	}
	return mw(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		m.allowed.Add(1)
		next.ServeHTTP(w, r)
	})), nil
}

// shutdownTimeout bounds how long requests in flight may take to finish
// after SIGINT or SIGTERM.
const shutdownTimeout = 30 * time.Second

func (c *proxyConfig) failMode() string {
	if c.failOpen {
		return "open"
	}
	return "closed"
}

func (c *proxyConfig) trustedPeer(remoteAddr string) bool {
	ap, err := netip.ParseAddrPort(remoteAddr)
	if err != nil {
		return false
	}
	a := ap.Addr().Unmap()
	for _, p := range c.trustedPrefixes {
		if p.Contains(a) {
			return true
		}
	}
	return false
}
