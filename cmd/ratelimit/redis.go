package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"math"
	"net/url"
	"strings"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/smoothrate/ratelimit/distributed"
	"github.com/smoothrate/ratelimit/internal/cli/command"
	"github.com/smoothrate/ratelimit/internal/redisscript"
	"github.com/smoothrate/ratelimit/throttle"
)

// This file holds what pipe and run share to put their limit in Redis
// (package distributed): the flags, the URL forms, the start-up check, a
// notice when the limiter falls back, and closing.

// redisHelp is the part of a command's usage text that explains --redis.
// unit names what the command's rate counts ("bytes", "jobs").
func redisHelp(unit string) string {
	return `Sharing one limit across processes (and machines): give every process the
same --redis URL and --name. They then draw from one rate of ` + unit + `
kept in Redis (package distributed): together they go at RATE, not at RATE
each. While a name is in use, its rate and kind (--warmup or --burst) are
those of the process that created it, and it records what it counts (bytes
for pipe, jobs for run). A process that asks for another rate, kind or
unit is refused with exit status 2, as two programs that picked the same
name by accident must not share one limit; with --join it joins anyway and
adopts the stored rate. Redis URLs:
  redis://[user:password@]host:port[/db]    one server (rediss:// for TLS)
  redis+cluster://host:port,host:port       a Redis Cluster (rediss+cluster://)
The password is better given with --redis-password-file or $REDIS_PASSWORD
than in the URL, which every user of the machine can read on the command
line.
When Redis cannot be reached, a process fails open by default: it spends
the permits it already holds, then runs alone at --safe-rate, or at RATE
divided by the number of processes Redis last reported, and shares again as
soon as Redis answers. A process that has never reached Redis knows no
process count: it starts only with --safe-rate, else it exits with status
1. With --fail-closed a process stops instead, with exit status 1. A Redis
that answers but is set up wrong for the limit (no such database, a wrong
password, a cluster URL for a single server, another program's key under
the name) is not an outage: the command exits with status 2 and says why.
`
}

// redisFlags are the flags that move a command's limit into Redis.
type redisFlags struct {
	unit       string // what the command's rate counts, recorded with the shared state
	url        string
	name       string
	failClosed bool
	safeRate   string
	join       bool
	// passwordFile holds Redis's password, so that it need not be in
	// the URL on the command line, where every user of the machine can
	// read it; $REDIS_PASSWORD does the same.
	passwordFile string
}

// register adds the flags to fs; unit names what the command's rate counts
// ("bytes", "jobs").
func (f *redisFlags) register(fs *flag.FlagSet, unit string) {
	f.unit = unit
	fs.BoolVar(&f.join, "join", false, "with --redis: join --name even if it holds another rate, kind or unit, adopting them (else exit status 2)")
	fs.StringVar(&f.url, "redis", "", "share the limit with other processes through Redis at `URL` (redis://host:6379/0, redis+cluster://h1:p1,h2:p2); needs --name")
	fs.StringVar(&f.name, "name", "", "with --redis: the shared limit's `name`; processes with the same name share one rate")
	fs.StringVar(&f.passwordFile, "redis-password-file", "", "with --redis: read the password from this `file` (else from $REDIS_PASSWORD, else the URL)")
	fs.BoolVar(&f.failClosed, "fail-closed", false, "with --redis: stop (exit status 1) when Redis cannot be reached, instead of carrying on at a fallback rate")
	fs.StringVar(&f.safeRate, "safe-rate", "", "with --redis: this process's `rate` while Redis cannot be reached (default: RATE divided by the processes Redis last reported; needed to start while Redis is down)")
}

// sharedConfig is the checked form of redisFlags.
type sharedConfig struct {
	newClient func() redis.UniversalClient
	where     string // the server(s), without password, for messages
	name      string
	unit      string // recorded with the state: "bytes" (pipe) or "jobs" (run)
	join      bool   // adopt a name that holds another rate, kind or unit
	failClose bool
	safeRate  float64 // 0: the library's default
}

