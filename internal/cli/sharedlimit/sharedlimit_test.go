package sharedlimit

import (
	"bytes"
	"crypto/sha256"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"

	"github.com/smoothrate/ratelimit/internal/cli/clitest"
	"github.com/smoothrate/ratelimit/internal/cli/command"
	"github.com/smoothrate/ratelimit/internal/redistest"
	"github.com/smoothrate/ratelimit/internal/tlstest"
)

func TestMain(m *testing.M) { clitest.MainWithRuntimeDir(m) }

// These tests run the built binary against real redis-server processes
// (internal/redistest): without redis-server they skip, except with CI=true,
// where they fail.
//
// The timing assertions are lower bounds on the wall time, derived from the
// bound package distributed documents: whatever the number of processes,
//
//	admitted(0, T) ≤ R·T + B + largest single lease,
//
// so moving N units at a shared rate R takes at least (N − B − L)/R. A slow
// machine only makes a run longer, so these bounds cannot fail because of
// load; they fail if the processes do not share the rate (each would then
// go at R, and the run would take about half as long).

// pipeBurst is pipe's default --burst, in time at the rate.
const pipeBurst = 100 * time.Millisecond

// leaseDuration is package distributed's default τ. The lease script caps
// a lease at max(what the call needs, share × τ), and a share is at most R,
// so no lease exceeds max(largest single request, R·τ).
const leaseDuration = 100 * time.Millisecond

// proc is a started ratelimit process.
type proc struct {
	cmd         *exec.Cmd
	out, stderr bytes.Buffer
}

func startProc(t *testing.T, bin string, stdin []byte, args ...string) *proc {
	t.Helper()
	p := &proc{cmd: exec.Command(bin, args...)}
	p.cmd.Stdin = bytes.NewReader(stdin)
	p.cmd.Stdout, p.cmd.Stderr = &p.out, &p.stderr
	if err := p.cmd.Start(); err != nil {
		t.Fatalf("starting %v: %v", args, err)
	}
	return p
}

// wait returns the exit status.
func (p *proc) wait(t *testing.T) int {
	t.Helper()
	err := p.cmd.Wait()
	var exit *exec.ExitError
	switch {
	case err == nil:
		return 0
	case errors.As(err, &exit):
		return exit.ExitCode()
	}
	t.Fatalf("waiting for %v: %v", p.cmd.Args, err)
	return -1
}

// checkNotices fails the test unless stderr holds only the notices a
// fail-open process prints when a Redis call times out on a loaded machine
// and when Redis answers again (each timeout means a spell at the fallback
// rate, R divided by the processes, which keeps the bounds checked here).
func checkNotices(t *testing.T, who string, stderr string) {
	t.Helper()
	for _, line := range strings.Split(strings.TrimSuffix(stderr, "\n"), "\n") {
		switch {
		case line == "":
		case strings.Contains(line, "cannot be reached") && strings.HasSuffix(line, "(fail-open)") && !strings.Contains(line, "warning:"),
			strings.Contains(line, "answers again; sharing the limit"):
			t.Logf("%s: %s", who, line)
		default:
			t.Errorf("%s: unexpected stderr line %q", who, line)
		}
	}
}

// Two pipes started together with the same --name share 2 MB/s: each copies
// 1.5 MB of random data unchanged, and together they cannot move 3 MB in
// less than (3 MB − B − L)/R with B = 100 ms of burst (pipe's default) =
// 200 kB and L = R·τ = 200 kB (a pipe's chunk, 10 ms of data, is smaller):
// 1.3 s. Each alone at 2 MB/s would be done in 0.75 s.
func TestPipeSharesRateThroughRedis(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	bin := clitest.Binary(t)
	const (
		rate  = 2e6
		size  = 1_500_000
		procs = 2
	)
	inputs := make([][]byte, procs)
	for i := range inputs {
		inputs[i] = clitest.RandomInput(t, size)
	}
	args := []string{"pipe", "--redis", clitest.RedisURL(srv), "--name", "shared-pipe", "2MB/s"}
	begin := time.Now()
	ps := make([]*proc, procs)
	for i := range ps {
		ps[i] = startProc(t, bin, inputs[i], args...)
	}
	codes := make([]int, procs)
	for i, p := range ps {
		codes[i] = p.wait(t)
	}
	elapsed := time.Since(begin)
	for i, p := range ps {
		if codes[i] != 0 {
			t.Fatalf("pipe %d: exit %d, stderr %q", i, codes[i], p.stderr.String())
		}
		checkNotices(t, fmt.Sprintf("pipe %d", i), p.stderr.String())
		if got, want := sha256.Sum256(p.out.Bytes()), sha256.Sum256(inputs[i]); got != want {
			t.Errorf("pipe %d: output (%d bytes, sha256 %x) differs from input (%d bytes, sha256 %x)",
				i, p.out.Len(), got[:8], len(inputs[i]), want[:8])
		}
	}
	// At the shared rate the run takes 1.5 s.
	checkSharedRun(t, procs, "bytes", float64(procs*size), rate, rate*pipeBurst.Seconds(), elapsed)
}

