package main

// The command line's one grammar and one style: every command reads
// numbers and units with the same parser (internal/units), reports every
// problem as one line "ratelimit <command>: <what is wrong>", and exits
// with the statuses a shell user expects.

import (
	"bufio"
	"bytes"
	"math"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/smoothrate/ratelimit/internal/cli/clitest"
	"github.com/smoothrate/ratelimit/internal/cli/command"
	"github.com/smoothrate/ratelimit/internal/redistest"
)

// TestOneGrammar: "run --rate 1e3" was accepted and "pipe 1e9" refused;
// both now read the same numbers, and a number too large is called that,
// not "not a number".
func TestOneGrammar(t *testing.T) {
	t.Parallel()
	var stdout, stderr bytes.Buffer
	code := dispatch([]string{"pipe", "1e9"}, strings.NewReader("data"), &stdout, &stderr)
	assert.Equal(t, command.ExitOK, code, "pipe 1e9: %s", stderr.String())
	assert.Equal(t, "data", stdout.String())

	stdout.Reset()
	stderr.Reset()
	code = dispatch([]string{"run", "--rate", "1e3", "--burst", "2e0", "true", ":::", "a"}, nil, &stdout, &stderr)
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
		code := dispatch(tc.args, strings.NewReader("data"), &stdout, &stderr)
		assert.Equal(t, command.ExitUsage, code, "%q", tc.args)
		// One line, one prefix: no "shape:", "jobs:" or "rate:" stacked
		// after the command's own, and no usage text dumped after it.
		assert.Equal(t, tc.want+"\n", stderr.String(), "%q", tc.args)
		assert.Empty(t, stdout.String(), "%q", tc.args)
	}
	// trace reads the rate its own way no more: the same JobRate as run.
	stdout.Reset()
	assert.Equal(t, command.ExitOK, dispatch([]string{"trace", "--qps", "240/m", "acquire"}, nil, &stdout, &stderr))
	assert.Contains(t, stdout.String(), "SmoothBursty at 4 permits/s")
}

// TestVersion: --version prints the module version the go tool recorded in
// the binary, the one "go version -m" reads.
func TestVersion(t *testing.T) {
	t.Parallel()
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

// TestServerSetUpWrong: a single-server URL (redis://) naming a node of a
// Redis Cluster, or a replica, is a misconfiguration for every command
// that takes --redis: exit status 2 at start with the reason, --fail-open
// or not, not MOVED or READONLY answers (and requests failing open)
// forever. rls has its own cases in TestRLSRedisCluster and
// TestRLSRedisMisconfigured.
func TestServerSetUpWrong(t *testing.T) {
	t.Parallel()
	cl := redistest.StartCluster(t, 3)
	primary := redistest.Start(t)
	replica := redistest.StartReplica(t, primary)
	bin := clitest.Binary(t)
	for _, c := range []struct{ url, why string }{
		{"redis://" + cl.Addrs()[0], "node of a Redis Cluster"},
		{"redis://" + replica.Addr(), "it is a replica"},
	} {
		for _, failOpen := range []bool{false, true} {
			args := []string{"--redis", c.url, "--limit", "10/s", "http://127.0.0.1:1"}
			if failOpen {
				args = append([]string{"--fail-open"}, args...)
			}
			if stderr, code := clitest.RunToExit(t, bin, nil, 30*time.Second, append([]string{"proxy", "--listen", "127.0.0.1:0"}, args...)...); code != command.ExitUsage || !strings.Contains(stderr, c.why) {
				t.Errorf("proxy %s (fail-open %v): status %d, stderr %q", c.url, failOpen, code, stderr)
			}
		}
		for _, args := range [][]string{
			{"pipe", "--redis", c.url, "--name", "node", "1MB/s"},
			{"run", "--redis", c.url, "--name", "node", "--rate", "10/s", "--", "true", ":::", "a"},
		} {
			if _, stderr, code, _ := clitest.Exec(t, bin, []byte("x"), "", args...); code != command.ExitUsage || !strings.Contains(stderr, c.why) {
				t.Errorf("%s %s: status %d, stderr %q", args[0], c.url, code, stderr)
			}
		}
	}
}
