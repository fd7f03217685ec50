// Package redisflag is how every command of the command line that keeps its
// state in Redis names that Redis: the --redis URL (one server, or a Redis
// Cluster in our own redis+cluster:// form) and its password, given with
// --redis-password-file or $REDIS_PASSWORD rather than in the URL; the
// client options every such command needs; and the checks at start that
// tell a Redis that is set up wrong (a wrong password or database, a
// Cluster node named as a single server) from one that is down.
package redisflag

import (
	"context"
	"crypto/tls"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/url"
	"os"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/smoothrate/ratelimit/internal/redisscript"
	"github.com/smoothrate/ratelimit/internal/tlsfiles"
	"github.com/smoothrate/ratelimit/throttle"
)

// URLForms is the part of a command's usage text that lists the URL forms
// --redis takes.
const URLForms = `  redis://[user:password@]host:port[/db]    one server (rediss:// for TLS)
  redis+cluster://host:port,host:port       a Redis Cluster (rediss+cluster://)
`

// CallTimeout bounds one Redis call of a command's limiter or store (the
// libraries' default is 50 ms, for servers). A command runs on machines
// busy with other work, where a process can stall for tens of
// milliseconds; a call that outlives its timeout puts a shared limit in
// fallback until a probe succeeds, so a short one makes a command flap
// between sharing and running alone. 200 ms of waiting on a hung Redis
// costs a pipe or a job queue nothing a user would notice.
const CallTimeout = 200 * time.Millisecond

// StartTimeout bounds the checks a command makes of its Redis at start.
const StartTimeout = time.Second

// Flags are --redis and --redis-password-file, and the TLS flags of the
// commands that register them (TLS.Register).
type Flags struct {
	URL string
	// PasswordFile holds Redis's password, so that it need not be in
	// the URL on the command line, where every user of the machine can
	// read it; $REDIS_PASSWORD does the same.
	PasswordFile string
	// TLS are the files of a rediss:// URL's client.
	TLS TLS
}

// Register adds the flags to fs; urlUsage is --redis's help, which says
// what the command keeps there.
func (f *Flags) Register(fs *flag.FlagSet, urlUsage string) {
	fs.StringVar(&f.URL, "redis", "", urlUsage)
	fs.StringVar(&f.PasswordFile, "redis-password-file", "", "with --redis: read the password from this `file` (else from $REDIS_PASSWORD, else the URL)")
}

// ErrPasswordFileAlone is the error for --redis-password-file without
// --redis, in the commands whose Redis is optional.
var ErrPasswordFileAlone = errors.New("--redis-password-file only applies with --redis URL")

// Client reads the flags into the client they describe: the URL's, with
// the password from --redis-password-file, else from $REDIS_PASSWORD
// (read with getenv), else the URL's. It connects to nothing. where names
// the server(s), without the password, for messages.
func (f Flags) Client(getenv func(string) string) (newClient func() redis.UniversalClient, where string, err error) {
	newClient, where, _, err = f.Open(getenv)
	return newClient, where, err
}

// Open is Client, with the TLS flags applied to a rediss:// URL; it also
// returns the client certificate, nil without one, for the caller to keep
// fresh (KeyPair.Watch).
func (f Flags) Open(getenv func(string) string) (newClient func() redis.UniversalClient, where string, cert *tlsfiles.KeyPair, err error) {
	password, err := Password(f.PasswordFile, getenv)
	if err != nil {
		return nil, "", nil, err
	}
	var tlsConf *tls.Config
	if f.TLS.Given() {
		if tlsConf, cert, err = f.TLS.Config(); err != nil {
			return nil, "", nil, fmt.Errorf("--redis-tls-*: %w", err)
		}
	}
	if newClient, where, err = ParseURLTLS(f.URL, password, tlsConf); err != nil {
		return nil, "", nil, fmt.Errorf("--redis %q: %w", Redact(f.URL), err)
	}
	return newClient, where, cert, nil
}

