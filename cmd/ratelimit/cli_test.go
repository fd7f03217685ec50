package main

// The command line's one grammar and one style (issue 11 item 4): every
// command reads numbers and units with the same parser (internal/units),
// reports every problem as one line "ratelimit <command>: <what is wrong>",
// and exits with the statuses a shell user expects.

import (
	"bufio"
	"bytes"
	"io"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/smoothrate/ratelimit/internal/cli/clitest"
	"github.com/smoothrate/ratelimit/internal/cli/command"
)

// TestOneGrammar: "run --rate 1e3" was accepted and "pipe 1e9" refused;
// both now read the same numbers, and a number too large is called that,
// not "not a number".
func TestOneGrammar(t *testing.T) {
	var stdout, stderr bytes.Buffer
	code := run([]string{"pipe", "1e9"}, strings.NewReader("data"), &stdout, &stderr)
	assert.Equal(t, command.ExitOK, code, "pipe 1e9: %s", stderr.String())
	assert.Equal(t, "data", stdout.String())

	stdout.Reset()
	stderr.Reset()
	code = run([]string{"run", "--rate", "1e3", "--burst", "2e0", "true", ":::", "a"}, nil, &stdout, &stderr)
	assert.Equal(t, command.ExitOK, code, "run --rate 1e3: %s", stderr.String())

	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"pipe", "1e999"}, `ratelimit pipe: rate "1e999": exponent too large`},
		{[]string{"pipe", "1e300GB"}, `ratelimit pipe: rate "1e300GB": too large`},
		{[]string{"pipe", "0"}, `ratelimit pipe: rate "0": a rate must be positive`},
		{[]string{"pipe", "1M", "--size", "-1"}, `ratelimit pipe: --size "-1": a size cannot be negative`},
		{[]string{"run", "--rate", "1e999", "true"}, `ratelimit run: --rate "1e999": exponent too large`},
		{[]string{"run", "--rate", "1e308/1ns", "true"}, `ratelimit run: --rate "1e308/1ns": too large`},
		{[]string{"run", "--rate", "5", "--burst", "NaN", "true"}, `ratelimit run: invalid value "NaN" for flag -burst: "NaN": not a number (see ratelimit help run)`},
		{[]string{"trace", "--qps", "0x10"}, `ratelimit trace: invalid value "0x10" for flag -qps: "0x10": want a count, optionally per period, like 5/s or 300/m (see ratelimit help trace)`},
		{[]string{"trace", "rate:1e999"}, `ratelimit trace: operation "rate:1e999": "1e999": exponent too large`},
		{[]string{"pipe", "--nosuch", "1M"}, `ratelimit pipe: flag provided but not defined: -nosuch (see ratelimit help pipe)`},
		// A negative rate is a rate, not an unknown flag.
		{[]string{"pipe", "-5k"}, `ratelimit pipe: rate "-5k": a rate must be positive`},
		{[]string{"pipe", "-q", "-.5"}, `ratelimit pipe: rate "-.5": a rate must be positive`},
		// Accepted, it would hang after the first chunk.
		{[]string{"pipe", "1e-300"}, `ratelimit pipe: rate "1e-300": too slow: a chunk of 1024 bytes would take more than a day (at least 0.0119 B/s; a smaller --chunk allows less)`},
		// The rate is to blame, not a --burst nobody gave.
		{[]string{"run", "--rate", "1e-300", "true"}, `ratelimit run: --rate "1e-300": too slow: more than a day between jobs (the slowest rate is 1/d)`},
		{[]string{"trace", "acquire:99999999999999999999"}, `ratelimit trace: operation "acquire:99999999999999999999": "99999999999999999999" permits: too many (at most ` + strconv.Itoa(math.MaxInt) + `)`},
	} {
		stdout.Reset()
		stderr.Reset()
		code := run(tc.args, strings.NewReader("data"), &stdout, &stderr)
		assert.Equal(t, command.ExitUsage, code, "%q", tc.args)
		// One line, one prefix: no "shape:", "jobs:" or "rate:" stacked
		// after the command's own, and no usage text dumped after it.
		assert.Equal(t, tc.want+"\n", stderr.String(), "%q", tc.args)
		assert.Empty(t, stdout.String(), "%q", tc.args)
	}
	// trace reads the rate its own way no more: the same JobRate as run.
	stdout.Reset()
	assert.Equal(t, command.ExitOK, run([]string{"trace", "--qps", "240/m", "acquire"}, nil, &stdout, &stderr))
	assert.Contains(t, stdout.String(), "SmoothBursty at 4 permits/s")
}