// check validates the flags; it returns nil, nil when --redis is not given.
// parseRate reads --safe-rate in the command's own units.
func (f *redisFlags) check(parseRate func(string) (float64, error)) (*sharedConfig, error) {
	if f.url == "" {
		for _, used := range []struct {
			set  bool
			flag string
		}{{f.name != "", "--name"}, {f.failClosed, "--fail-closed"}, {f.safeRate != "", "--safe-rate"}, {f.join, "--join"}, {f.passwordFile != "", "--redis-password-file"}} {
			if used.set {
				return nil, fmt.Errorf("%s only applies to a limit shared through Redis: add --redis URL", used.flag)
			}
		}
		return nil, nil
	}
	if f.name == "" {
		return nil, errors.New("--redis needs --name: the processes that share a limit find it by name, e.g. --name uploads")
	}
	c := &sharedConfig{name: f.name, unit: f.unit, join: f.join, failClose: f.failClosed}
	password, err := redisPassword(f.passwordFile)
	if err != nil {
		return nil, err
	}
	if c.newClient, c.where, err = parseRedisURL(f.url, password); err != nil {
		return nil, fmt.Errorf("--redis %q: %w", redactURL(f.url), err)
	}
	if f.safeRate != "" {
		if f.failClosed {
			return nil, errors.New("--safe-rate is the rate used instead of failing: it cannot be combined with --fail-closed")
		}
		// Both commands' rate parsers reject 0, which WithSafeRate
		// would take as "the default".
		if c.safeRate, err = parseRate(f.safeRate); err != nil {
			return nil, fmt.Errorf("--safe-rate %w", err)
		}
	}
	return c, nil
}

const clusterSuffix = "+cluster"

// parseRedisURL reads a server URL (redis.ParseURL: redis://, rediss://,
// unix://) or a cluster URL of our own: redis+cluster://host:port,host:port
// or rediss+cluster://, whose first node becomes the URL's host and the
// others go.redis's addr= parameters (redis.ParseClusterURL's form, which is
// accepted too). password, unless empty, is the password, given apart from
// the URL (a file, the environment) so that it need not be on a command
// line; the URL must not hold another. It connects to nothing.
func parseRedisURL(s, password string) (newClient func() redis.UniversalClient, where string, err error) {
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
		// The distributed limiter bounds each call with a context
		// deadline; this makes the deadline bound the socket I/O too.
		opt.ContextTimeoutEnabled = true
		if opt.DialerRetries == 0 {
			// One dial per call: the limiter retries on its own,
			// with growing pauses, and a refused connection is
			// reported as such rather than as a timeout.
			opt.DialerRetries = 1
		}
		return func() redis.UniversalClient { return redis.NewClient(opt) }, opt.Addr, nil
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
	opt.ContextTimeoutEnabled = true
	if opt.DialerRetries == 0 {
		opt.DialerRetries = 1
	}
	// go-redis re-reads the slot map only on MOVED/ASK replies or every
	// 60 s by default; a dead primary sends neither, so without this a
	// failover would leave the command alone at its fallback share for up
	// to a minute (see distributed's TestClusterFailover).
	if opt.ClusterStateReloadInterval == 0 {
		opt.ClusterStateReloadInterval = 250 * time.Millisecond
	}
	return func() redis.UniversalClient { return redis.NewClusterClient(opt) }, strings.Join(opt.Addrs, ","), nil
}

// quietLogger drops go-redis's log lines.
type quietLogger struct{}

func (quietLogger) Printf(context.Context, string, ...any) {}

// sharedLimit is a distributed limiter with the client it owns.
type sharedLimit struct {
	*distributed.Limiter
	client redis.UniversalClient
	cfg    *sharedConfig
	down   bool // start found Redis unreachable and said so
}

// redisCallTimeout bounds one Redis call of the limiter (the library's
// default is 50 ms, for servers). A command runs on machines busy with
// other work, where a process can stall for tens of milliseconds; a call
// that outlives its timeout puts the limiter in fallback until a probe
// succeeds, so a short one makes a command flap between sharing and running
// alone. 200 ms of waiting on a hung Redis costs a pipe or a job queue
// nothing a user would notice.
const redisCallTimeout = 200 * time.Millisecond

// open makes the limiter. rate is the fleet's rate; opts carry the kind
// (warm-up or burst). It connects to nothing: see start.
func (c *sharedConfig) open(rate float64, opts ...distributed.Option) (*sharedLimit, error) {
	opts = append(opts, distributed.WithCallTimeout(redisCallTimeout), distributed.WithUnit(c.unit))
	if !c.join {
		opts = append(opts, distributed.WithRefuseMismatch())
	}
	if c.failClose {
		opts = append(opts, distributed.WithFailurePolicy(distributed.FailClosed))
	} else {
		opts = append(opts, distributed.WithSafeRate(c.safeRate))
	}
	// go-redis logs failed dials on standard error, once per call while
	// the server is down; the command says what matters itself (start,
	// watch), once.
	redis.SetLogger(quietLogger{})
	client := c.newClient()
	lim, err := distributed.New(client, c.name, rate, opts...)
	if err != nil {
		_ = client.Close()
		return nil, err
	}
	return &sharedLimit{Limiter: lim, client: client, cfg: c}, nil
}