// Password is the Redis password from file (--redis-password-file) or
// $REDIS_PASSWORD ("" if neither), so that it need not be in the URL on
// the command line, where every user of the machine can read it. getenv
// reads the environment (os.Getenv).
func Password(file string, getenv func(string) string) (string, error) {
	if file == "" {
		return getenv("REDIS_PASSWORD"), nil
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

// Redact hides a URL's password, for messages.
func Redact(s string) string {
	if u, err := url.Parse(s); err == nil {
		return u.Redacted()
	}
	return s
}

const clusterSuffix = "+cluster"

// ParseURL reads a server URL (redis.ParseURL: redis://, rediss://,
// unix://) or a cluster URL of our own: redis+cluster://host:port,host:port
// or rediss+cluster://, whose first node becomes the URL's host and the
// others go.redis's addr= parameters (redis.ParseClusterURL's form, which is
// accepted too). password, unless empty, is the password, given apart from
// the URL (a file, the environment) so that it need not be on a command
// line; the URL must not hold another. It connects to nothing.
func ParseURL(s, password string) (newClient func() redis.UniversalClient, where string, err error) {
	return ParseURLTLS(s, password, nil)
}

// ParseURLTLS is ParseURL with tlsConf, unless nil, as the TLS
// configuration of a rediss:// or rediss+cluster:// URL (in place of
// go-redis's default, the system's roots); for a URL without TLS, tlsConf
// is an error rather than ignored.
func ParseURLTLS(s, password string, tlsConf *tls.Config) (newClient func() redis.UniversalClient, where string, err error) {
	setTLS := func(have **tls.Config) error {
		switch {
		case tlsConf == nil:
		case *have == nil:
			return errTLSWithoutTLS
		default:
			*have = tlsConf
		}
		return nil
	}
	setPassword := func(have *string) error {
		switch {
		case password == "":
		case *have != "" && *have != password:
			return errors.New("the URL holds a password and --redis-password-file or REDIS_PASSWORD another: give one")
		default:
			*have = password
		}
		return nil
	}
	scheme, rest, ok := strings.Cut(s, "://")
	if !ok {
		return nil, "", errors.New("not a URL: expected redis://host:port/db or redis+cluster://host:port,host:port")
	}
	base, isCluster := strings.CutSuffix(scheme, clusterSuffix)
	if !isCluster {
		opt, err := redis.ParseURL(s)
		if err != nil {
			return nil, "", err
		}
		if err := setPassword(&opt.Password); err != nil {
			return nil, "", err
		}
		if err := setTLS(&opt.TLSConfig); err != nil {
			return nil, "", err
		}
		return NewClient(opt), opt.Addr, nil
	}
	if base != "redis" && base != "rediss" {
		return nil, "", fmt.Errorf("unknown scheme %q: expected redis+cluster or rediss+cluster", scheme)
	}
	authority, tail := rest, ""
	if i := strings.IndexAny(rest, "/?"); i >= 0 {
		authority, tail = rest[:i], rest[i:]
	}
	userinfo, hosts := "", authority
	if i := strings.LastIndex(authority, "@"); i >= 0 {
		userinfo, hosts = authority[:i+1], authority[i+1:]
	}
	nodes := strings.Split(hosts, ",")
	for _, n := range nodes {
		if n == "" {
			return nil, "", errors.New("empty node address in the cluster's list")
		}
	}
	u, err := url.Parse(base + "://" + userinfo + nodes[0] + tail)
	if err != nil {
		return nil, "", err
	}
	if u.Path != "" && u.Path != "/" {
		return nil, "", fmt.Errorf("a cluster has no database numbers (path %q)", u.Path)
	}
	q := u.Query()
	for _, n := range nodes[1:] {
		q.Add("addr", n)
	}
	u.RawQuery = q.Encode()
	opt, err := redis.ParseClusterURL(u.String())
	if err != nil {
		return nil, "", err
	}
	if err := setPassword(&opt.Password); err != nil {
		return nil, "", err
	}
	if err := setTLS(&opt.TLSConfig); err != nil {
		return nil, "", err
	}
	return NewClusterClient(opt), strings.Join(opt.Addrs, ","), nil
}

// NewClient returns the maker of a client for one server with the options
// every command needs, where opt leaves them unset. The limiters and stores
// bound each call with a context deadline: ContextTimeoutEnabled makes the
// deadline bound the socket I/O too. One dial per call: they retry on their
// own, with growing pauses, and a refused connection is reported as such
// rather than as a timeout. Over TLS, a handshake refused on the
// certificates ends the call at once, as set up wrong (tlsCheck).
func NewClient(opt *redis.Options) func() redis.UniversalClient {
	opt.ContextTimeoutEnabled = true
	if opt.DialerRetries == 0 {
		opt.DialerRetries = 1
	}
	return func() redis.UniversalClient {
		c := redis.NewClient(opt)
		checkTLS(c, opt.TLSConfig)
		return c
	}
}

// NewClusterClient is NewClient for a Redis Cluster. go-redis re-reads the
// slot map only on MOVED/ASK replies or every 60 s by default; a dead
// primary sends neither, so without a shorter reload a failover would leave
// a command alone at its fallback share for up to a minute (see
// distributed's TestClusterFailover).
func NewClusterClient(opt *redis.ClusterOptions) func() redis.UniversalClient {
	opt.ContextTimeoutEnabled = true
	if opt.DialerRetries == 0 {
		opt.DialerRetries = 1
	}
	if opt.ClusterStateReloadInterval == 0 {
		opt.ClusterStateReloadInterval = 250 * time.Millisecond
	}
	return func() redis.UniversalClient {
		c := redis.NewClusterClient(opt)
		checkTLS(c, opt.TLSConfig)
		return c
	}
}

// NewFailoverClient is NewClient for a server found through Redis
// Sentinel.
func NewFailoverClient(opt *redis.FailoverOptions) func() redis.UniversalClient {
	opt.ContextTimeoutEnabled = true
	if opt.DialerRetries == 0 {
		opt.DialerRetries = 1
	}
	return func() redis.UniversalClient {
		c := redis.NewFailoverClient(opt)
		checkTLS(c, opt.TLSConfig)
		return c
	}
}

// quietLogger drops go-redis's log lines.
type quietLogger struct{}

func (quietLogger) Printf(context.Context, string, ...any) {}

// Quiet drops go-redis's log lines: it logs failed dials on standard error,
// once per call while the server is down, and the commands say what
// matters themselves, once (an outage log, a notice).
func Quiet() { redis.SetLogger(quietLogger{}) }

// errClusterNode: a single-server URL names a node of a Redis Cluster.
var errClusterNode = errors.New("it is a node of a Redis Cluster: use redis+cluster://host:port,... (or REDIS_TYPE=cluster)")

// SetUpWrong reports the ways a Redis can be set up wrong for its client
// that the client's own calls do not report in time: a TLS handshake
// refused on the certificates (redisscript.TLSRefused), which go-redis
// alone takes for a network error and retries until its caller's deadline
// (the commands' clients do not: tlsCheck), so that SetUpWrong tries once,
// on a connection of its own, with the same check (without it, a refusal
// that reaches the client as a reset of its first write, not as the
// server's alert, passed for an outage); a redis:// URL for a port that speaks only
// TLS, which closes the connection on the first command, an EOF that
// looks like an outage (speaksTLS); a port where another server answers,
// not in RESP (notRESP); a client for one server talking
// to a Cluster node, which would answer MOVED for every key in another
// node's slots; and one talking to a replica, which would answer READONLY
// to every write. No wait ends any of them. Every
// command that takes --redis runs it at start, before its other checks
// (exit status 2). A server that does not answer, or refuses the INFO
// command, is not this check's business: the command's own start check
// reports what matters to it.
func SetUpWrong(ctx context.Context, client redis.UniversalClient) error {
	switch c := client.(type) {
	case *redis.Client:
		o := *c.Options()
		o.MaxRetries, o.PoolSize = -1, 1
		once := redis.NewClient(&o)
		defer once.Close()
		checkTLS(once, o.TLSConfig)
		info, err := once.Info(ctx, "cluster").Result()
		switch {
		case err == nil && strings.Contains(info, "cluster_enabled:1"):
			return errClusterNode
		case err != nil && redisscript.TLSRefused(err):
			return err
		case closedOnUs(err) && o.TLSConfig == nil && o.Network == "tcp" && speaksTLS(ctx, o.Addr):
			return errSpeaksTLS
		case notRESP(err):
			return fmt.Errorf("%w: %v", errNotRedis, err)
		case err == nil:
			// A replica refuses the scripts' writes (READONLY), which
			// a failover also brings for a moment: an outage to a
			// running command, but a URL that names a replica from the
			// start would be one forever.
			if repl, err := once.Info(ctx, "replication").Result(); err == nil && strings.Contains(repl, "role:slave") {
				return errReplica
			}
		}
	case *redis.ClusterClient:
		o := *c.Options()
		o.MaxRetries = -1
		once := redis.NewClusterClient(&o)
		defer once.Close()
		checkTLS(once, o.TLSConfig)
		err := once.Ping(ctx).Err()
		switch {
		case err != nil && redisscript.TLSRefused(err):
			return err
		case closedOnUs(err) && o.TLSConfig == nil && len(o.Addrs) > 0 && speaksTLS(ctx, o.Addrs[0]):
			return errSpeaksTLS
		case notRESP(err):
			return fmt.Errorf("%w: %v", errNotRedis, err)
		}
	}
	return nil
}

// errReplica: a single-server URL names a replica.
var errReplica = errors.New("it is a replica, which refuses writes (READONLY): name its primary (for rls, or its Sentinels: REDIS_TYPE=sentinel)")

// errNotRedis: the server answered the first command with something that
// is not RESP (an HTTP or SSH server's greeting): a wrong port.
var errNotRedis = errors.New("it does not speak Redis's protocol (a wrong port?)")

// notRESP reports whether err is go-redis's failure to read a reply that
// is not RESP at all (its first byte is no reply type, or the greeting
// after HELLO is not a map).
func notRESP(err error) bool {
	if err == nil {
		return false
	}
	msg := err.Error()
	return strings.HasPrefix(msg, "redis: invalid reply: ") || strings.HasPrefix(msg, "redis: can't parse ")
}

// errSpeaksTLS: a redis:// URL for a port that speaks only TLS.
var errSpeaksTLS = errors.New("its port speaks TLS: use a rediss:// URL (rediss+cluster:// for a Cluster, REDIS_TLS=true for rls)")

// closedOnUs reports whether err is the server closing the connection on
// the first command, as a port that speaks only TLS does with one in
// plain text (a server going down does it too: speaksTLS tells them apart).
func closedOnUs(err error) bool {
	return errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, syscall.ECONNRESET)
}

// tlsProbeTimeout bounds speaksTLS: a server that speaks neither TLS nor
// anything that answers a ClientHello waits for more, and the start check
// that called it has its own work left to do.
const tlsProbeTimeout = time.Second

// speaksTLS reports whether the server at addr answers a TLS handshake: it
// does when the handshake ends, and when it fails on a TLS alert (no
// client certificate, say); it does not when the server answers anything
// else or closes the connection. Nothing is verified, nothing is sent
// after the handshake: the answer only names the URL's scheme in an error.
func speaksTLS(ctx context.Context, addr string) bool {
	ctx, cancel := context.WithTimeout(ctx, tlsProbeTimeout)
	defer cancel()
	var d tls.Dialer
	d.Config = &tls.Config{InsecureSkipVerify: true} // a probe of the protocol, not a connection to use
	conn, err := d.DialContext(ctx, "tcp", addr)
	if err == nil {
		conn.Close()
		return true
	}
	return redisscript.TLSAlert(err)
}

// CheckAtStart is the look a serving command whose store rides out
// outages takes at its Redis before it serves: a Cluster node named as a
// single server or a TLS handshake refused (SetUpWrong), then check, the store's own start
// check (a script run once), within StartTimeout. A Redis set up wrong is
// err, naming where (exit status 2); one that does not answer is down,
// for a warning: the command serves and its store waits for Redis.
func CheckAtStart(client redis.UniversalClient, where string, check func(context.Context) error) (down, err error) {
	ctx, cancel := context.WithTimeout(context.Background(), StartTimeout)
	defer cancel()
	if err := SetUpWrong(ctx, client); err != nil {
		return nil, fmt.Errorf("redis at %s is set up wrong: %w", where, err)
	}
	if err := check(ctx); err != nil {
		if Misconfigured(err) {
			return nil, fmt.Errorf("redis at %s is set up wrong: %w", where, err)
		}
		return err, nil
	}
	return nil, nil
}

// Misconfigured reports whether Redis answered with an error no retry can
// fix (set up wrong), as a library classified it (ErrMisconfigured, one
// value for throttle, rls and distributed) or, for a client's own call such
// as a PING, as the libraries' shared classifier does.
func Misconfigured(err error) bool {
	return errors.Is(err, throttle.ErrMisconfigured) || redisscript.Classify(err) == redisscript.Misconfigured
}

// Evictions reports how Redis may forget a limit: a server (or, in a
// Cluster, a primary) with a maxmemory and a maxmemory-policy other than
// noeviction evicts keys when it is full, the limiters' too (every policy
// may take them: they all have a TTL), and a limit whose key is evicted
// starts again at its full allowance, silently admitting more than it
// should. It returns what to say after "redis at WHERE", or "" when Redis
// keeps its keys, or when INFO is refused (a managed Redis's ACL): a
// warning, for the commands to print at start, since a Redis sized for its
// keys may never evict.
func Evictions(ctx context.Context, client redis.UniversalClient) string {
	var mu sync.Mutex
	var found string
	look := func(ctx context.Context, c *redis.Client) error {
		info, err := c.Info(ctx, "memory").Result()
		if err != nil {
			return nil
		}
		fields := map[string]string{}
		for _, line := range strings.Split(info, "\n") {
			if k, v, ok := strings.Cut(strings.TrimSpace(line), ":"); ok {
				fields[k] = v
			}
		}
		policy := fields["maxmemory_policy"]
		if fields["maxmemory"] == "0" || fields["maxmemory"] == "" || policy == "" || policy == "noeviction" {
			return nil
		}
		mu.Lock()
		defer mu.Unlock()
		if found == "" {
			found = fmt.Sprintf("evicts keys when it is full (maxmemory %s, maxmemory-policy %s): a limit whose key it evicts starts again at its full allowance; with maxmemory-policy noeviction limits hold (and a full Redis is an outage)",
				fields["maxmemory_human"], policy)
		}
		return nil
	}
	switch c := client.(type) {
	case *redis.ClusterClient:
		_ = c.ForEachMaster(ctx, look)
	case *redis.Client:
		_ = look(ctx, c)
	}
	return found
}
