// Package pipe is `ratelimit pipe`: it copies standard input to standard
// output at a given rate of bytes (package shape over a limiter, or a limit
// shared through Redis), with a progress line on a terminal.
package pipe

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"math"
	"os"
	"os/signal"
	"strconv"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/smoothrate/ratelimit"
	"github.com/smoothrate/ratelimit/distributed"
	"github.com/smoothrate/ratelimit/internal/cli/command"
	"github.com/smoothrate/ratelimit/internal/cli/sharedlimit"
	"github.com/smoothrate/ratelimit/internal/units"
	"github.com/smoothrate/ratelimit/shape"
)

const pipeUsage = `Usage: ratelimit pipe [flags] [RATE]

Pipe copies standard input to standard output, unchanged, at RATE bytes per
second (given as the argument or with --rate). Data goes out in chunks of
about 10 ms, each paid for before it is written, so the output is smooth
whatever the input's pace.

Rates and sizes: a number (500, 1.5, 1e9) with an optional prefix and unit.
  k M G T = 1000^n    Ki Mi Gi Ti = 1024^n    B or nothing = bytes
  b or bit = bits (a byte is 8 bits)          rates may end in /s (or ps: Mbps)
  Examples: 500k, 1MiB/s, 10MB/s, 2Gbit, 100Mbps, 1e9; "inf" for no limit.
  A rate so slow that one chunk would take more than a day is refused.

When standard error is a terminal (or with --progress), a progress line
shows the bytes copied, the rate over the last second, the average rate and,
when the size is known (--size, or standard input is a file), the time left
at the rate of the last 30 seconds.

A running pipe's rate can be changed, as pv -R PID -L RATE does:
  ratelimit pipe -R PID RATE      (or --remote PID --rate RATE, or -R PID -L RATE)
moves the pipe with process ID PID to RATE and prints the old and new
rates. The chunk waiting for its turn is priced again at RATE; only the one
already written is paid at the old rate (10 ms of data, or 1 KiB below
100 kB/s, or one --chunk). Only the pipe's user can change it: each pipe
listens on a socket in a directory private to its user, $XDG_RUNTIME_DIR,
or $TMPDIR/ratelimit-UID (/tmp by default) without one. A pipe that shares
its limit through Redis (--redis) changes the limit of every process that
shares it.

Examples:
  ratelimit pipe 1MiB < big.iso > /dev/null
  curl -s https://example.com/big | ratelimit pipe --rate 500k --size 20MB > big
  ratelimit pipe --warmup 5s 10MB/s < in > out
  ratelimit pipe -R 4242 5MB/s
  ratelimit pipe --redis redis://db:6379/0 --name backups 10MB/s < part1 > /mnt/part1

`

const pipeUsageEnd = `
Exit status: 0 on success, 1 on a read or write error (or when Redis cannot
be reached with --fail-closed), 2 for bad flags or values (or a Redis that
is set up wrong), 130 when interrupted (128 + the signal's number). With
-R: 0 when the pipe took the rate, 1 when there is no such pipe of the
user's or it failed to change (its Redis is down), 2 for a rate it refuses.

Flags:
`

// pipeConfig is what the flags of pipe describe.
type pipeConfig struct {
	rate   float64
	burst  time.Duration // stored permits, as time at rate; -1: not given
	warmup time.Duration // 0: bursty
	chunk  int           // 0: shape's default for the rate
	size   int64         // -1: unknown
	quiet  bool
	// progress draws the progress line even when standard error is not
	// a terminal.
	progress bool
}

// defaultPipeBurst is how much data, in time at the rate, may leave at line
// rate after the input stalled. It must be well above the timer oversleep
// (about 1 ms on a VM) or the stream falls short of its rate, and small
// enough that an idle spell does not turn into a noticeable burst.
const defaultPipeBurst = 100 * time.Millisecond

// Summary is pipe's line in the list of commands.
const Summary = "copy standard input to standard output at a given rate (500k, 1MiB/s, 2Gbit)"

