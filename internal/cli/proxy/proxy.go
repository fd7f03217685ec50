// Package proxy is `ratelimit proxy`: a rate-limiting reverse proxy in front
// of an HTTP service, at nginx's level (limit_req's burst, delay and queue,
// its status and dry run), keyed by client address, header or route, with
// its state in memory or shared through Redis, never failing open on a
// misconfiguration.
package proxy

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"net/netip"

	"github.com/redis/go-redis/v9"

	"github.com/smoothrate/ratelimit/internal/cli/command"
	"github.com/smoothrate/ratelimit/internal/cli/metrics"
	"github.com/smoothrate/ratelimit/internal/cli/redisflag"
	"github.com/smoothrate/ratelimit/internal/cli/serve"
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
A rediss:// URL takes a client certificate and CAs with the --redis-tls-*
flags; the certificate is read again when its files change.
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
before exiting; with --drain D, SIGTERM first keeps serving for D, closing
each connection after its answer, so that a load balancer moves clients
elsewhere before the port closes (a second signal ends the wait).

Examples:
  ratelimit proxy --listen :8080 --limit 100/min http://127.0.0.1:3000
  ratelimit proxy --listen :8080 --limit 10/s --burst 20 --key header:X-Api-Key \
      --trusted-proxy 10.0.0.0/8 --redis redis://redis:6379/0 --metrics :9090 http://api:3000

Exit status: 0 after a clean shutdown, 1 if serving fails (the address is
taken), 2 for bad flags or values or a Redis set up wrong.