// checkSharedRun checks how long procs processes took to move total units
// at a shared rate with burst units stored: at least (total − B − L)/R by
// the fleet's bound (L: the largest lease, R·τ), or they did not share the
// rate; at most ten times total/R, which a loaded machine may approach but
// a starving process would pass.
func checkSharedRun(t *testing.T, procs int, unit string, total, rate, burst float64, elapsed time.Duration) {
	t.Helper()
	lease := rate * leaseDuration.Seconds()
	minElapsed := time.Duration((total - burst - lease) / rate * float64(time.Second))
	t.Logf("%d processes moved %.0f %s in %v at a shared %v/s (at least %v by the bound)", procs, total, unit, elapsed, rate, minElapsed)
	if elapsed < minElapsed {
		t.Errorf("%.0f %s went through in %v, faster than R·T + B + L allows (%v): the processes did not share the rate", total, unit, elapsed, minElapsed)
	}
	if limit := 10 * time.Duration(total/rate*float64(time.Second)); elapsed > limit {
		t.Errorf("the run took %v, more than %v", elapsed, limit)
	}
}

// Two run processes with the same --name start their 15 jobs each at a
// shared 20 jobs/s: every job runs exactly once, and the 30 starts take at
// least (30 − B − L)/R = (30 − 1 − 2)/20 = 1.35 s (B: --burst 1; L: R·τ = 2
// jobs). Each alone would be done in 0.7 s.
func TestRunSharesRateThroughRedis(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	bin := clitest.Binary(t)
	const (
		rate    = 20.0
		perProc = 15
		procs   = 2
	)
	ps := make([]*proc, procs)
	want := make([][]string, procs)
	begin := time.Now()
	for i := range ps {
		args := []string{"run", "--redis", clitest.RedisURL(srv), "--name", "shared-run", "--rate", "20/s", "--parallel", "2", "--", "echo", ":::"}
		for j := range perProc {
			job := fmt.Sprintf("p%d-job%02d", i, j)
			args = append(args, job)
			want[i] = append(want[i], job)
		}
		ps[i] = startProc(t, bin, nil, args...)
	}
	codes := make([]int, procs)
	for i, p := range ps {
		codes[i] = p.wait(t)
	}
	elapsed := time.Since(begin)
	for i, p := range ps {
		if codes[i] != 0 {
			t.Fatalf("run %d: exit %d, stderr %q", i, codes[i], p.stderr.String())
		}
		checkNotices(t, fmt.Sprintf("run %d", i), p.stderr.String())
		got := strings.Fields(p.out.String())
		slices.Sort(got)
		if !slices.Equal(got, want[i]) {
			t.Errorf("run %d ran %q, want each of %q once", i, got, want[i])
		}
	}
	checkSharedRun(t, procs, "jobs", float64(procs*perProc), rate, 1 /* --burst */, elapsed)
}

