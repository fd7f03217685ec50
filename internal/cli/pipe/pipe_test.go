package pipe

import (
	"bufio"
	"bytes"
	"crypto/sha256"
	"errors"
	"io"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/smoothrate/ratelimit/internal/cli/clitest"
	"github.com/smoothrate/ratelimit/internal/cli/command"
)

func TestMain(m *testing.M) { clitest.MainWithRuntimeDir(m) }

// The built binary copies its input byte for byte, whatever the chunk,
// burst or warm-up, and it really limits: 2 MB at 40 MB/s from an empty
// bucket cannot take less than (2 MB - one chunk) / 40 MB/s = 49 ms.
func TestPipeBinary(t *testing.T) {
	t.Parallel()
	bin := clitest.Binary(t)
	in := clitest.RandomInput(t, 4<<20)
	for _, args := range [][]string{
		{"1GB/s"},
		{"--rate", "8Gbit", "--chunk", "1000"},
		{"--quiet", "2GiB", "--burst", "1MiB"},
		{"1GB/s", "--warmup", "50ms"},
		{"inf"},
	} {
		out, stderr, code, _ := clitest.Exec(t, bin, in, "", append([]string{"pipe"}, args...)...)
		if code != 0 || stderr != "" {
			t.Errorf("pipe %v: exit %d, stderr %q", args, code, stderr)
		}
		if sha256.Sum256(out) != sha256.Sum256(in) {
			t.Errorf("pipe %v: output (%d bytes) differs from input (%d bytes)", args, len(out), len(in))
		}
	}

	out, _, code, took := clitest.Exec(t, bin, in[:2_000_000], "", "pipe", "40MB/s")
	if code != 0 || !bytes.Equal(out, in[:2_000_000]) {
		t.Fatalf("pipe 40MB/s: exit %d, %d bytes out", code, len(out))
	}
	if min := 49 * time.Millisecond; took < min {
		t.Errorf("2 MB at 40 MB/s took %v, less than %v: not limited", took, min)
	}
}

// Bad units and values are usage errors: exit status 2 and a message that
// names the problem, with nothing copied.
func TestPipeBadArguments(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		args []string
		want string
	}{
		{nil, "no rate"},
		{[]string{"10mb"}, "lower-case m"},
		{[]string{"10Q"}, `unknown unit "Q"`},
		{[]string{"0"}, "must be positive"},
		{[]string{"--rate=-5k"}, "must be positive"},
		{[]string{"1M", "2M"}, "one rate expected"},
		{[]string{"--rate", "1M", "2M"}, "rate given twice"},
		{[]string{"1M", "--burst", "abc"}, "neither a duration"},
		{[]string{"1M", "--burst", "-1s"}, "must not be negative"},
		{[]string{"1M", "--burst", "1s", "--warmup", "1s"}, "cannot be combined"},
		{[]string{"1M", "--warmup", "-1s"}, "must not be negative"},
		{[]string{"1M", "--chunk", "0"}, "--chunk 0: must be between"},
		{[]string{"1M", "--chunk", "1.5x"}, "--chunk"},
		{[]string{"1M", "--size", "-1"}, "--size"},
		{[]string{"1M", "--size", "1MB/s"}, "--size"},
		{[]string{"1M", "--nosuchflag"}, "flag provided but not defined"},
	} {
		var stdout, stderr bytes.Buffer
		code := Run(tc.args, strings.NewReader("data"), &stdout, &stderr)
		if code != command.ExitUsage || stdout.Len() != 0 || !strings.Contains(stderr.String(), tc.want) {
			t.Errorf("pipe %q: exit %d, stdout %q, stderr %q; want exit 2 and %q", tc.args, code, stdout.String(), stderr.String(), tc.want)
		}
	}
	// Through the binary too: the exit status is the process's.
	bin := clitest.Binary(t)
	if _, stderr, code, _ := clitest.Exec(t, bin, nil, "", "pipe", "5 parsecs"); code != 2 || !strings.HasPrefix(stderr, `ratelimit pipe: rate "5 parsecs": unknown unit`) {
		t.Errorf("binary: exit %d, stderr %q", code, stderr)
	}
	// help prints the usage and succeeds ("ratelimit help pipe" runs -h,
	// both streams on stdout).
	var stdout bytes.Buffer
	if code := Run([]string{"-h"}, nil, &stdout, &stdout); code != 0 || !strings.Contains(stdout.String(), "Usage: ratelimit pipe") {
		t.Errorf("help pipe: exit %d, %q", code, stdout.String())
	}
}

