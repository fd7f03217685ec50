package proxy

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"math"
	"net"
	"net/netip"
	"net/url"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/smoothrate/ratelimit/httplimit"
	"github.com/smoothrate/ratelimit/internal/cli/command"
	"github.com/smoothrate/ratelimit/internal/cli/redisflag"
	"github.com/smoothrate/ratelimit/internal/cli/serve"
	"github.com/smoothrate/ratelimit/internal/netprefix"
	"github.com/smoothrate/ratelimit/internal/tlsfiles"
	"github.com/smoothrate/ratelimit/internal/units"
	"github.com/smoothrate/ratelimit/throttle"
)

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
	redisCert       *tlsfiles.KeyPair // --redis-tls-cert's, kept fresh while serving; nil without one
	redisCertFile   string
	failOpen        bool
	maxKeys         int
	conns           serve.HTTPFlags // --idle-timeout, --read-timeout, --max-header-bytes, --max-conns-per-client
	upstreamTimeout time.Duration
	drain           time.Duration
}

// limitConfig is what a limit step decides with: the part of the
// configuration that a --config file holds and SIGHUP replaces.
type limitConfig struct {
	limit   throttle.Limit
	alg     throttle.Algorithm
	key     string // "ip", "route" or "header:NAME", as given
	keyPart httplimit.KeyPart
	queue   *queueConfig // nginx's limit_req beyond one plain limit (queue.go); nil: none
}

// limitFlags are the flags that say what is limited and how: the ones a
// --config file may hold, read again on SIGHUP.
type limitFlags struct {
	alg, key   string
	queueFlags // --limit, --burst, --queue, --status, --dry-run (queue.go)
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
	if err := lc.limit.Validate(lc.alg); err != nil {
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
	listen, metrics, config string
	redis                   redisflag.Flags
	trusted                 stringsFlag
	failOpen                bool
	maxKeys                 int
	conns                   serve.HTTPFlags
	upstreamTimeout, drain  time.Duration
}

// defaultUpstreamTimeout is nginx's proxy_read_timeout (docs/http.md says
// why; the client side's defaults are serve.HTTPFlags').
const defaultUpstreamTimeout = 60 * time.Second

func (f *proxyFlags) register(fs *flag.FlagSet) {
	fs.StringVar(&f.listen, "listen", "", "serve on this `address` (host:port; port 0 picks a free one, printed at start)")
	f.limitFlags.register(fs)
	fs.StringVar(&f.config, "config", "", "read the limit flags (--limit, --burst, --algorithm, --key) from this `file`, one per line; SIGHUP reads it again")
	fs.Var(&f.trusted, "trusted-proxy", "a load balancer's `CIDR` or address whose X-Forwarded-For is believed (repeatable)")
	f.redis.Register(fs, "share limits with other proxies through Redis at `URL`")
	f.redis.TLS.Register(fs)
	fs.StringVar(&f.metrics, "metrics", "", "serve Prometheus counters on this `address` at /metrics")
	fs.IntVar(&f.maxKeys, "max-keys", throttle.DefaultMaxKeys, "without --redis: remember at most this many clients (the least recently seen are forgotten)")
	fs.BoolVar(&f.failOpen, "fail-open", false, "let requests through when the store (Redis) cannot be reached, instead of answering 503 (never when it is set up wrong)")
	f.conns.Register(fs, "--trusted-proxy addresses are exempt")
	fs.DurationVar(&f.upstreamTimeout, "upstream-timeout", defaultUpstreamTimeout, "answer 504 when the backend has not answered within this `long`")
	serve.RegisterDrain(fs, &f.drain, 0, false)
}

// stringsFlag collects a repeated flag.
type stringsFlag []string

func (s *stringsFlag) String() string     { return strings.Join(*s, ",") }
func (s *stringsFlag) Set(v string) error { *s = append(*s, v); return nil }

func proxyConfigFrom(f *proxyFlags, fs *flag.FlagSet, words []string) (*proxyConfig, error) {
	set := command.Given(fs)
	c := &proxyConfig{listen: f.listen, metrics: f.metrics, trusted: f.trusted, redisURL: f.redis.URL, failOpen: f.failOpen,
		configFile: f.config, conns: f.conns, upstreamTimeout: f.upstreamTimeout, drain: f.drain}
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
	if err := f.conns.Check(); err != nil {
		return nil, err
	}
	if f.upstreamTimeout <= 0 {
		return nil, fmt.Errorf("--upstream-timeout %v: want a positive duration", f.upstreamTimeout)
	}
	if err := serve.CheckDrain(f.drain); err != nil {
		return nil, err
	}
	if f.redis.URL != "" {
		if c.newRedis, c.redisWhere, c.redisCert, err = f.redis.Open(os.Getenv); err != nil {
			return nil, err
		}
		c.redisCertFile = f.redis.TLS.CertFile
	} else if f.redis.PasswordFile != "" {
		return nil, redisflag.ErrPasswordFileAlone
	} else if f.redis.TLS.Given() {
		return nil, errors.New("the --redis-tls-* flags apply with --redis rediss://...")
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