// Bad --redis usage is a usage error (exit 2) with a message that says
// what to do, before anything is read or run, and without Redis.
func TestRedisFlagErrors(t *testing.T) {
	t.Parallel()
	bin := clitest.Binary(t)
	caFile := tlstest.NewCA(t, "redis CA").WriteCA(t, t.TempDir(), "ca.crt")
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"pipe", "--redis", "redis://127.0.0.1:6379/0", "1MB/s"}, "--redis needs --name"},
		{[]string{"run", "--redis", "redis://127.0.0.1:6379/0", "--rate", "1/s", "true"}, "--redis needs --name"},
		{[]string{"pipe", "--name", "x", "1MB/s"}, "--name only applies to a limit shared through Redis"},
		{[]string{"run", "--fail-closed", "--rate", "1/s", "true"}, "--fail-closed only applies"},
		{[]string{"pipe", "--safe-rate", "1k", "1MB/s"}, "--safe-rate only applies"},
		{[]string{"run", "--join", "--rate", "1/s", "true"}, "--join only applies"},
		{[]string{"pipe", "--redis-tls-ca", "ca.crt", "1MB/s"}, "--redis-tls-* only applies"},
		{[]string{"pipe", "--redis", "redis://127.0.0.1:6379/0", "--name", "x", "--redis-tls-ca", caFile, "1MB/s"}, "need a rediss:// or rediss+cluster:// URL"},
		{[]string{"pipe", "--redis", "rediss://127.0.0.1:6379/0", "--name", "x", "--redis-tls-ca", "missing.crt", "1MB/s"}, "--redis-tls-*: tls: open missing.crt"},
		{[]string{"run", "--redis", "rediss://127.0.0.1:6379/0", "--name", "x", "--redis-tls-cert", caFile, "--rate", "1/s", "true"}, "--redis-tls-*: tls: a certificate needs both"},
		{[]string{"pipe", "--redis", "http://127.0.0.1:6379", "--name", "x", "1MB/s"}, "invalid URL scheme"},
		{[]string{"pipe", "--redis", "127.0.0.1:6379", "--name", "x", "1MB/s"}, "not a URL"},
		{[]string{"run", "--redis", "redis://127.0.0.1:port/0", "--name", "x", "--rate", "1/s", "true"}, "invalid port"},
		{[]string{"pipe", "--redis", "redis://127.0.0.1:6379/x", "--name", "x", "1MB/s"}, "invalid database number"},
		{[]string{"pipe", "--redis", "redis+cluster://a:1,,b:2", "--name", "x", "1MB/s"}, "empty node address"},
		{[]string{"pipe", "--redis", "redis+cluster://a:1,b:2/3", "--name", "x", "1MB/s"}, "no database numbers"},
		{[]string{"pipe", "--redis", "http+cluster://a:1", "--name", "x", "1MB/s"}, "unknown scheme"},
		{[]string{"pipe", "--redis", "redis://127.0.0.1:6379/0", "--name", "a{b}", "1MB/s"}, "name must be"},
		{[]string{"pipe", "--redis", "redis://127.0.0.1:6379/0", "--name", "x", "--fail-closed", "--safe-rate", "1k", "1MB/s"}, "cannot be combined with --fail-closed"},
		{[]string{"pipe", "--redis", "redis://127.0.0.1:6379/0", "--name", "x", "--safe-rate", "fast", "1MB/s"}, "--safe-rate"},
		{[]string{"pipe", "--redis", "redis://127.0.0.1:6379/0", "--name", "x", "--safe-rate", "0", "1MB/s"}, "must be positive"},
		{[]string{"run", "--redis", "redis://127.0.0.1:6379/0", "--name", "x", "--safe-rate", "0", "--rate", "1/s", "true"}, "must be positive"},
		// As slow as the command's rate may be, no slower: 1e-300 would
		// hang the command while Redis is away.
		{[]string{"pipe", "--redis", "redis://127.0.0.1:6379/0", "--name", "x", "--safe-rate", "1e-300", "1MB/s"}, "--safe-rate rate \"1e-300\": too slow"},
		{[]string{"run", "--redis", "redis://127.0.0.1:6379/0", "--name", "x", "--safe-rate", "1e-300", "--rate", "1/s", "true"}, "--safe-rate \"1e-300\": too slow"},
	} {
		stdout, stderr, code, _ := clitest.Exec(t, bin, []byte("data\n"), "", c.args...)
		if code != command.ExitUsage || len(stdout) != 0 || !strings.Contains(stderr, c.want) {
			t.Errorf("%q: exit %d, stdout %q, stderr %q; want exit 2 and %q", c.args, code, stdout, stderr, c.want)
		}
	}
}