// In process, with io.Readers that are not files: the same bytes come out,
// and no progress line is drawn on a stderr that is not a terminal.
func TestPipeInProcess(t *testing.T) {
	t.Parallel()
	in := clitest.RandomInput(t, 1<<20)
	var stdout, stderr bytes.Buffer
	if code := Run([]string{"--chunk", "3KiB", "4GB/s"}, bytes.NewReader(in), &stdout, &stderr); code != 0 {
		t.Fatalf("exit %d: %s", code, stderr.String())
	}
	if !bytes.Equal(stdout.Bytes(), in) || stderr.Len() != 0 {
		t.Errorf("%d bytes out, stderr %q", stdout.Len(), stderr.String())
	}
	// A failing writer is exit status 1 with the error.
	if code := Run([]string{"inf"}, bytes.NewReader(in), failWriter{}, &stderr); code != command.ExitFail || !strings.Contains(stderr.String(), "disk full") {
		t.Errorf("failing output: exit %d, stderr %q", code, stderr.String())
	}
}

type failWriter struct{}

func (failWriter) Write([]byte) (int, error) { return 0, errors.New("disk full") }

func TestParseBurst(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		in   string
		rate float64
		want time.Duration
	}{
		{"100ms", 1e6, 100 * time.Millisecond},
		{"0s", 1e6, 0},
		{"256KiB", 1 << 20, 250 * time.Millisecond},
		{"1MB", 1e6, time.Second},
		{"1MB", 0.5e9, 2 * time.Millisecond},
	} {
		got, err := parseBurst(tc.in, tc.rate)
		if err != nil || got != tc.want {
			t.Errorf("parseBurst(%q, %v) = %v, %v; want %v", tc.in, tc.rate, got, err, tc.want)
		}
	}
	if _, err := parseBurst("1PB", 1); err == nil {
		t.Error("parseBurst(1PB, 1 B/s) accepted a 32-million-year burst")
	}
}

// The progress line: bytes (of the size), the rate over the last second,
// the average, the elapsed time and the time left at the recent rate, drawn
// every 250 ms. Each line overwrites the previous one, blanking what is left
// of a longer one.
func TestProgressLine(t *testing.T) {
	t.Parallel()
	p := newProgress(10_000_000)
	want := map[int]string{
		1:  "\r250 kB of 10.0 MB (2%)  1.00 MB/s now  1.00 MB/s avg  0:00  ETA ?",
		2:  "\r500 kB of 10.0 MB (5%)  1.00 MB/s now  1.00 MB/s avg  0:01  ETA 0:10",
		8:  "\r2.00 MB of 10.0 MB (20%)  1.00 MB/s now  1.00 MB/s avg  0:02  ETA 0:08",
		10: "\r3.00 MB of 10.0 MB (30%)  1.50 MB/s now  1.20 MB/s avg  0:03  ETA 0:06",
		12: "\r4.00 MB of 10.0 MB (40%)  2.00 MB/s now  1.33 MB/s avg  0:03  ETA 0:05",
		24: "\r10.0 MB of 10.0 MB (100%)  2.00 MB/s now  1.67 MB/s avg  0:06" + strings.Repeat(" ", 9),
		28: "\r10.0 MB of 10.0 MB (100%)  500 kB/s now  1.43 MB/s avg  0:07 ",
		29: "\r10.0 MB of 10.0 MB (100%)  0 B/s now  1.38 MB/s avg  0:07   ",
	}
	// 1 MB/s for 2 s, then 2 MB/s to the end at 6 s.
	for tick := 1; tick <= 29; tick++ {
		n := int64(tick) * 250_000
		if tick > 8 {
			n = min(2_000_000+int64(tick-8)*500_000, 10_000_000)
		}
		got := p.line(time.Duration(tick)*progressInterval, n)
		if w, ok := want[tick]; ok && got != w {
			t.Errorf("line at %v, %d bytes\n got %q\nwant %q", time.Duration(tick)*progressInterval, n, got, w)
		}
	}
	unknown := newProgress(-1)
	if got, want := unknown.line(time.Second, 1000), "\r1.00 kB  1.00 kB/s now  1.00 kB/s avg  0:01"; got != want {
		t.Errorf("unknown size: %q, want %q", got, want)
	}
}