// begin is what pipe and run do to share their limit: open the limiter,
// check that Redis answers (start) and watch it. A status other than command.ExitOK
// means the command must exit with it; the error has been printed on w.
// Otherwise stop, to be deferred, ends the watch and closes the limiter,
// giving unspent permits back.
func (c *sharedConfig) begin(w io.Writer, prefix string, rate float64, opts []distributed.Option, format func(float64) string) (sl *sharedLimit, stop func(), status int) {
	sl, err := c.open(rate, opts...)
	if err != nil {
		fmt.Fprintf(w, "%s: %v\n", prefix, err)
		return nil, nil, command.ExitUsage
	}
	if err := sl.start(w, prefix, format); err != nil {
		fmt.Fprintf(w, "%s: %v\n", prefix, err)
		sl.close(w, prefix)
		if errors.Is(err, errMisconfigured) || errors.Is(err, distributed.ErrMisconfigured) {
			return nil, nil, command.ExitUsage
		}
		return nil, nil, command.ExitFail
	}
	stopWatch := sl.watch(w, prefix, format)
	return sl, func() {
		stopWatch()
		sl.close(w, prefix)
	}, command.ExitOK
}

// errMisconfigured marks a start-up failure that is a configuration error
// (exit status 2), not an outage.
var errMisconfigured = errors.New("not set up for this limit")

// misconfiguredStatus is the exit status for a limiter error: 2 (a usage
// error) when Redis answered but is set up wrong, which no fallback and no
// wait can fix; else status.
func misconfiguredStatus(err error, status int) int {
	if errors.Is(err, distributed.ErrMisconfigured) {
		return command.ExitUsage
	}
	return status
}

// redisStartTimeout bounds the start-up check.
const redisStartTimeout = time.Second

// start checks that Redis answers, so that a wrong address or a server
// that is down is reported before any work, not as a failed write later,
// and joins the name (distributed's Join), so that a name holding another
// limit, or another program's key, is too.
// Failing closed, an unreachable Redis is an error (the command exits with
// status 1). Failing open with a safe rate, it is a warning on w and the
// command goes on: the limiter runs alone at the safe rate and joins the
// fleet as soon as Redis answers. Failing open without one, it is an error
// too: a limiter that Redis has never answered knows no process count to
// divide the rate by, and package distributed refuses rather than let every
// process run at the full rate.
func (s *sharedLimit) start(w io.Writer, prefix string, format func(float64) string) error {
	ctx, cancel := context.WithTimeout(context.Background(), redisStartTimeout)
	defer cancel()
	err := s.client.Ping(ctx).Err()
	if err == nil {
		if err := clusterNodeAsServer(ctx, s.client); err != nil {
			return fmt.Errorf("redis at %s is %w: %w", s.cfg.where, errMisconfigured, err)
		}
		// Any other failure is the limiter's to handle, as for any
		// later call: fail open or closed.
		err := s.Join(ctx)
		if errors.Is(err, distributed.ErrNameMismatch) {
			return nameTaken{s.cfg.name, s.Rate(), s.cfg.unit, s.Stats(), err}
		}
		if errors.Is(err, distributed.ErrMisconfigured) {
			return err
		}
		return nil
	}
	if misconfiguredRedis(err) {
		// Redis answered: not an outage, so no --safe-rate applies
		// and no retry helps. A fleet started this way would run
		// alone, every process, and never share.
		return fmt.Errorf("redis at %s is %w: %v (a wrong database, password or URL scheme?)", s.cfg.where, errMisconfigured, err)
	}
	if s.cfg.failClose {
		return fmt.Errorf("redis at %s cannot be reached: %w (--fail-closed: not starting)", s.cfg.where, err)
	}
	if s.cfg.safeRate == 0 {
		return fmt.Errorf("redis at %s cannot be reached: %w (failing open needs --safe-rate until Redis has answered once, to know this process's share: not starting)", s.cfg.where, err)
	}
	fmt.Fprintf(w, "%s: warning: redis at %s cannot be reached: %v; running alone at %s until it answers (fail-open)\n",
		prefix, s.cfg.where, err, format(s.cfg.safeRate))
	s.down = true
	return nil
}

// nameTaken is start's error for a name that holds another limit.
type nameTaken struct {
	name string
	rate float64           // this command's
	unit string            // this command's
	st   distributed.Stats // what the name holds
	err  error
}