// Redis down at start: failing closed, nothing is copied and the exit
// status is 1. Failing open without --safe-rate, the same: a process that
// has never reached Redis cannot know its share (package distributed
// refuses rather than let it run at the full rate). Failing open with
// --safe-rate, the copy is made, alone, after a warning, at that rate:
// 400 kB at 400 kB/s from an empty bucket take at least
// (400 kB − one 64 KiB chunk)/400 kB/s = 0.84 s, where the 100 MB/s of RATE
// would take 4 ms.
func TestRedisUnreachableAtStart(t *testing.T) {
	t.Parallel()
	bin := clitest.Binary(t)
	url := "redis://" + redistest.ClosedAddr(t) + "/0"
	in := clitest.RandomInput(t, 400_000)

	out, stderr, code, _ := clitest.Exec(t, bin, in, "", "pipe", "--redis", url, "--name", "x", "--fail-closed", "100MB/s")
	if code != command.ExitFail || len(out) != 0 || !strings.Contains(stderr, "cannot be reached") || !strings.Contains(stderr, "--fail-closed: not starting") {
		t.Errorf("fail-closed: exit %d, %d bytes out, stderr %q; want exit 1, nothing out, and why", code, len(out), stderr)
	}
	out, stderr, code, _ = clitest.Exec(t, bin, nil, "", "run", "--redis", url, "--name", "x", "--fail-closed", "--rate", "1/s", "--", "echo", ":::", "a")
	if code != command.ExitFail || len(out) != 0 || !strings.Contains(stderr, "--fail-closed: not starting") {
		t.Errorf("run fail-closed: exit %d, stdout %q, stderr %q; want exit 1, no job run", code, out, stderr)
	}

	for _, cmd := range [][]string{
		{"pipe", "--redis", url, "--name", "x", "100MB/s"},
		{"run", "--redis", url, "--name", "x", "--rate", "1/s", "--", "echo", ":::", "a"},
	} {
		out, stderr, code, _ = clitest.Exec(t, bin, in, "", cmd...)
		if code != command.ExitFail || len(out) != 0 || !strings.Contains(stderr, "failing open needs --safe-rate until Redis has answered once") {
			t.Errorf("%s fail-open without --safe-rate: exit %d, %d bytes out, stderr %q; want exit 1, nothing out, and why", cmd[0], code, len(out), stderr)
		}
	}

	out, stderr, code, took := clitest.Exec(t, bin, in, "", "pipe", "--redis", url, "--name", "x", "--safe-rate", "400kB/s", "100MB/s")
	if code != command.ExitOK || !bytes.Equal(out, in) {
		t.Fatalf("fail-open: exit %d, %d of %d bytes out (equal: %v), stderr %q", code, len(out), len(in), bytes.Equal(out, in), stderr)
	}
	if !strings.Contains(stderr, "warning: redis at") || !strings.Contains(stderr, "running alone at 400 kB/s") {
		t.Errorf("fail-open: stderr %q, want a warning naming the fallback rate", stderr)
	}
	if minTook := time.Duration(float64(len(in)-64<<10) / 400e3 * float64(time.Second)); took < minTook {
		t.Errorf("fail-open at --safe-rate 400kB/s copied %d bytes in %v, less than %v", len(in), took, minTook)
	}
}

// Redis killed mid-run. Failing closed, pipe stops with status 1 and says
// why, and what it wrote is an unchanged prefix of its input. Failing open,
// it says it goes on alone and copies everything.
func TestPipeRedisDiesMidRun(t *testing.T) {
	t.Parallel()
	bin := clitest.Binary(t)
	in := clitest.RandomInput(t, 2_000_000)
	for _, failClosed := range []bool{true, false} {
		t.Run("fail-closed="+strconv.FormatBool(failClosed), func(t *testing.T) {
			srv := redistest.Start(t)
			args := []string{"pipe", "--redis", clitest.RedisURL(srv), "--name", "dies", "1MB/s"}
			if failClosed {
				args = append(args, "--fail-closed")
			}
			cmd := exec.Command(bin, args...)
			cmd.Stdin = bytes.NewReader(in)
			var stderr bytes.Buffer
			cmd.Stderr = &stderr
			stdout, err := cmd.StdoutPipe()
			if err != nil {
				t.Fatal(err)
			}
			if err := cmd.Start(); err != nil {
				t.Fatal(err)
			}
			// The first bytes out mean the pipe has leased from Redis.
			first := make([]byte, 1)
			if _, err := io.ReadFull(stdout, first); err != nil {
				t.Fatalf("no output: %v (stderr %q)", err, stderr.String())
			}
			srv.Kill()
			rest, err := io.ReadAll(stdout)
			if err != nil {
				t.Fatal(err)
			}
			out := append(first, rest...)
			err = cmd.Wait()
			code := 0
			var exit *exec.ExitError
			if errors.As(err, &exit) {
				code = exit.ExitCode()
			} else if err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(out, in[:min(len(out), len(in))]) {
				t.Fatalf("the output (%d bytes) is not a prefix of the input", len(out))
			}
			if failClosed {
				if code != command.ExitFail || len(out) == len(in) || !strings.Contains(stderr.String(), "redis unavailable") || !strings.Contains(stderr.String(), "the limiter fails closed") {
					t.Errorf("exit %d, %d of %d bytes out, stderr %q; want exit 1 before the end, and why", code, len(out), len(in), stderr.String())
				}
				return
			}
			if code != command.ExitOK || len(out) != len(in) || !strings.Contains(stderr.String(), "going on alone at 1.00 MB/s (fail-open)") {
				t.Errorf("exit %d, %d of %d bytes out, stderr %q; want everything and a notice", code, len(out), len(in), stderr.String())
			}
			// The notice reads as the README quotes it (for two pipes,
			// each going on at half the rate), but for the reason,
			// which may be a refused connection or one cut short.
			quote := clitest.DocQuote(t, "README.md", "ratelimit pipe: redis at 127.0.0.1:6379 cannot be reached",
				"127.0.0.1:6379", srv.Addr(), "500 kB/s", "1.00 MB/s")
			head, _, _ := strings.Cut(quote, "dial tcp")
			_, tail, _ := strings.Cut(quote, "; going on alone")
			line, _, _ := strings.Cut(stderr.String(), "\n")
			if !strings.HasPrefix(line, head) || !strings.HasSuffix(line, "; going on alone"+tail) {
				t.Errorf("notice %q, want it as the README quotes it: %q", line, quote)
			}
		})
	}
}

