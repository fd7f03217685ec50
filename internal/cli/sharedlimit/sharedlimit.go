// Package sharedlimit is how pipe and run share one limit across processes
// and machines through Redis (package distributed): the flags (--redis,
// --name, --join, --fail-closed, --safe-rate) and their usage text, the
// check at start that tells a Redis that is down from one set up wrong or a
// name that holds another limit, a notice each time the limiter loses Redis
// or finds it again, and giving unspent permits back at the end.
package sharedlimit

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"math"
	"os"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/smoothrate/ratelimit/distributed"
	"github.com/smoothrate/ratelimit/internal/cli/command"
	"github.com/smoothrate/ratelimit/internal/cli/redisflag"
	"github.com/smoothrate/ratelimit/internal/tlsfiles"
)

// Help is the part of a command's usage text that explains --redis.
// unit names what the command's rate counts ("bytes", "job starts").
func Help(unit string) string {
	return `Sharing one limit across processes (and machines): give every process the
same --redis URL and --name. They then draw from one rate of ` + unit + `
kept in Redis (package distributed): together they go at RATE, not at RATE
each. While a name is in use, its rate and kind (--warmup or --burst) are
those of the process that created it, and it records what it counts (bytes
for pipe, jobs for run). A process that asks for another rate, kind or
unit is refused with exit status 2, as two programs that picked the same
name by accident must not share one limit; with --join it joins anyway and
adopts the stored rate. Redis URLs:
` + redisflag.URLForms + `The password is better given with --redis-password-file or $REDIS_PASSWORD
than in the URL, which every user of the machine can read on the command
line. A rediss:// URL takes a client certificate and CAs with the
--redis-tls-* flags; the certificate is read again when its files change.
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

// Flags are the flags that move a command's limit into Redis.
type Flags struct {
	unit       string // what the command's rate counts, recorded with the shared state
	redis      redisflag.Flags
	name       string
	failClosed bool
	safeRate   string
	join       bool
}

// Register adds the flags to fs; unit names what the command's rate counts
// ("bytes", "jobs").
func (f *Flags) Register(fs *flag.FlagSet, unit string) {
	f.unit = unit
	fs.BoolVar(&f.join, "join", false, "with --redis: join --name even if it holds another rate, kind or unit, adopting them (else exit status 2)")
	f.redis.Register(fs, "share the limit with other processes through Redis at `URL` (redis://host:6379/0, redis+cluster://h1:p1,h2:p2); needs --name")
	f.redis.TLS.Register(fs)
	fs.StringVar(&f.name, "name", "", "with --redis: the shared limit's `name`; processes with the same name share one rate")
	fs.BoolVar(&f.failClosed, "fail-closed", false, "with --redis: stop (exit status 1) when Redis cannot be reached, instead of carrying on at a fallback rate")
	fs.StringVar(&f.safeRate, "safe-rate", "", "with --redis: this process's `rate` while Redis cannot be reached (default: RATE divided by the processes Redis last reported; needed to start while Redis is down)")
}

// Config is the checked form of Flags.
type Config struct {
	newClient func() redis.UniversalClient
	where     string            // the server(s), without password, for messages
	cert      *tlsfiles.KeyPair // --redis-tls-cert's, to keep fresh; nil without one
	certFile  string
	name      string
	unit      string // recorded with the state: "bytes" (pipe) or "jobs" (run)
	join      bool   // adopt a name that holds another rate, kind or unit
	failClose bool
	safeRate  float64 // 0: the library's default
}

// Check validates the flags; it returns nil, nil when --redis is not given.
// parseRate reads --safe-rate in the command's own units.
func (f *Flags) Check(parseRate func(string) (float64, error)) (*Config, error) {
	if f.redis.URL == "" {
		for _, used := range []struct {
			set  bool
			flag string
		}{{f.name != "", "--name"}, {f.failClosed, "--fail-closed"}, {f.safeRate != "", "--safe-rate"}, {f.join, "--join"}, {f.redis.PasswordFile != "", "--redis-password-file"}, {f.redis.TLS.Given(), "--redis-tls-*"}} {
			if used.set {
				return nil, fmt.Errorf("%s only applies to a limit shared through Redis: add --redis URL", used.flag)
			}
		}
		return nil, nil
	}
	if f.name == "" {
		return nil, errors.New("--redis needs --name: the processes that share a limit find it by name, e.g. --name uploads")
	}
	c := &Config{name: f.name, unit: f.unit, join: f.join, failClose: f.failClosed, certFile: f.redis.TLS.CertFile}
	var err error
	if c.newClient, c.where, c.cert, err = f.redis.Open(os.Getenv); err != nil {
		return nil, err
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

// Limit is a distributed limiter with the client it owns.
type Limit struct {
	*distributed.Limiter
	client redis.UniversalClient
	cfg    *Config
	down   bool // start found Redis unreachable and said so
}

// Name is the name the limit is shared under (--name).
func (s *Limit) Name() string { return s.cfg.name }

// open makes the limiter. rate is the fleet's rate; opts carry the kind
// (warm-up or burst). It connects to nothing: see start.
func (c *Config) open(rate float64, opts ...distributed.Option) (*Limit, error) {
	opts = append(opts, distributed.WithCallTimeout(redisflag.CallTimeout), distributed.WithUnit(c.unit))
	if !c.join {
		opts = append(opts, distributed.WithRefuseMismatch())
	}
	if c.failClose {
		opts = append(opts, distributed.WithFailurePolicy(distributed.FailClosed))
	} else {
		opts = append(opts, distributed.WithSafeRate(c.safeRate))
	}
	redisflag.Quiet() // start and watch say what matters, once
	client := c.newClient()
	lim, err := distributed.New(client, c.name, rate, opts...)
	if err != nil {
		_ = client.Close()
		return nil, err
	}
	return &Limit{Limiter: lim, client: client, cfg: c}, nil
}

// Begin is what pipe and run do to share their limit: open the limiter,
// check that Redis answers (start) and watch it. A status other than
// command.ExitOK means the command must exit with it; the error has been
// printed on w. Otherwise stop, to be deferred, ends the watch and closes
// the limiter, giving unspent permits back.
func (c *Config) Begin(w io.Writer, prefix string, rate float64, opts []distributed.Option, format func(float64) string) (sl *Limit, stop func(), status int) {
	sl, err := c.open(rate, opts...)
	if err != nil {
		fmt.Fprintf(w, "%s: %v\n", prefix, err)
		return nil, nil, command.ExitUsage
	}
	if err := sl.start(w, prefix, format); err != nil {
		fmt.Fprintf(w, "%s: %v\n", prefix, err)
		sl.close(w, prefix)
		if errors.Is(err, distributed.ErrMisconfigured) {
			return nil, nil, command.ExitUsage
		}
		return nil, nil, command.ExitFail
	}
	stopWatch := sl.watch(w, prefix, format)
	stopCert := redisflag.WatchCert(c.cert, c.certFile, 0, func(format string, args ...any) {
		fmt.Fprintf(w, prefix+": "+format+"\n", args...)
	})
	return sl, func() {
		stopCert()
		stopWatch()
		sl.close(w, prefix)
	}, command.ExitOK
}

// errMisconfigured marks a start-up failure that is a configuration error
// (exit status 2), not an outage: the CLI's own finding (a Cluster node
// given as a server, a PING answered with an error no retry fixes), worded
// for this command and matching the libraries' one ErrMisconfigured.
var errMisconfigured error = notSetUp{}

type notSetUp struct{}

func (notSetUp) Error() string        { return "not set up for this limit" }
func (notSetUp) Is(target error) bool { return target == distributed.ErrMisconfigured }

// MisconfiguredStatus is the exit status for a limiter error: 2 (a usage
// error) when Redis answered but is set up wrong, which no fallback and no
// wait can fix; else status.
func MisconfiguredStatus(err error, status int) int {
	if errors.Is(err, distributed.ErrMisconfigured) {
		return command.ExitUsage
	}
	return status
}

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
func (s *Limit) start(w io.Writer, prefix string, format func(float64) string) error {
	ctx, cancel := context.WithTimeout(context.Background(), redisflag.StartTimeout)
	defer cancel()
	if err := redisflag.SetUpWrong(ctx, s.client); err != nil {
		return fmt.Errorf("redis at %s is %w: %w", s.cfg.where, errMisconfigured, err)
	}
	err := s.client.Ping(ctx).Err()
	if err == nil {
		// Any other failure is the limiter's to handle, as for any
		// later call: fail open or closed.
		err := s.Join(ctx)
		if errors.Is(err, distributed.ErrNameMismatch) {
			return nameTaken{s.cfg.name, s.Rate(), s.cfg.unit, s.Stats(), err}
		}
		if errors.Is(err, distributed.ErrMisconfigured) {
			return err
		}
		if ev := redisflag.Evictions(ctx, s.client); ev != "" {
			fmt.Fprintf(w, "%s: warning: redis at %s %s\n", prefix, s.cfg.where, ev)
		}
		return nil
	}
	if redisflag.Misconfigured(err) {
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
func (s *Limit) watch(w io.Writer, prefix string, format func(float64) string) (stop func()) {
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
			case st.InFallback && !down && redisflag.Misconfigured(st.LastError):
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
func (s *Limit) close(w io.Writer, prefix string) {
	ctx, cancel := context.WithTimeout(context.Background(), closeTimeout)
	defer cancel()
	if err := s.Close(ctx); err != nil && !s.Stats().InFallback {
		fmt.Fprintf(w, "%s: warning: %v\n", prefix, err)
	}
	_ = s.client.Close()
}