// Run runs `ratelimit pipe` with args (what follows "pipe" on the command
// line) and returns its exit status.
func Run(args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("pipe", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var rateS, burstS, chunkS, sizeS string
	var warmup time.Duration
	var quiet, progress bool
	fs.StringVar(&rateS, "rate", "", "the `rate`, e.g. 500k, 1MiB/s, 10MB/s, 2Gbit (or give it as the argument)")
	fs.StringVar(&rateS, "L", "", "short for --rate (pv's -L)")
	var remoteS string
	fs.StringVar(&remoteS, "remote", "", "change the rate of the running pipe with this process `ID` to RATE, as pv -R does")
	fs.StringVar(&remoteS, "R", "", "short for --remote")
	fs.StringVar(&burstS, "burst", "", "how much may leave at once after the input stalled: a `duration` at the rate (100ms) or a size (256KiB); default 100ms")
	fs.DurationVar(&warmup, "warmup", 0, "start at a third of the rate and speed up to it over this `period` (Guava's warm-up); excludes --burst")
	fs.StringVar(&chunkS, "chunk", "", "bytes per write, e.g. 4KiB (default: 10 ms of data, between 1KiB and 64KiB)")
	fs.StringVar(&sizeS, "size", "", "expected input `size`, for the time left (default: the size of standard input if it is a file)")
	fs.BoolVar(&quiet, "quiet", false, "no progress line")
	fs.BoolVar(&quiet, "q", false, "short for --quiet")
	fs.BoolVar(&progress, "progress", false, "draw the progress line even when standard error is not a terminal")
	var rf sharedlimit.Flags
	rf.Register(fs, "bytes")
	fs.Usage = func() {
		fmt.Fprint(fs.Output(), pipeUsage+sharedlimit.Help("bytes")+pipeUsageEnd)
		fs.PrintDefaults()
	}
	words, done, status := command.ParseFlags(fs, args, true, stdout, stderr)
	if done {
		return status
	}
	const prefix = "ratelimit pipe"
	if remoteS != "" {
		return remote(fs, remoteS, rateS, words, stdout, stderr)
	}
	cfg, err := pipeConfigFrom(rateS, burstS, chunkS, sizeS, warmup, quiet, words)
	if err == nil && progress {
		if quiet {
			err = errors.New("--progress and --quiet cannot be combined")
		}
		cfg.progress = true
	}
	if err != nil {
		fmt.Fprintf(stderr, "%s: %v\n", prefix, err)
		return command.ExitUsage
	}
	// --safe-rate is a rate the pipe may run at: as slow as its rate may
	// be, no slower.
	shared, err := rf.Check(func(s string) (float64, error) {
		r, err := units.ByteRate(s)
		if err == nil {
			err = cfg.checkSlowest(r, s)
		}
		return r, err
	})
	if err != nil {
		fmt.Fprintf(stderr, "%s: %v\n", prefix, err)
		return command.ExitUsage
	}
	var lim ratelimit.Acquirer
	stopShared := func() {}
	sharedName := ""
	if shared == nil {
		local, err := cfg.newLimiter()
		if err != nil {
			fmt.Fprintf(stderr, "%s: %v\n", prefix, err)
			return command.ExitUsage
		}
		lim = local
	} else {
		sl, stop, status := shared.Begin(stderr, prefix, cfg.rate, cfg.distributedOptions(), shape.FormatRate)
		if status != command.ExitOK {
			return status
		}
		lim, stopShared, sharedName = sl, stop, sl.Name()
	}
	tuned := &retunable{Acquirer: lim}
	if cfg.size < 0 {
		cfg.size = inputSize(stdin)
	}

	out := &countingWriter{w: stdout}
	var opts []shape.Option
	if cfg.chunk > 0 {
		opts = append(opts, shape.WithChunkSize(cfg.chunk))
	}
	sw, err := shape.NewWriter(out, tuned, opts...)
	if err != nil {
		stopShared()
		fmt.Fprintf(stderr, "%s: %v\n", prefix, err)
		return command.ExitUsage
	}
	ctl, err := listenControl(os.Getpid(), cfg.retune(tuned, sharedName))
	if err != nil {
		fmt.Fprintf(stderr, "%s: warning: this pipe's rate cannot be changed while it runs (-R): %v\n", prefix, err)
	}
	stopProgress := func() {}
	if cfg.progress || !cfg.quiet && isTerminal(stderr) {
		stopProgress = startProgress(stderr, &out.n, cfg.size)
	}
	// A reader that goes away (ratelimit pipe ... | head) is a write
	// error like any other: without this, Go's runtime ends the process
	// by SIGPIPE on a write to standard output, skipping what follows.
	signal.Ignore(syscall.SIGPIPE)
	// Interrupted, the progress line still ends with a newline (the
	// shell's prompt must not be drawn over it), the control socket goes
	// away, and a shared limit gives its permits back and leaves the
	// registry at once.
	finish := command.ExitOnSignal(func() {
		stopProgress()
		ctl.Close()
		stopShared()
	})
	// Hide stdin's WriterTo so that io.CopyBuffer reads into our buffer and
	// every byte goes through the shaped Write.
	_, err = io.CopyBuffer(sw, struct{ io.Reader }{stdin}, make([]byte, max(64<<10, cfg.chunk)))
	finish()
	if err != nil {
		// shape reports a limiter error that wraps
		// context.DeadlineExceeded as a missed deadline; a shared limit
		// that refuses (ErrUnavailable) can wrap its Redis call's
		// timeout, which is not that: show the limiter's own error.
		var de *shape.DeadlineError
		if errors.As(err, &de) && errors.Is(de.Cause, distributed.ErrStore) {
			err = de.Cause
		}
		fmt.Fprintf(stderr, "%s: %v\n", prefix, err)
		return sharedlimit.MisconfiguredStatus(err, command.ExitFail)
	}
	return command.ExitOK
}

func pipeConfigFrom(rateS, burstS, chunkS, sizeS string, warmup time.Duration, quiet bool, words []string) (pipeConfig, error) {
	cfg := pipeConfig{burst: -1, size: -1, warmup: warmup, quiet: quiet}
	var err error
	if cfg.rate, rateS, err = rateFrom(rateS, words); err != nil {
		return cfg, err
	}
	if warmup < 0 {
		return cfg, fmt.Errorf("--warmup %v: must not be negative", warmup)
	}
	if burstS != "" {
		if warmup > 0 {
			return cfg, errors.New("--burst and --warmup cannot be combined: a warming-up limiter's stored permits are its warm-up")
		}
		if cfg.burst, err = parseBurst(burstS, cfg.rate); err != nil {
			return cfg, err
		}
	}
	if chunkS != "" {
		c, err := units.Size(chunkS)
		if err != nil {
			return cfg, fmt.Errorf("--chunk %w", err)
		}
		if c < 1 || c > 1<<30 {
			return cfg, fmt.Errorf("--chunk %s: must be between 1 byte and 1GiB", chunkS)
		}
		cfg.chunk = int(c)
	}
	if sizeS != "" {
		if cfg.size, err = units.Size(sizeS); err != nil {
			return cfg, fmt.Errorf("--size %w", err)
		}
	}
	return cfg, cfg.checkSlowest(cfg.rate, rateS)
}

// rateFrom reads the rate, given with --rate (rateS) or as the one word.
// It returns the rate and how it was written.
func rateFrom(rateS string, words []string) (float64, string, error) {
	switch {
	case len(words) > 1:
		return 0, rateS, fmt.Errorf("one rate expected, got %q", words)
	case len(words) == 1 && rateS != "":
		return 0, rateS, fmt.Errorf("rate given twice: --rate %s and %s", rateS, words[0])
	case len(words) == 1:
		rateS = words[0]
	case rateS == "":
		return 0, rateS, errors.New("no rate: give one, e.g. \"ratelimit pipe 1MiB/s\" (see ratelimit help pipe)")
	}
	rate, err := units.ByteRate(rateS)
	if err != nil {
		return 0, rateS, fmt.Errorf("rate %w", err)
	}
	return rate, rateS, nil
}

// checkSlowest refuses a rate at which one chunk would take more than a
// day (1e-300 bytes/s, say): it would be accepted and then hang after the
// first chunk. The error says what the slowest rate is; rateS is the rate
// as it was written.
func (c pipeConfig) checkSlowest(rate float64, rateS string) error {
	chunk := c.chunk
	if chunk == 0 {
		chunk = shape.ChunkSize(rate)
	}
	cold := 1.0
	if c.warmup > 0 {
		cold = ratelimit.DefaultColdFactor // a warming-up limiter starts this much slower
	}
	if slowest := cold * float64(chunk) / slowestChunk.Seconds(); !(rate >= slowest) {
		return fmt.Errorf("rate %q: too slow: a chunk of %d bytes would take more than a day (at least %s B/s%s; a smaller --chunk allows less)",
			rateS, chunk, strconv.FormatFloat(slowest, 'g', 3, 64), map[bool]string{true: " with --warmup", false: ""}[c.warmup > 0])
	}
	return nil
}

// slowestChunk is the longest a chunk may take: a rate slower than that is
// a mistake (1e-300), not a limit anyone waits for.
const slowestChunk = 24 * time.Hour

// parseBurst reads --burst: a duration, or a size that is converted to the
// time it takes at rate.
func parseBurst(s string, rate float64) (time.Duration, error) {
	if d, err := time.ParseDuration(s); err == nil {
		if d < 0 {
			return 0, fmt.Errorf("--burst %s: must not be negative", s)
		}
		return d, nil
	}
	n, err := units.Size(s)
	if err != nil {
		return 0, fmt.Errorf("--burst %q: neither a duration (100ms) nor a size (256KiB)", s)
	}
	if math.IsInf(rate, 1) {
		return 0, nil
	}
	secs := float64(n) / rate
	if secs > 1e6 {
		return 0, fmt.Errorf("--burst %s: more than a million seconds at %s", s, shape.FormatRate(rate))
	}
	return time.Duration(secs * float64(time.Second)), nil
}

func (c pipeConfig) newLimiter() (*ratelimit.Limiter, error) {
	if c.warmup > 0 {
		return ratelimit.NewWarmingUp(c.rate, c.warmup)
	}
	return ratelimit.NewBursty(c.rate, ratelimit.WithMaxBurstSeconds(c.burstSeconds()))
}

// distributedOptions are newLimiter's settings for a limit shared through
// Redis.
func (c pipeConfig) distributedOptions() []distributed.Option {
	if c.warmup > 0 {
		return []distributed.Option{distributed.WithWarmup(c.warmup)}
	}
	return []distributed.Option{distributed.WithMaxBurstSeconds(c.burstSeconds())}
}

// burstSeconds is --burst, or its default, in seconds at the rate.
func (c pipeConfig) burstSeconds() float64 {
	if c.burst >= 0 {
		return c.burst.Seconds()
	}
	return defaultPipeBurst.Seconds()
}

// inputSize is the size of r if it is a regular file, else -1.
func inputSize(r io.Reader) int64 {
	f, ok := r.(*os.File)
	if !ok {
		return -1
	}
	fi, err := f.Stat()
	if err != nil || !fi.Mode().IsRegular() {
		return -1
	}
	return fi.Size()
}

// countingWriter counts the bytes that went out, for the progress line.
type countingWriter struct {
	w io.Writer
	n atomic.Int64
}

func (c *countingWriter) Write(p []byte) (int, error) {
	n, err := c.w.Write(p)
	c.n.Add(int64(n))
	return n, err
}