// A cluster URL: the pipe leases from a 3-node Redis Cluster (no start-up
// warning, which it would print if the cluster could not be reached) and
// keeps the rate: 600 kB at 1 MB/s take at least (600 − 100 − 100) kB /
// 1 MB/s.
func TestPipeThroughRedisCluster(t *testing.T) {
	t.Parallel()
	cl := redistest.StartCluster(t, 3)
	bin := clitest.Binary(t)
	in := clitest.RandomInput(t, 600_000)
	url := "redis+cluster://" + strings.Join(cl.Addrs(), ",")
	out, stderr, code, took := clitest.Exec(t, bin, in, "", "pipe", "--redis", url, "--name", "clustered", "1MB/s")
	if code != command.ExitOK || !bytes.Equal(out, in) {
		t.Fatalf("exit %d, stderr %q, %d of %d bytes out (equal: %v)", code, stderr, len(out), len(in), bytes.Equal(out, in))
	}
	checkNotices(t, "pipe", stderr)
	if minTook := 400 * time.Millisecond; took < minTook {
		t.Errorf("600 kB at 1 MB/s took %v, less than %v", took, minTook)
	}
}

// TestPipeThroughRedisTLS: a pipe shares its limit through a Redis that
// serves TLS only and requires a client certificate, with --redis
// rediss:// and the --redis-tls-* flags: the copy is made, unchanged, at
// the rate, with the shared state written there; without the client
// certificate the same Redis refuses the pipe at start, --safe-rate or
// not.
func TestPipeThroughRedisTLS(t *testing.T) {
	t.Parallel()
	srv, files := redistest.StartTLSClientAuth(t, "pipe")
	cliCert, cliKey, caFile := files.ClientCert, files.ClientKey, files.CA
	bin := clitest.Binary(t)
	in := clitest.RandomInput(t, 600_000)
	url := "rediss://" + srv.TLSAddr() + "/0"
	out, stderr, code, took := clitest.Exec(t, bin, in, "", "pipe", "--redis", url, "--name", "secure",
		"--redis-tls-cert", cliCert, "--redis-tls-key", cliKey, "--redis-tls-ca", caFile, "1MB/s")
	if code != command.ExitOK || !bytes.Equal(out, in) {
		t.Fatalf("exit %d, stderr %q, %d of %d bytes out (equal: %v)", code, stderr, len(out), len(in), bytes.Equal(out, in))
	}
	checkNotices(t, "pipe", stderr)
	if minTook := 400 * time.Millisecond; took < minTook {
		t.Errorf("600 kB at 1 MB/s took %v, less than %v", took, minTook)
	}
	if keys := srv.CLI("KEYS", "*"); !strings.Contains(keys, "secure") {
		t.Errorf("Redis holds %q, no state for the name", keys)
	}
	// A handshake refused is Redis set up wrong, not an outage: no
	// fallback rate applies.
	out, stderr, code, _ = clitest.Exec(t, bin, in, "", "pipe", "--redis", url, "--name", "secure", "--redis-tls-ca", caFile, "--safe-rate", "1MB/s", "1MB/s")
	if code != command.ExitUsage || len(out) != 0 || !strings.Contains(stderr, "not set up for this limit") || !strings.Contains(stderr, "certificate required") {
		t.Errorf("without the client certificate: exit %d, %d bytes out, stderr %q; want 2, nothing copied, and why", code, len(out), stderr)
	}
}