// etaOf reads the time left off a progress line; ok is false for "ETA ?"
// and a line without one.
func etaOf(t *testing.T, line string) (left time.Duration, ok bool) {
	t.Helper()
	_, s, found := strings.Cut(line, "ETA ")
	if !found || strings.HasPrefix(s, "?") {
		return 0, false
	}
	var parts []int
	for f := range strings.SplitSeq(strings.TrimSpace(s), ":") {
		v, err := strconv.Atoi(f)
		require.NoError(t, err, "ETA in %q", line)
		parts = append(parts, v)
	}
	for _, v := range parts {
		left = left*60 + time.Duration(v)*time.Second
	}
	return left, true
}

// 3 MB at 10 B/s is 83 hours. The smallest default chunk is 1 KiB, so the
// output grows by 1 KiB every 102.4 s: a rate counted over the last second
// (1 KiB in it, or nothing) made an ETA of 47 minutes. From the second chunk
// on, the time left is right to 0.5 %, counting down between chunks, for
// the first hours of the transfer; before it, it is unknown, never short.
func TestProgressETASlowChunks(t *testing.T) {
	t.Parallel()
	const size, chunk = 3_000_000, 1024
	period := 102400 * time.Millisecond // a chunk's worth at 10 B/s
	finish := time.Duration((size+chunk-1)/chunk-1) * period
	p := newProgress(size)
	known := 0
	for tick := 1; tick <= int(3*time.Hour/progressInterval); tick++ {
		at := time.Duration(tick) * progressInterval
		n := chunk * (int64(at/period) + 1)
		left, ok := etaOf(t, p.line(at, n))
		truth := finish - at
		switch {
		case ok && at > period+progressInterval && math.Abs(float64(left-truth)) > 0.005*float64(truth):
			t.Fatalf("at %v: ETA %v, want %v ± 0.5%%", at, left, truth)
		case ok && left < truth/2:
			t.Fatalf("at %v (before the second chunk): ETA %v, want %v or unknown", at, left, truth)
		case !ok && at > period+progressInterval:
			t.Fatalf("at %v: no ETA", at)
		case ok:
			known++
		}
	}
	if known == 0 {
		t.Fatal("no ETA drawn")
	}
}

// When the rate changes (a pipe given a new one with -R), the time left
// follows within the 30 s window, and the rate now within a second.
func TestProgressETAFollowsNewRate(t *testing.T) {
	t.Parallel()
	const size = 100_000_000
	p := newProgress(size)
	change := 60 * time.Second
	n := int64(0)
	for tick := 1; tick <= int((change+31*time.Second)/progressInterval); tick++ {
		at := time.Duration(tick) * progressInterval
		if at <= change {
			n += 250_000 // 1 MB/s
		} else {
			n += 62_500 // 250 kB/s
		}
		line := p.line(at, n)
		left, ok := etaOf(t, line)
		require.True(t, ok || tick == 1, "at %v: %q", at, line)
		if at >= change+30*time.Second+progressInterval {
			if truth := time.Duration(float64(size-n) / 250e3 * float64(time.Second)); math.Abs(float64(left-truth)) > 0.01*float64(truth) {
				t.Errorf("at %v: ETA %v, want %v at 250 kB/s", at, left, truth)
			}
		}
		if at >= change+nowWindow+progressInterval && !strings.Contains(line, " 250 kB/s now") {
			t.Errorf("at %v: %q, want 250 kB/s now", at, line)
		}
	}
}

// A transfer that stalls: the rate now drops to 0 a second (and one
// drawing's gap) later, the time left grows, and is unknown once the 30 s
// window holds nothing.
func TestProgressStall(t *testing.T) {
	t.Parallel()
	p := newProgress(100_000_000)
	stall := 10 * time.Second
	var last time.Duration
	for tick := 1; tick <= int(45*time.Second/progressInterval); tick++ {
		at := time.Duration(tick) * progressInterval
		n := int64(min(at, stall) / progressInterval * 250_000)
		line := p.line(at, n)
		left, ok := etaOf(t, line)
		stalled := at - stall
		if zero := strings.Contains(line, "  0 B/s now"); zero != (stalled >= nowWindow+progressInterval) {
			t.Errorf("%v after the stall: %q", stalled, line)
		}
		switch {
		case stalled >= etaWindow+progressInterval && ok:
			t.Errorf("%v after the stall: ETA %v, want ?", stalled, left)
		case stalled < etaWindow+progressInterval && !ok && tick > 1:
			t.Errorf("%v after the stall: no ETA", stalled)
		case stalled > progressInterval && ok && left <= last:
			t.Errorf("%v after the stall: ETA %v, not more than %v", stalled, left, last)
		}
		last = left
	}
}