Flags:
`

// Summary is proxy's line in the list of commands.
const Summary = "serve a rate-limiting reverse proxy in front of an HTTP service"

// Run runs `ratelimit proxy` with args (what follows "proxy" on the command
// line) and returns its exit status.
func Run(args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("proxy", flag.ContinueOnError)
	var f proxyFlags
	f.register(fs)
	fs.Usage = func() {
		fmt.Fprint(fs.Output(), proxyUsage)
		fs.PrintDefaults()
	}
	words, done, status := command.ParseFlags(fs, args, true, stdout, stderr)
	if done {
		return status
	}
	cfg, err := proxyConfigFrom(&f, fs, words)
	if err != nil {
		fmt.Fprintf(stderr, "ratelimit proxy: %v\n", err)
		return command.ExitUsage
	}
	ctx, stop := serve.SignalContext()
	defer stop()
	return cfg.serve(ctx, stdout, stderr)
}

// upstreamIdlePerHost is the idle pool to the backend: as many connections
// as requests at once under load, so that a busy proxy reuses them instead
// of opening one per request (and leaving as many sockets in TIME_WAIT).
const upstreamIdlePerHost = 1024

// serve runs the proxy until ctx ends, then drains it.
func (c *proxyConfig) serve(ctx context.Context, stdout, stderr io.Writer) int {
	errLog := log.New(stderr, "ratelimit proxy: ", 0)
	var store throttle.Store
	var storeName string
	if c.newRedis != nil {
		redisflag.Quiet() // store errors are counted and logged by the outage log
		client := c.newRedis()
		defer client.Close()
		// The store's bound on a call, as distributed's for pipe and
		// run (redisflag.CallTimeout says why 200 ms).
		rs, err := throttle.NewRedisStore(client, throttle.WithCallTimeout(redisflag.CallTimeout))
		if err != nil {
			fmt.Fprintf(stderr, "ratelimit proxy: %v\n", err)
			return command.ExitUsage
		}
		store = rs
		storeName = "redis " + c.redisWhere
		if err := c.checkRedis(ctx, client, store, stderr); err != nil {
			fmt.Fprintf(stderr, "ratelimit proxy: %v\n", err)
			return command.ExitUsage
		}
	} else {
		ms, err := throttle.NewMemoryStore(throttle.WithMaxKeys(c.maxKeys), throttle.WithStoreClock(millisecondClock{}))
		if err != nil {
			fmt.Fprintf(stderr, "ratelimit proxy: --max-keys: %v\n", err)
			return command.ExitUsage
		}
		store = ms
		storeName = fmt.Sprintf("memory store (at most %d keys)", c.maxKeys)
	}
	p, err := c.newProxy(store, storeName, errLog)
	if err != nil {
		fmt.Fprintf(stderr, "ratelimit proxy: %v\n", err)
		return command.ExitUsage
	}

	var listeners serve.Listeners
	ln, err := listeners.Listen("", c.listen)
	if err != nil {
		fmt.Fprintf(stderr, "ratelimit proxy: %v\n", err)
		return command.ExitFail
	}
	var metricsLn net.Listener
	if c.metrics != "" {
		if metricsLn, err = listeners.Listen("--metrics", c.metrics); err != nil {
			fmt.Fprintf(stderr, "ratelimit proxy: %v\n", err)
			return command.ExitFail
		}
	}
	if cc := c.conns.Cap(c.trustedAddr, &p.metrics.connsRefused, errLog); cc != nil {
		ln = cc.Wrap(ln)
	}
	servers := &serve.Group{Prefix: "ratelimit proxy", Stderr: stderr, Work: "requests", Drain: c.drain}
	servers.HTTP(c.conns.Apply(&http.Server{Handler: p, ErrorLog: errLog}), ln)
	metricsNote := ""
	if metricsLn != nil {
		reg, err := metrics.NewRegistry(&p.metrics)
		if err != nil {
			fmt.Fprintf(stderr, "ratelimit proxy: %v\n", err)
			return command.ExitFail
		}
		ms := metrics.Server(reg, "", errLog)
		ms.IdleTimeout = c.conns.IdleTimeout
		servers.HTTP(ms, metricsLn)
		metricsNote = metrics.Banner(metricsLn, "")
	}
	// Before the line that says the proxy is up: a SIGHUP from then on
	// reloads, and never kills.
	stopReload := p.reloadOnHangup(c.configFile)
	defer stopReload()
	stopCertWatch := redisflag.WatchCert(c.redisCert, c.redisCertFile, 0, errLog.Printf)
	defer stopCertWatch()
	fmt.Fprintf(stdout, "ratelimit proxy: listening on http://%s, forwarding to %s, %s, %s%s\n",
		ln.Addr(), c.target.Redacted(), c.limits, storeName, metricsNote)
	status := servers.Run(ctx, nil)
	p.store.Close()
	p.backend.Close()
	return status
}

// checkRedis looks at Redis before the proxy serves. A Redis that answers
// but is set up wrong (a wrong password, no such database, a cluster URL
// for a single server, a script it cannot run) is an error: no retry and
// no --fail-open fixes it, and failing open on it would run unlimited
// forever. A Redis that does not answer is a warning: it may come up
// later, and until it does requests fail open or closed as configured.
func (c *proxyConfig) checkRedis(ctx context.Context, client redis.UniversalClient, store throttle.Store, stderr io.Writer) error {
	ping, cancel := context.WithTimeout(ctx, redisflag.StartTimeout)
	defer cancel()
	if err := redisflag.SetUpWrong(ping, client); err != nil {
		return fmt.Errorf("redis at %s is set up wrong: %w; not starting, --fail-open or not", c.redisWhere, err)
	}
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
		if w := redisflag.Evictions(ping, client); w != "" {
			fmt.Fprintf(stderr, "ratelimit proxy: warning: Redis at %s %s\n", c.redisWhere, w)
		}
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
	return redisflag.Misconfigured(err) || errors.Is(err, throttle.ErrInvalidOption)
}

// trustedAddr reports whether a is one of --trusted-proxy's.
func (c *proxyConfig) trustedAddr(a netip.Addr) bool {
	for _, p := range c.trustedPrefixes {
		if p.Contains(a) {
			return true
		}
	}
	return false
}