// Redis killed mid-run under run --fail-closed: run starts no more jobs,
// says why, and exits with status 1; the jobs it started ran.
func TestRunRedisDiesFailClosed(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	bin := clitest.Binary(t)
	args := []string{"run", "--redis", clitest.RedisURL(srv), "--name", "dies", "--fail-closed", "--rate", "10/s", "--", "echo", ":::"}
	const jobs = 40
	for j := range jobs {
		args = append(args, "job"+strconv.Itoa(j))
	}
	cmd := exec.Command(bin, args...)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	// The first job's output means run has leased from Redis.
	first := make([]byte, len("job0\n"))
	if _, err := io.ReadFull(stdout, first); err != nil || string(first) != "job0\n" {
		t.Fatalf("first output %q, %v (stderr %q)", first, err, stderr.String())
	}
	srv.Kill()
	rest, err := io.ReadAll(stdout)
	if err != nil {
		t.Fatal(err)
	}
	err = cmd.Wait()
	var exit *exec.ExitError
	if !errors.As(err, &exit) || exit.ExitCode() != command.ExitFail {
		t.Fatalf("exit: %v, want status 1 (stderr %q)", err, stderr.String())
	}
	ran := append([]string{"job0"}, strings.Fields(string(rest))...)
	for i, job := range ran {
		if job != "job"+strconv.Itoa(i) {
			t.Fatalf("jobs ran: %q, want job0, job1, ... in order", ran)
		}
	}
	if len(ran) == jobs {
		t.Errorf("all %d jobs ran although Redis was killed after the first", jobs)
	}
	for _, want := range []string{"stopped: ", "redis unavailable", "the limiter fails closed", "not started"} {
		if !strings.Contains(stderr.String(), want) {
			t.Errorf("stderr %q does not say %q", stderr.String(), want)
		}
	}
}

// A pipe leaves the fleet when it ends, normally or on SIGINT: Close
// removes it from the fair-share registry at once, so the others' shares
// grow back now rather than when its entry expires (3 s). A long pipe keeps
// the registry alive meanwhile; right after the short one ends the registry
// must list only the long one.
func TestPipeLeavesRegistryOnExit(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	bin := clitest.Binary(t)
	const name = "leaving"
	state := "ratelimit:{" + name + "}:state" // the registry: its p:<process id> fields
	args := []string{"pipe", "--redis", clitest.RedisURL(srv), "--name", name, "1MB/s"}

	long := exec.Command(bin, args...)
	long.Stdin = bytes.NewReader(clitest.RandomInput(t, 20_000_000))
	long.Stderr = io.Discard
	longOut, err := long.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := long.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = long.Process.Kill()
		_ = long.Wait()
	})
	// Its first bytes mean it has registered.
	if _, err := io.ReadFull(longOut, make([]byte, 1)); err != nil {
		t.Fatal(err)
	}
	go func() { _, _ = io.Copy(io.Discard, longOut) }()

	hlen := func() string {
		n := 0
		for _, f := range strings.Fields(srv.CLI("HKEYS", state)) {
			if strings.HasPrefix(f, "p:") {
				n++
			}
		}
		return strconv.Itoa(n)
	}

	// Normal end.
	out, stderr, code, _ := clitest.Exec(t, bin, clitest.RandomInput(t, 100_000), "", args...)
	if code != command.ExitOK || len(out) != 100_000 {
		t.Fatalf("short pipe: exit %d, %d bytes, stderr %q", code, len(out), stderr)
	}
	if got := hlen(); got != "1" {
		t.Errorf("after a pipe ended, the registry lists %s processes, want 1 (the long one)", got)
	}

	// SIGINT.
	short := exec.Command(bin, args...)
	short.Stdin = bytes.NewReader(clitest.RandomInput(t, 5_000_000))
	var shortErr bytes.Buffer
	short.Stderr = &shortErr
	shortOut, err := short.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := short.Start(); err != nil {
		t.Fatal(err)
	}
	if _, err := io.ReadFull(shortOut, make([]byte, 1)); err != nil {
		t.Fatal(err)
	}
	if got := hlen(); got != "2" {
		t.Fatalf("with two pipes running the registry lists %s processes", got)
	}
	if err := short.Process.Signal(syscall.SIGINT); err != nil {
		t.Fatal(err)
	}
	_, _ = io.Copy(io.Discard, shortOut)
	err = short.Wait()
	var exit *exec.ExitError
	if !errors.As(err, &exit) || exit.ExitCode() != 128+int(syscall.SIGINT) {
		t.Fatalf("interrupted pipe: %v, want exit status 130 (stderr %q)", err, shortErr.String())
	}
	if got := hlen(); got != "1" {
		t.Errorf("after a pipe was interrupted, the registry lists %s processes, want 1", got)
	}
}

