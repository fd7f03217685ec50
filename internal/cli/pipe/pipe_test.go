package pipe

import (
	"bufio"
	"bytes"
	"crypto/sha256"
	"errors"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/smoothrate/ratelimit/internal/cli/clitest"
	"github.com/smoothrate/ratelimit/internal/cli/command"
)

func TestMain(m *testing.M) { clitest.Main(m) }

// The built binary copies its input byte for byte, whatever the chunk,
// burst or warm-up, and it really limits: 2 MB at 40 MB/s from an empty
// bucket cannot take less than (2 MB - one chunk) / 40 MB/s = 49 ms.
func TestPipeBinary(t *testing.T) {
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
// the average, the elapsed time and the time left at the current rate. Each
// line overwrites the previous one, blanking what is left of a longer one.
func TestProgressLine(t *testing.T) {
	p := newProgress(10_000_000)
	steps := []struct {
		at   time.Duration
		n    int64
		want string
	}{
		{250 * time.Millisecond, 250_000, "\r250 kB of 10.0 MB (2%)  1.00 MB/s now  1.00 MB/s avg  0:00  ETA 0:10"},
		{500 * time.Millisecond, 500_000, "\r500 kB of 10.0 MB (5%)  1.00 MB/s now  1.00 MB/s avg  0:01  ETA 0:10"},
		{1500 * time.Millisecond, 2_500_000, "\r2.50 MB of 10.0 MB (25%)  2.00 MB/s now  1.67 MB/s avg  0:02  ETA 0:04"},
		{3 * time.Second, 10_000_000, "\r10.0 MB of 10.0 MB (100%)  5.00 MB/s now  3.33 MB/s avg  0:03" + strings.Repeat(" ", 9)},
		{4 * time.Second, 10_000_000, "\r10.0 MB of 10.0 MB (100%)  0 B/s now  2.50 MB/s avg  0:04" + strings.Repeat(" ", 4)},
	}
	for _, s := range steps {
		if got := p.line(s.at, s.n); got != s.want {
			t.Errorf("line(%v, %d)\n got %q\nwant %q", s.at, s.n, got, s.want)
		}
	}
	unknown := newProgress(-1)
	if got, want := unknown.line(time.Second, 1000), "\r1.00 kB  1.00 kB/s now  1.00 kB/s avg  0:01"; got != want {
		t.Errorf("unknown size: %q, want %q", got, want)
	}
}

func TestFormatClock(t *testing.T) {
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