func (e nameTaken) Error() string {
	held := fmt.Sprintf("%g/s %s", e.st.StoredRate, e.st.StoredUnit)
	switch {
	case e.st.StoredKind == "warming-up":
		held += ", warming up"
	case e.st.StoredUnit == e.unit && math.Abs(e.st.StoredRate-e.rate) <= 1e-9*e.rate:
		held += ", with no warm-up" // the kind is what differs
	}
	switch e.st.StoredUnit {
	case "bytes":
		held += " (a pipe)"
	case "jobs":
		held += " (a run)"
	case "":
		held += "(no unit recorded)"
	}
	return fmt.Sprintf("name %q holds %s; --join adopts it", e.name, held)
}

func (e nameTaken) Unwrap() error { return e.err }

// watchInterval is how often watch looks at the limiter's state.
const watchInterval = 200 * time.Millisecond

// watch writes a line on w each time a fail-open limiter loses Redis or
// finds it again, so that a user sees why the pace changed. It returns the
// function that stops it. Failing closed there is nothing to watch: the
// command stops with the error.
func (s *sharedLimit) watch(w io.Writer, prefix string, format func(float64) string) (stop func()) {
	if s.cfg.failClose {
		return func() {}
	}
	done := make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() {
		t := time.NewTicker(watchInterval)
		defer t.Stop()
		down := s.down // already reported by start
		for {
			select {
			case <-t.C:
			case <-done:
				return
			}
			st := s.Stats()
			switch {
			case st.InFallback && !down && misconfiguredRedis(st.LastError):
				fmt.Fprintf(w, "%s: redis at %s answers, but is not set up for this limit: %v; refusing\n",
					prefix, s.cfg.where, st.LastError)
			case st.InFallback && !down && st.FallbackRate == 0:
				fmt.Fprintf(w, "%s: redis at %s cannot be reached: %v; no --safe-rate, and no share known yet: refusing until it answers\n",
					prefix, s.cfg.where, st.LastError)
			case st.InFallback && !down:
				fmt.Fprintf(w, "%s: redis at %s cannot be reached: %v; going on alone at %s (fail-open)\n",
					prefix, s.cfg.where, st.LastError, format(st.FallbackRate))
			case !st.InFallback && down:
				fmt.Fprintf(w, "%s: redis at %s answers again; sharing the limit %q\n", prefix, s.cfg.where, s.cfg.name)
			}
			down = st.InFallback
		}
	})
	return func() {
		close(done)
		wg.Wait()
	}
}

// closeTimeout bounds Close: giving permits back is one Redis call, and a
// command must not hang on exit because Redis does.
const closeTimeout = 2 * time.Second

// close gives the permits this process did not spend back to the fleet and
// closes the client. A failure only means that the unspent permits lapse
// at the end of their lease: it is reported on w and changes no exit
// status.
func (s *sharedLimit) close(w io.Writer, prefix string) {
	ctx, cancel := context.WithTimeout(context.Background(), closeTimeout)
	defer cancel()
	if err := s.Close(ctx); err != nil && !s.Stats().InFallback {
		fmt.Fprintf(w, "%s: warning: %v\n", prefix, err)
	}
	_ = s.client.Close()
}

// formatJobRate prints a rate of jobs per second for messages.
func formatJobRate(r float64) string {
	if math.IsInf(r, 1) {
		return "no limit"
	}
	return fmt.Sprintf("%.4g jobs/s", r)
}

// errClusterNode: a single-server URL names a node of a Redis Cluster.
var errClusterNode = errors.New("it is a node of a Redis Cluster: use redis+cluster://host:port,... (or REDIS_TYPE=cluster)")

// clusterNodeAsServer reports errClusterNode when a client for one server
// talks to a Cluster node: the node would answer MOVED for every key in
// another node's slots, which no wait would end. Every command that takes
// --redis runs it at start (exit status 2). A node that does not answer is
// not this check's business (the command's own start check reports it).
func clusterNodeAsServer(ctx context.Context, client redis.UniversalClient) error {
	c, ok := client.(*redis.Client)
	if !ok {
		return nil
	}
	info, err := c.Info(ctx, "cluster").Result()
	if err == nil && strings.Contains(info, "cluster_enabled:1") {
		return errClusterNode
	}
	return nil
}

// misconfiguredRedis: Redis answered with an error no retry can fix (set
// up wrong), as a library classified it (throttle's, rls's and
// distributed's ErrMisconfigured) or, for a client's own call such as a
// PING, as the libraries' shared classifier does.
func misconfiguredRedis(err error) bool {
	return errors.Is(err, throttle.ErrMisconfigured) || errors.Is(err, distributed.ErrMisconfigured) ||
		redisscript.Classify(err) == redisscript.Misconfigured
}
