package sharedlimit

import (
	"bytes"
	"io"
	"os/exec"
	"strconv"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/smoothrate/ratelimit/internal/cli/clitest"
	"github.com/smoothrate/ratelimit/internal/cli/command"
	"github.com/smoothrate/ratelimit/internal/redistest"
)

// holdName starts the binary with args (a pipe of a large input, or a run
// of many jobs) and returns once its first output shows that it holds its
// name in Redis; the process is killed at the end of the test.
func holdName(t *testing.T, bin string, args ...string) {
	t.Helper()
	cmd := exec.Command(bin, args...)
	cmd.Stdin = bytes.NewReader(clitest.RandomInput(t, 5_000_000))
	cmd.Stderr = io.Discard
	out, err := cmd.StdoutPipe()
	require.NoError(t, err)
	require.NoError(t, cmd.Start())
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		_, _ = io.Copy(io.Discard, out)
		_ = cmd.Wait()
	})
	_, err = io.ReadFull(out, make([]byte, 1))
	require.NoError(t, err, "%q: no output", args)
}

// Names cannot collide silently: a run at 1/s started while a pipe at
// 1MB/s holds its name must not join the pipe's limit and run its jobs at
// a million per second. A process whose rate, kind or unit
// differs from what its name holds exits 2 before reading or running
// anything, unless --join says that adopting the stored limit is intended.
func TestNamesCannotCollide(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	bin := clitest.Binary(t)
	url := clitest.RedisURL(srv)
	holdName(t, bin, "pipe", "--redis", url, "--name", "col", "1MB/s")
	jobs := func(n int) []string {
		args := []string{"sh", "rec.sh", ":::"}
		for i := range n {
			args = append(args, "job"+strconv.Itoa(i))
		}
		return args
	}

	dir := clitest.ScriptDir(t)
	_, stderr, code, _ := clitest.Exec(t, bin, nil, dir, append([]string{"run", "--redis", url, "--name", "col", "--rate", "1/s"}, jobs(5)...)...)
	assert.Equal(t, command.ExitUsage, code, stderr)
	assert.Equal(t, clitest.DocQuote(t, "README.md", "ratelimit run: name", `"demo"`, `"col"`)+"\n", stderr, "as the README quotes it")
	assert.Empty(t, clitest.Recorded(t, dir), "a refused run ran jobs")

	// --join: the run adopts the pipe's rate (5 jobs at 1e6/s).
	_, stderr, code, _ = clitest.Exec(t, bin, nil, dir, append([]string{"run", "--join", "--redis", url, "--name", "col", "--rate", "1/s"}, jobs(5)...)...)
	assert.Equal(t, command.ExitOK, code, stderr)
	assert.Len(t, clitest.Recorded(t, dir), 5)
	assert.NotContains(t, stderr, "holds")

	// The same rate and unit of another kind.
	in := clitest.RandomInput(t, 10_000)
	out, stderr, code, _ := clitest.Exec(t, bin, in, "", "pipe", "--redis", url, "--name", "col", "--warmup", "1s", "1MB/s")
	assert.Equal(t, command.ExitUsage, code, stderr)
	assert.Equal(t, "ratelimit pipe: name \"col\" holds 1e+06/s bytes, with no warm-up (a pipe); --join adopts it\n", stderr)
	assert.Zero(t, len(out), "a refused pipe copied bytes")

	// The same configuration joins.
	out, stderr, code, _ = clitest.Exec(t, bin, in, "", "pipe", "--redis", url, "--name", "col", "1MB/s")
	assert.Equal(t, command.ExitOK, code, stderr)
	assert.Equal(t, in, out)

	// A pipe cannot join a run's name by accident either.
	holdName(t, bin, append([]string{"run", "--redis", url, "--name", "jobs", "--rate", "2/s", "--", "echo"}, jobs(50)[2:]...)...)
	// (Four bytes: joined, they take 2 s at the run's 2/s.)
	out, stderr, code, _ = clitest.Exec(t, bin, []byte("abc\n"), "", "pipe", "--redis", url, "--name", "jobs", "2B/s")
	assert.Equal(t, command.ExitUsage, code, stderr)
	assert.Equal(t, "ratelimit pipe: name \"jobs\" holds 2/s jobs (a run); --join adopts it\n", stderr)
	assert.Zero(t, len(out), "a refused pipe copied bytes")
}