func TestFormatClock(t *testing.T) {
	t.Parallel()
	for d, want := range map[time.Duration]string{
		0: "0:00", 59*time.Second + 600*time.Millisecond: "1:00", 61 * time.Minute: "1:01:00", -time.Second: "?",
	} {
		if got := formatClock(d); got != want {
			t.Errorf("formatClock(%v) = %q, want %q", d, got, want)
		}
	}
}

// isTerminal asks for a character device: a buffer or a regular file is
// not one; /dev/null is (a progress line drawn there is harmless).
func TestIsTerminal(t *testing.T) {
	t.Parallel()
	if isTerminal(&bytes.Buffer{}) {
		t.Error("a buffer is taken for a terminal")
	}
	f, err := os.Create(filepath.Join(t.TempDir(), "f"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if isTerminal(f) {
		t.Error("a regular file is taken for a terminal")
	}
	if inputSize(f) != 0 || inputSize(strings.NewReader("abc")) != -1 {
		t.Errorf("inputSize: file %d, reader %d", inputSize(f), inputSize(strings.NewReader("abc")))
	}
	null, err := os.OpenFile(os.DevNull, os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer null.Close()
	if !isTerminal(null) {
		t.Error("/dev/null is a character device")
	}
}

// TestPipeInterruptEndsProgressLine: Ctrl-C during pipe ends the progress
// line with a newline, so that the shell's prompt starts on a line of its
// own, and the status is 130.
func TestPipeInterruptEndsProgressLine(t *testing.T) {
	t.Parallel()
	bin := clitest.Binary(t)
	cmd := exec.Command(bin, "pipe", "--progress", "1k")
	stdin, err := cmd.StdinPipe()
	require.NoError(t, err)
	defer stdin.Close()
	stderrPipe, err := cmd.StderrPipe()
	require.NoError(t, err)
	cmd.Stdout = io.Discard
	require.NoError(t, cmd.Start())
	_, err = stdin.Write(make([]byte, 64<<10)) // a minute's worth at 1 kB/s
	require.NoError(t, err)

	// Wait for the first progress line (drawn after 250 ms), then
	// interrupt.
	r := bufio.NewReader(stderrPipe)
	first, err := r.ReadString('\r')
	require.NoError(t, err)
	require.Equal(t, "\r", first, "nothing before the first progress line")
	require.NoError(t, cmd.Process.Signal(syscall.SIGINT))
	rest, err := io.ReadAll(r)
	require.NoError(t, err)
	err = cmd.Wait()
	var exit *exec.ExitError
	require.ErrorAs(t, err, &exit)
	assert.Equal(t, 130, exit.ExitCode())
	assert.True(t, strings.HasSuffix(string(rest), "\n"), "stderr after the interrupt: %q", rest)
	assert.Contains(t, string(rest), "B/s now")
}

// TestPipeReaderGone: when its reader goes away (ratelimit pipe | head),
// pipe gets a write error like any other: one line, status 1, and its
// control socket removed. Go's runtime ended it by SIGPIPE (status 141)
// and nothing was cleaned up.
func TestPipeReaderGone(t *testing.T) {
	t.Parallel()
	bin := clitest.Binary(t)
	dir := t.TempDir()
	cmd := exec.Command(bin, "pipe", "-q", "1MB/s")
	cmd.Env = append(os.Environ(), "XDG_RUNTIME_DIR="+dir)
	cmd.Stdin = bytes.NewReader(make([]byte, 10<<20))
	out, err := cmd.StdoutPipe()
	require.NoError(t, err)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	require.NoError(t, cmd.Start())
	_, err = io.ReadFull(out, make([]byte, 1))
	require.NoError(t, err)
	require.NoError(t, out.Close()) // the reader goes away
	err = cmd.Wait()
	var exit *exec.ExitError
	require.ErrorAs(t, err, &exit)
	assert.Equal(t, 1, exit.ExitCode(), "stderr: %s", stderr.String())
	assert.Contains(t, stderr.String(), "broken pipe")
	left, err := filepath.Glob(filepath.Join(dir, "ratelimit-pipe.*.sock"))
	require.NoError(t, err)
	assert.Empty(t, left, "control sockets left behind")
}
