// Package run is `ratelimit run`: like xargs, it runs a command per job (a
// line of standard input, or a word after ":::"), starting jobs no faster
// than a given rate and at most so many at a time (package jobs over a
// limiter, or a limit shared through Redis).
package run

import (
	"bufio"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"io/fs"
	"math"
	"os"
	"os/exec"
	"os/signal"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/smoothrate/ratelimit"
	"github.com/smoothrate/ratelimit/distributed"
	"github.com/smoothrate/ratelimit/internal/cli/command"
	"github.com/smoothrate/ratelimit/internal/cli/sharedlimit"
	"github.com/smoothrate/ratelimit/internal/units"
	"github.com/smoothrate/ratelimit/jobs"
)

const runUsage = `Usage: ratelimit run --rate RATE [flags] [--] command [arg ...] [::: job ...]

Run runs command once per job, like xargs, starting jobs no faster than
RATE and at most --parallel at a time. The jobs are the lines of standard
input (blank lines are skipped), or the words after ":::". In the command's
arguments every "{}" is replaced by the job; if no argument has "{}", the job
is added as the last argument. The command is run directly, not by a shell:
for shell syntax use  sh -c '... "$1" ...' sh {}  so the job stays one word.

RATE is jobs per second ("5", "5/s" or "1e3"), or per another unit:
"300/m", "2/h", "1000/d", "3/100ms"; "inf" for no limit. Numbers are read as
pipe reads them.

Jobs inherit standard output and standard error; their standard input is
empty. With --parallel above 1 their output may interleave, as with xargs -P.

Examples:
  ratelimit run --rate 5/s --parallel 2 -- curl -sO {} < urls.txt
  ratelimit run --rate 1/s -- echo hello ::: alice bob carol
  ratelimit run --redis redis://db:6379/0 --name api --rate 100/s -P 8 -- ./call {} < ids

`

const runUsageEnd = `
Exit status: 0 if every job succeeded, 1 if any failed (or was not started,
as when Redis cannot be reached with --fail-closed), 2 for bad flags or
values (or a Redis set up wrong), 126 if the command cannot be executed, 127 if it cannot be found,
130 when interrupted (128 + the signal's number), as xargs does.

Flags:
`

// xargs's statuses for a command that cannot be run.
const (
	exitCannotRun = 126 // found, but not executable
	exitNotFound  = 127
)

// startStatus is the status for a command that could not be started (err
// from exec.LookPath or exec.Cmd.Start): not found, or not executable.
func startStatus(err error) int {
	if errors.Is(err, exec.ErrNotFound) || errors.Is(err, fs.ErrNotExist) {
		return exitNotFound
	}
	return exitCannotRun
}

// runConfig is what the flags of run describe.
type runConfig struct {
	rate     float64
	parallel int
	burst    float64 // jobs that may start at once after an idle spell
	warmup   time.Duration
	failFast bool
	verbose  bool
	command  []string // the template, with {} or not
	jobs     []string // from ":::", or nil to read standard input
}

// Summary is run's line in the list of commands.
const Summary = "run a command per input line, like xargs, at a given rate and parallelism"