// --burst and --warmup reach the shared state in Redis: its kind, burst
// (seconds; a warming-up limiter has none, NaN: not checked) and warm-up
// (µs) fields, read while the process runs.
func TestSharedStateKind(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	bin := clitest.Binary(t)
	jobList := []string{"--", "echo", ":::"}
	for i := range 50 {
		jobList = append(jobList, strconv.Itoa(i))
	}
	for i, c := range []struct {
		args          []string
		kind          string
		burst, warmup float64
	}{
		{[]string{"pipe", "1MB/s"}, "b", pipeBurst.Seconds(), 0},
		{[]string{"pipe", "--burst", "250ms", "1MB/s"}, "b", 0.25, 0},
		{[]string{"pipe", "--burst", "500kB", "1MB/s"}, "b", 0.5, 0},
		{[]string{"pipe", "--warmup", "2s", "1MB/s"}, "w", math.NaN(), 2e6},
		{append([]string{"run", "--rate", "10/s", "--burst", "3"}, jobList...), "b", 0.3, 0},
		{append([]string{"run", "--rate", "10/s", "--warmup", "1s"}, jobList...), "w", math.NaN(), 1e6},
	} {
		name := "kind" + strconv.Itoa(i)
		args := append([]string{c.args[0], "--redis", clitest.RedisURL(srv), "--name", name}, c.args[1:]...)
		cmd := exec.Command(bin, args...)
		cmd.Stdin = bytes.NewReader(clitest.RandomInput(t, 5_000_000))
		cmd.Stderr = io.Discard
		out, err := cmd.StdoutPipe()
		if err != nil {
			t.Fatal(err)
		}
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		// First output: the state exists.
		if _, err := io.ReadFull(out, make([]byte, 1)); err != nil {
			t.Fatalf("%q: no output: %v", args, err)
		}
		got := strings.Fields(srv.CLI("HMGET", "ratelimit:{"+name+"}:state", "kind", "burst", "warmup"))
		_ = cmd.Process.Kill()
		_, _ = io.Copy(io.Discard, out)
		_ = cmd.Wait()
		if len(got) != 3 {
			t.Fatalf("%q: state fields %q", args, got)
		}
		burst, err1 := strconv.ParseFloat(got[1], 64)
		warmup, err2 := strconv.ParseFloat(got[2], 64)
		if got[0] != c.kind || err1 != nil || err2 != nil || math.Abs(burst-c.burst) > 1e-9 && !math.IsNaN(c.burst) || warmup != c.warmup {
			t.Errorf("%q: state kind %s, burst %s s, warm-up %s µs; want %s, %v, %v", args, got[0], got[1], got[2], c.kind, c.burst, c.warmup)
		}
	}
}