// TestVersion: --version prints the module version the go tool recorded in
// the binary, the one "go version -m" reads.
func TestVersion(t *testing.T) {
	bin := clitest.Binary(t)
	out, err := exec.Command("go", "version", "-m", bin).Output()
	require.NoError(t, err)
	var modVersion string
	sc := bufio.NewScanner(bytes.NewReader(out))
	for sc.Scan() {
		if f := strings.Fields(sc.Text()); len(f) >= 3 && f[0] == "mod" {
			modVersion = f[1] + " " + f[2]
		}
	}
	require.NotEmpty(t, modVersion, "go version -m:\n%s", out)
	for _, arg := range []string{"--version", "version"} {
		stdout, stderr, code := clitest.Run(t, bin, "", arg)
		assert.Equal(t, 0, code, stderr)
		assert.True(t, strings.HasPrefix(stdout, "ratelimit "+modVersion), "%s: %q, want the module %q", arg, stdout, modVersion)
	}
}

// TestRunCannotExecute: a command that exists but cannot be executed is
// status 126, as with xargs (127 stays for one that does not exist), both
// when run finds it at start and when a job's command is a template.
func TestRunCannotExecute(t *testing.T) {
	bin := clitest.Binary(t)
	dir := t.TempDir()
	require.NoError(t, os.WriteFile(filepath.Join(dir, "noexec.sh"), []byte("#!/bin/sh\necho hi\n"), 0o644))

	_, stderr, code, _ := clitest.Exec(t, bin, nil, dir, "run", "--rate", "inf", "./noexec.sh", ":::", "a")
	assert.Equal(t, exitCannotRun, code, stderr)
	assert.Contains(t, stderr, "permission denied")

	_, stderr, code, _ = clitest.Exec(t, bin, nil, dir, "run", "--rate", "inf", "./{}", ":::", "noexec.sh")
	assert.Equal(t, exitCannotRun, code, stderr)

	_, stderr, code, _ = clitest.Exec(t, bin, nil, dir, "run", "--rate", "inf", "./{}", ":::", "missing.sh")
	assert.Equal(t, exitNotFound, code, stderr)
}

// TestRunSummaryCountsEveryJob: stopped by --fail-fast after the second of
// four jobs, the summary still counts the four given.
func TestRunSummaryCountsEveryJob(t *testing.T) {
	bin := clitest.Binary(t)
	dir := clitest.ScriptDir(t)
	_, stderr, code, _ := clitest.Exec(t, bin, nil, dir, "run", "--fail-fast", "--rate", "inf", "sh", "rec.sh", ":::", "ok1", "bad", "ok2", "ok3")
	assert.Equal(t, command.ExitFail, code)
	assert.Contains(t, stderr, "ratelimit run: 1 of 4 jobs failed, 2 not started\n")
}

// TestRunInterrupted: SIGINT stops run from starting jobs and it exits 130
// (128 + SIGINT), as a shell reports a process that Ctrl-C stopped, with
// the jobs not started counted.
func TestRunInterrupted(t *testing.T) {
	bin := clitest.Binary(t)
	// The first job interrupts its parent, the ratelimit process; the
	// second cannot start before a second has passed, so it never does.
	_, stderr, code, _ := clitest.Exec(t, bin, nil, "", "run", "--rate", "1/s", "--burst", "0",
		"sh", "-c", `kill -INT $PPID`, "sh", ":::", "a", "b", "c")
	assert.Equal(t, 130, code, stderr)
	assert.Contains(t, stderr, "ratelimit run: 0 of 3 jobs failed, 2 not started\n")
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