// Run runs `ratelimit run` with args (what follows "run" on the command
// line) and returns its exit status.
func Run(args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("run", flag.ContinueOnError)
	cfg := runConfig{burst: 1}
	var rateS string
	fs.StringVar(&rateS, "rate", "", "how fast jobs may start: `RATE` jobs per second, or 300/m, 2/h, 3/100ms (required)")
	fs.IntVar(&cfg.parallel, "parallel", 1, "run at most `N` jobs at once")
	fs.IntVar(&cfg.parallel, "P", 1, "short for --parallel")
	fs.Var(command.Float{P: &cfg.burst, Parse: units.Number}, "burst", "how many `jobs` may start at once, beyond the first, after an idle spell")
	fs.DurationVar(&cfg.warmup, "warmup", 0, "start at a third of the rate and speed up to it over this `period`; excludes --burst")
	fs.BoolVar(&cfg.failFast, "fail-fast", false, "start no more jobs after one fails (running ones finish)")
	fs.BoolVar(&cfg.verbose, "verbose", false, "print each command on standard error before running it")
	fs.BoolVar(&cfg.verbose, "v", false, "short for --verbose")
	var rf sharedlimit.Flags
	rf.Register(fs, "jobs")
	fs.Usage = func() {
		fmt.Fprint(fs.Output(), runUsage+sharedlimit.Help("job starts")+runUsageEnd)
		fs.PrintDefaults()
	}
	// Flags end at the command: its own flags are its own.
	words, done, status := command.ParseFlags(fs, args, false, stdout, stderr)
	if done {
		return status
	}
	const prefix = "ratelimit run"
	if err := cfg.finish(rateS, command.Given(fs)["burst"], words); err != nil {
		fmt.Fprintf(stderr, "%s: %v\n", prefix, err)
		return command.ExitUsage
	}
	// --safe-rate is a rate the command may run at: as slow as --rate
	// may be, no slower.
	shared, err := rf.Check(func(s string) (float64, error) {
		r, err := units.JobRate(s)
		if err == nil && r < 1/slowestJob.Seconds() {
			err = fmt.Errorf("%q: too slow: more than a day between jobs (the slowest rate is 1/d)", s)
		}
		return r, err
	})
	if err != nil {
		fmt.Fprintf(stderr, "%s: %v\n", prefix, err)
		return command.ExitUsage
	}
	var lim ratelimit.Acquirer
	if shared == nil {
		local, err := cfg.newLimiter()
		if err != nil {
			fmt.Fprintf(stderr, "%s: %v\n", prefix, err)
			return command.ExitUsage
		}
		lim = local
	} else {
		opts, err := cfg.distributedOptions()
		if err != nil {
			fmt.Fprintf(stderr, "%s: %v\n", prefix, err)
			return command.ExitUsage
		}
		sl, stop, status := shared.Begin(stderr, prefix, cfg.rate, opts, formatJobRate)
		if status != command.ExitOK {
			return status
		}
		defer stop()
		lim = sl
	}
	// Look the command up once, unless it is itself a template.
	path := cfg.command[0]
	if !strings.Contains(path, "{}") {
		if path, err = exec.LookPath(path); err != nil {
			fmt.Fprintf(stderr, "%s: %v\n", prefix, err)
			return startStatus(err)
		}
	}

	// Dispatch stops on a signal, or on the first failure with --fail-fast.
	ctx, cancel := context.WithCancelCause(context.Background())
	defer cancel(nil)
	// Interrupted, stop starting jobs and let the running ones be stopped
	// by the same signal (a terminal sends it to the whole process group);
	// a second signal kills the process as usual.
	var caught atomic.Value // os.Signal
	sigs := make(chan os.Signal, 1)
	signal.Notify(sigs, os.Interrupt, syscall.SIGTERM)
	defer signal.Stop(sigs)
	go func() {
		select {
		case sig := <-sigs:
			signal.Stop(sigs)
			caught.Store(sig)
			cancel(fmt.Errorf("interrupted (%v)", sig))
		case <-ctx.Done():
		}
	}()

	out, errOut := syncWriter(stdout), syncWriter(stderr)
	items := make(chan string)
	inputDone := make(chan error, 1)
	var given atomic.Int64 // jobs read, whether or not they were handed over
	go func() {
		inputDone <- feedJobs(ctx, cfg.jobs, stdin, items, &given)
		close(items)
	}()

	var reported, failed, notStarted int
	startFailure := 0 // 126 or 127 once a job's command could not be started
	errFailFast := errors.New("a job failed (--fail-fast)")
	err = jobs.Stream(ctx, lim, cfg.parallel, items, func(_ context.Context, job string) error {
		argv := expandCommand(cfg.command, job)
		if cfg.verbose {
			fmt.Fprintln(errOut, "+", strings.Join(quoteWords(argv), " "))
		}
		name := path
		if strings.Contains(name, "{}") {
			name = argv[0]
		}
		cmd := exec.Command(name, argv[1:]...)
		cmd.Args[0] = argv[0]
		cmd.Stdout, cmd.Stderr = out, errOut
		return cmd.Run()
	}, func(r jobs.Result[string]) {
		reported++
		var exitErr *exec.ExitError
		switch {
		case !r.Started:
			notStarted++
			if errors.Is(r.Err, distributed.ErrStore) {
				// The shared limit refuses (failing closed, or
				// failing open before Redis ever answered, without
				// --safe-rate, or Redis set up wrong): start
				// nothing more.
				cancel(r.Err)
			}
		case r.Err != nil:
			failed++
			if !errors.As(r.Err, &exitErr) {
				// Not the command's status: it could not be started.
				startFailure = max(startFailure, startStatus(r.Err))
			}
			fmt.Fprintf(errOut, "%s: job %d (%s): %v\n", prefix, r.Index+1, r.Item, r.Err)
			if cfg.failFast {
				cancel(errFailFast)
			}
		}
	})
	status = command.ExitOK
	var inputErr error
	if err == nil {
		// The jobs ran out: the feeder is done, and may have failed.
		inputErr = <-inputDone
		err = stopReason(ctx, err)
	}
	if err == nil {
		if inputErr != nil {
			fmt.Fprintf(errOut, "%s: reading jobs: %v\n", prefix, inputErr)
			status = command.ExitFail
		}
	} else {
		// Stopped early. The deferred cancel releases a feeder blocked
		// handing over a job; one blocked reading standard input stays
		// until the process exits.
		fmt.Fprintf(errOut, "%s: stopped: %v\n", prefix, err)
		status = sharedlimit.MisconfiguredStatus(err, command.ExitFail)
	}
	// Every job given counts: those the feeder read but Stream never took
	// were not started either. (Read from standard input, the count is of
	// the lines read before the stop.)
	total := max(reported, int(given.Load()))
	notStarted += total - reported
	if failed > 0 || notStarted > 0 {
		fmt.Fprintf(errOut, "%s: %d of %d jobs failed", prefix, failed, total)
		if notStarted > 0 {
			fmt.Fprintf(errOut, ", %d not started", notStarted)
		}
		fmt.Fprintln(errOut)
		status = sharedlimit.MisconfiguredStatus(err, command.ExitFail)
	}
	if startFailure != 0 {
		status = startFailure
	}
	if sig, ok := caught.Load().(os.Signal); ok {
		status = command.SignalStatus(sig)
	}
	return status
}