// A Redis that answers but is set up wrong is not an outage: with
// --safe-rate, pipe must not warn that Redis "cannot be reached" and run
// alone for the whole job. A wrong database, a cluster URL
// for a standalone server, a wrong or missing password, or a key of
// another program under the name: exit 2, with the reason, and nothing
// copied or run.
func TestRedisMisconfigured(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	bin := clitest.Binary(t)
	srv.CLI("SET", "ratelimit:{taken}:state", "a string")
	in := clitest.RandomInput(t, 100_000)
	check := func(url, name, want string) {
		t.Helper()
		out, stderr, code, _ := clitest.Exec(t, bin, in, "", "pipe", "--redis", url, "--name", name, "--safe-rate", "1MB/s", "100MB/s")
		assert.Equal(t, command.ExitUsage, code, "pipe %s: %s", url, stderr)
		assert.Zero(t, len(out), "pipe %s: bytes copied", url)
		assert.Contains(t, stderr, want, "pipe %s", url)
		assert.NotContains(t, stderr, "cannot be reached", "pipe %s", url)
		assert.NotContains(t, stderr, "running alone", "pipe %s", url)

		dir := clitest.ScriptDir(t)
		_, stderr, code, _ = clitest.Exec(t, bin, nil, dir, "run", "--redis", url, "--name", name, "--safe-rate", "10/s", "--rate", "100/s", "sh", "rec.sh", ":::", "a", "b")
		assert.Equal(t, command.ExitUsage, code, "run %s: %s", url, stderr)
		assert.Empty(t, clitest.Recorded(t, dir), "run %s ran jobs", url)
		assert.Contains(t, stderr, want, "run %s", url)
	}
	check("redis://"+srv.Addr()+"/99", "x", "DB index is out of range")
	_, stderr, _, _ := clitest.Exec(t, bin, in, "", "pipe", "--redis", "redis://"+srv.Addr()+"/99", "--name", "x", "100MB/s")
	assert.Equal(t, clitest.DocQuote(t, "README.md", "ratelimit pipe: redis at 127.0.0.1:6379 is not set up", "127.0.0.1:6379", srv.Addr())+"\n",
		stderr, "as the README quotes it")
	check("redis+cluster://"+srv.Addr(), "x", "cluster support disabled")
	// Found by the first lease, not by the start-up PING.
	check(clitest.RedisURL(srv), "taken", "not the limiter state hash")
	// Last: from here on the server wants a password.
	srv.CLI("CONFIG", "SET", "requirepass", "secret")
	check("redis://:wrong@"+srv.Addr()+"/0", "x", "WRONGPASS")
	check(clitest.RedisURL(srv), "x", "NOAUTH")
}

// TestRedisPasswordFromFileOrEnv: pipe and run take Redis's password as
// proxy does, from --redis-password-file or $REDIS_PASSWORD, so that it
// need not be on the command line; a wrong one is still exit 2.
func TestRedisPasswordFromFileOrEnv(t *testing.T) {
	t.Parallel()
	bin := clitest.Binary(t)
	srv := redistest.Start(t)
	srv.CLI("CONFIG", "SET", "requirepass", "s3cret")
	pwFile := filepath.Join(t.TempDir(), "pw")
	if err := os.WriteFile(pwFile, []byte("s3cret\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name string
		env  []string
		args []string
		want int
	}{
		{"file", nil, []string{"--redis-password-file", pwFile}, command.ExitOK},
		{"environment", []string{"REDIS_PASSWORD=s3cret"}, nil, command.ExitOK},
		{"wrong environment", []string{"REDIS_PASSWORD=nope"}, nil, command.ExitUsage},
	} {
		for _, cmdArgs := range [][]string{
			{"pipe", "--name", "pw-pipe", "1MB/s"},
			{"run", "--name", "pw-run", "--rate", "100/s", "true", ":::", "a"},
		} {
			args := append([]string{cmdArgs[0], "--redis", clitest.RedisURL(srv)}, tc.args...)
			args = append(args, cmdArgs[1:]...)
			cmd := exec.Command(bin, args...)
			cmd.Env = append(os.Environ(), tc.env...)
			cmd.Stdin = strings.NewReader("data")
			out, err := cmd.CombinedOutput()
			code := 0
			if exit, ok := err.(*exec.ExitError); ok {
				code = exit.ExitCode()
			}
			if code != tc.want || strings.Contains(string(out), "s3cret") {
				t.Errorf("%s, %v: status %d, output %q; want %d, no password shown", tc.name, args, code, out, tc.want)
			}
		}
	}
}

// TestPipeWarnsOfEvictions: a Redis that may evict the limit's keys when
// full gets a warning at start (the fleet's shares would start again from
// nothing); the pipe runs all the same.
func TestPipeWarnsOfEvictions(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t, "--maxmemory", "20mb", "--maxmemory-policy", "allkeys-lfu")
	bin := clitest.Binary(t)
	in := clitest.RandomInput(t, 1000)
	out, stderr, code, _ := clitest.Exec(t, bin, in, "", "pipe", "--redis", clitest.RedisURL(srv), "--name", "evicting", "1MB/s")
	if code != command.ExitOK || !bytes.Equal(out, in) {
		t.Fatalf("exit %d, stderr %q", code, stderr)
	}
	if want := "ratelimit pipe: warning: redis at " + srv.Addr() + " evicts keys when it is full (maxmemory 20.00M, maxmemory-policy allkeys-lfu)"; !strings.Contains(stderr, want) {
		t.Errorf("stderr %q, want %q", stderr, want)
	}
}
