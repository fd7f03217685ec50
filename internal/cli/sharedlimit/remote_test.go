//go:build unix

package sharedlimit

import (
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/smoothrate/ratelimit/internal/cli/clitest"
	"github.com/smoothrate/ratelimit/internal/cli/command"
	"github.com/smoothrate/ratelimit/internal/redistest"
)

// `ratelimit pipe -R PID RATE` on a pipe that shares its limit through
// Redis changes the shared limit: the pipe (256 KiB at 2 kB/s: 128 s) then
// finishes well within the bound, and the name holds the new rate, so a
// process that asks for the old one is refused.
func TestPipeRemoteRateShared(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	bin := clitest.Binary(t)
	env := clitest.RuntimeDir(t)
	in := clitest.RandomInput(t, 256<<10)
	args := []string{"pipe", "--redis", clitest.RedisURL(srv), "--name", "retuned"}
	p := clitest.StartCopying(t, bin, env, in, 30*time.Second, append(args, "2kB/s")...)
	pid := p.Cmd.Process.Pid

	cmd := exec.Command(bin, "pipe", "-R", strconv.Itoa(pid), "1GB/s")
	cmd.Env = append(os.Environ(), env...)
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("-R: %v, %s", err, out)
	}
	if want := fmt.Sprintf("the limit %q that process %d shares through Redis is now 1.00 GB/s, for every process that shares it (was 2.00 kB/s)\n", "retuned", pid); string(out) != want {
		t.Errorf("-R said %q, want %q", out, want)
	}
	if code := p.Finish(t, 30*time.Second); code != command.ExitOK || p.Stdout.String() != string(in) {
		t.Errorf("pipe: exit %d, %d of %d bytes, stderr %q", code, len(p.Stdout.String()), len(in), p.Stderr.String())
	}
	checkNotices(t, "pipe", p.Stderr.String())

	_, stderr, code, _ := clitest.Exec(t, bin, []byte("x"), "", append(args, "2kB/s")...)
	if code != command.ExitUsage || !strings.Contains(stderr, `name "retuned" holds 1e+09/s bytes`) {
		t.Errorf("a pipe at the old rate: exit %d, stderr %q; want it refused, the name holding 1e+09/s", code, stderr)
	}
}