// finish checks the flags and splits the words into command and jobs.
func (c *runConfig) finish(rateS string, burstSet bool, words []string) error {
	if rateS == "" {
		return errors.New("--rate is required, e.g. --rate 5/s (see ratelimit help run)")
	}
	var err error
	if c.rate, err = units.JobRate(rateS); err != nil {
		return fmt.Errorf("--rate %w", err)
	}
	// Slower than a job a day (1e-300, say) is a mistake, not a limit
	// anyone waits for; say so about the rate, which is what was given.
	if c.rate < 1/slowestJob.Seconds() {
		return fmt.Errorf("--rate %q: too slow: more than a day between jobs (the slowest rate is 1/d)", rateS)
	}
	if c.parallel < 1 {
		return fmt.Errorf("--parallel %d: must be at least 1", c.parallel)
	}
	if c.warmup < 0 {
		return fmt.Errorf("--warmup %v: must not be negative", c.warmup)
	}
	if burstSet && c.warmup > 0 {
		return errors.New("--burst and --warmup cannot be combined")
	}
	if c.burst < 0 || c.burst > 1e9 {
		return fmt.Errorf("--burst %v: must be between 0 and 1e9 jobs", c.burst)
	}
	for i, w := range words {
		if w == ":::" {
			c.jobs = words[i+1:]
			if c.jobs == nil {
				c.jobs = []string{}
			}
			words = words[:i]
			break
		}
	}
	if len(words) == 0 {
		return errors.New("no command given (usage: ratelimit run --rate RATE [flags] [--] command [arg ...])")
	}
	c.command = words
	return nil
}

func (c runConfig) newLimiter() (*ratelimit.Limiter, error) {
	if c.warmup > 0 {
		return ratelimit.NewWarmingUp(c.rate, c.warmup)
	}
	secs, err := c.burstSeconds()
	if err != nil {
		return nil, err
	}
	return ratelimit.NewBursty(c.rate, ratelimit.WithMaxBurstSeconds(secs))
}

// distributedOptions are newLimiter's settings for a limit shared through
// Redis.
func (c runConfig) distributedOptions() ([]distributed.Option, error) {
	if c.warmup > 0 {
		return []distributed.Option{distributed.WithWarmup(c.warmup)}, nil
	}
	secs, err := c.burstSeconds()
	if err != nil {
		return nil, err
	}
	return []distributed.Option{distributed.WithMaxBurstSeconds(secs)}, nil
}

// slowestJob is the longest --rate may put between two jobs.
const slowestJob = 24 * time.Hour

// burstSeconds is --burst as limiters count it: stored permits are counted
// in time, so burst jobs at the rate.
func (c runConfig) burstSeconds() (float64, error) {
	secs := 0.0
	if !math.IsInf(c.rate, 1) {
		secs = c.burst / c.rate
	}
	if math.IsInf(secs, 0) || secs > 1e9 {
		return 0, fmt.Errorf("--burst %v at %.3g jobs/s: too long a burst (more than 1e9 s of jobs)", c.burst, c.rate)
	}
	return secs, nil
}

// feedJobs sends the jobs to items: the given list, or the non-blank lines
// of r. It stops when ctx ends. given counts the jobs: the whole list at
// once, or each line as it is read.
// stopReason is why dispatch stopped, or nil if the jobs ran out:
// Stream's error, or, where Stream returned on the jobs' end after
// dispatch was stopped (ctx ended: Stream sees the end of the jobs and the
// stop in either order, and the feeder ends the jobs on the stop), the
// stop's cause, which "reading jobs: context canceled", or nothing at
// all, would hide.
func stopReason(ctx context.Context, streamErr error) error {
	if streamErr == nil && ctx.Err() != nil {
		return context.Cause(ctx)
	}
	return streamErr
}

func feedJobs(ctx context.Context, list []string, r io.Reader, items chan<- string, given *atomic.Int64) error {
	send := func(job string) error {
		select {
		case items <- job:
			return nil
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	if list != nil {
		given.Add(int64(len(list)))
		for _, job := range list {
			if err := send(job); err != nil {
				return err
			}
		}
		return nil
	}
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		line := strings.TrimSuffix(sc.Text(), "\r")
		if strings.TrimSpace(line) == "" {
			continue
		}
		given.Add(1)
		if err := send(line); err != nil {
			return err
		}
	}
	return sc.Err()
}

// expandCommand returns the command line for one job: every "{}" replaced
// by the job, or the job appended if there is none.
func expandCommand(template []string, job string) []string {
	argv := make([]string, 0, len(template)+1)
	found := false
	for _, a := range template {
		if strings.Contains(a, "{}") {
			found = true
			a = strings.ReplaceAll(a, "{}", job)
		}
		argv = append(argv, a)
	}
	if !found {
		argv = append(argv, job)
	}
	return argv
}

// quoteWords quotes the words that need it, for --verbose.
func quoteWords(words []string) []string {
	q := make([]string, len(words))
	for i, w := range words {
		if w == "" || strings.ContainsAny(w, " \t\n'\"\\$`*?[]{}()<>|&;#~") {
			w = strconv.Quote(w)
		}
		q[i] = w
	}
	return q
}

// syncWriter returns w itself if it is a file (the jobs then write to the
// file directly), else w behind a lock, since exec copies each job's output
// from its own goroutine.
func syncWriter(w io.Writer) io.Writer {
	if _, ok := w.(*os.File); ok {
		return w
	}
	return &lockedWriter{w: w}
}

type lockedWriter struct {
	mu sync.Mutex
	w  io.Writer
}

func (l *lockedWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(p)
}

// formatJobRate prints a rate of jobs per second for messages.
func formatJobRate(r float64) string {
	if math.IsInf(r, 1) {
		return "no limit"
	}
	return fmt.Sprintf("%.4g jobs/s", r)
}
