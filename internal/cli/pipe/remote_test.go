//go:build unix

package pipe

import (
	"bytes"
	"fmt"
	"net"
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

// remoteRate runs `ratelimit pipe -R pid args...` with env and returns its
// standard output, standard error and exit status.
func remoteRate(t *testing.T, bin string, env []string, pid string, args ...string) (stdout, stderr string, code int) {
	t.Helper()
	cmd := exec.Command(bin, append([]string{"pipe", "-R", pid}, args...)...)
	cmd.Env = append(os.Environ(), env...)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	if err := cmd.Run(); err != nil {
		exit, ok := err.(*exec.ExitError)
		require.True(t, ok, "running -R: %v", err)
		code = exit.ExitCode()
	}
	return out.String(), errb.String(), code
}

// A pipe started at 2 kB/s with 256 KiB to copy (128 s at that rate) is
// moved to 1 GB/s by `ratelimit pipe -R PID 1GB/s`: it says so, and the pipe
// then finishes well within the bound, its output unchanged. A rate the
// pipe cannot run at is refused first (status 2) and changes nothing. At
// the end the pipe's control socket is gone.
func TestPipeRemoteRate(t *testing.T) {
	t.Parallel()
	bin := clitest.Binary(t)
	env := clitest.RuntimeDir(t)
	in := clitest.RandomInput(t, 256<<10)
	p := clitest.StartCopying(t, bin, env, in, 30*time.Second, "pipe", "2kB/s")
	pid := p.Cmd.Process.Pid

	out, stderr, code := remoteRate(t, bin, env, strconv.Itoa(pid), "1e-9")
	assert.Equal(t, command.ExitUsage, code, "stdout %q", out)
	assert.Contains(t, stderr, fmt.Sprintf("ratelimit pipe: -R %d: process %d refused: rate \"1e-09\": too slow", pid, pid))

	out, stderr, code = remoteRate(t, bin, env, strconv.Itoa(pid), "-L", "1GB/s")
	require.Equal(t, command.ExitOK, code, "stderr %q", stderr)
	// As the README shows it.
	assert.Equal(t, clitest.DocQuote(t, "README.md", "process 4242 now copies at",
		"4242", strconv.Itoa(pid), "10.0 MB/s", "1.00 GB/s", "1.00 MB/s", "2.00 kB/s")+"\n", out)

	if code := p.Finish(t, 30*time.Second); code != 0 || p.Stdout.String() != string(in) || p.Stderr.String() != "" {
		t.Errorf("pipe: exit %d, %d of %d bytes, stderr %q", code, len(p.Stdout.String()), len(in), p.Stderr.String())
	}
	dir := strings.TrimPrefix(env[0], "XDG_RUNTIME_DIR=")
	left, err := os.ReadDir(dir)
	require.NoError(t, err)
	assert.Empty(t, left, "files left in the runtime directory")
}

// -R's errors: a process that does not exist or is not a pipe (status 1),
// and bad arguments (status 2), each in one line.
func TestPipeRemoteRateErrors(t *testing.T) {
	t.Parallel()
	bin := clitest.Binary(t)
	env := clitest.RuntimeDir(t)
	gone := exec.Command("true")
	require.NoError(t, gone.Run())
	for _, tc := range []struct {
		pid  string
		args []string
		code int
		want string
	}{
		{strconv.Itoa(gone.Process.Pid), []string{"1MB/s"}, command.ExitFail, "no process"},
		{strconv.Itoa(os.Getpid()), []string{"1MB/s"}, command.ExitFail, "is not a ratelimit pipe, or one started with another $XDG_RUNTIME_DIR or $TMPDIR"},
		{"pipe", []string{"1MB/s"}, command.ExitUsage, `-R "pipe": want the process ID of a running pipe`},
		{"-3", []string{"1MB/s"}, command.ExitUsage, "want the process ID"},
		{"42", nil, command.ExitUsage, "no rate"},
		{"42", []string{"1MB/s", "2MB/s"}, command.ExitUsage, "one rate expected"},
		{"42", []string{"--chunk", "4KiB", "1MB/s"}, command.ExitUsage, "-R changes only the rate of a running pipe: --chunk does not go with it"},
		{"42", []string{"-q", "1MB/s"}, command.ExitUsage, "-q does not go with it"},
	} {
		stdout, stderr, code := remoteRate(t, bin, env, tc.pid, tc.args...)
		if code != tc.code || stdout != "" || !strings.HasPrefix(stderr, "ratelimit pipe: -R ") ||
			!strings.Contains(stderr, tc.want) || strings.Count(stderr, "\n") != 1 {
			t.Errorf("-R %s %q: exit %d, stdout %q, stderr %q; want exit %d and %q", tc.pid, tc.args, code, stdout, stderr, tc.code, tc.want)
		}
	}
}

// Another user cannot change a pipe's rate: the socket's directory is
// private. Run as root only, which can start a process as another user.
func TestPipeRemoteRateOtherUser(t *testing.T) {
	t.Parallel()
	if os.Getuid() != 0 {
		t.Skip("needs root, to run -R as another user")
	}
	bin := clitest.Binary(t)
	env := clitest.RuntimeDir(t)
	// The binary, where the other user can run it.
	dir, err := os.MkdirTemp("", "ratelimit-other-")
	require.NoError(t, err)
	t.Cleanup(func() { os.RemoveAll(dir) })
	require.NoError(t, os.Chmod(dir, 0o755))
	open := filepath.Join(dir, "ratelimit")
	data, err := os.ReadFile(bin)
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(open, data, 0o755))

	p := clitest.StartCopying(t, bin, env, clitest.RandomInput(t, 64<<10), 30*time.Second, "pipe", "2kB/s")
	cmd := exec.Command(open, "pipe", "-R", strconv.Itoa(p.Cmd.Process.Pid), "1GB/s")
	cmd.Env = append(os.Environ(), env...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: 65534, Gid: 65534}}
	out, err := cmd.CombinedOutput()
	exit, ok := err.(*exec.ExitError)
	require.True(t, ok, "-R as another user: %v, %q", err, out)
	assert.Equal(t, command.ExitFail, exit.ExitCode(), "%s", out)
	assert.Contains(t, string(out), "belongs to another user")
	// The pipe still runs at its rate: 64 KiB at 2 kB/s take half a minute.
	assert.Less(t, len(p.Stdout.String()), 64<<10, "the pipe finished: its rate changed")
}

// privateDir takes a directory of the user's that no one else can enter,
// and nothing else; listenControl falls back from an unfit $XDG_RUNTIME_DIR
// to the user's directory under $TMPDIR, and refuses that one if it is open
// to others.
func TestControlDirs(t *testing.T) {
	base := t.TempDir()
	private := filepath.Join(base, "private")
	open := filepath.Join(base, "open")
	link := filepath.Join(base, "link")
	file := filepath.Join(base, "file")
	require.NoError(t, os.Mkdir(private, 0o700))
	require.NoError(t, os.Mkdir(open, 0o755))
	require.NoError(t, os.Chmod(open, 0o755)) // whatever the umask
	require.NoError(t, os.Symlink(private, link))
	require.NoError(t, os.WriteFile(file, nil, 0o600))
	assert.NoError(t, privateDir(private))
	for dir, want := range map[string]string{open: "open to other users", link: "not a directory", file: "not a directory", filepath.Join(base, "none"): "no such file"} {
		if err := privateDir(dir); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("privateDir(%s) = %v, want %q", dir, err, want)
		}
	}

	retune := func(rate float64) (string, error) { return "set " + strconv.FormatFloat(rate, 'g', -1, 64), nil }
	t.Setenv("XDG_RUNTIME_DIR", open)
	t.Setenv("TMPDIR", base)
	c, err := listenControl(4242, retune)
	require.NoError(t, err)
	sock := filepath.Join(base, "ratelimit-"+strconv.Itoa(os.Getuid()), socketName(4242))
	fi, err := os.Lstat(sock)
	require.NoError(t, err, "the socket under $TMPDIR")
	assert.Equal(t, os.ModeSocket, fi.Mode().Type())
	answer, status := requestRate(4242, 5e6)
	assert.Equal(t, "set 5e+06", answer)
	assert.Equal(t, command.ExitOK, status)
	c.Close()
	_, err = os.Lstat(sock)
	assert.True(t, os.IsNotExist(err), "the socket outlives Close: %v", err)

	// A stale socket of a process of the same ID is replaced, and those
	// of other killed pipes are swept away; a live one stays.
	staleSocket := func(pid int) string {
		path := filepath.Join(filepath.Dir(sock), socketName(pid))
		stale, err := net.Listen("unix", path)
		require.NoError(t, err)
		stale.(*net.UnixListener).SetUnlinkOnClose(false)
		stale.Close()
		return path
	}
	staleSocket(4242)
	killed := staleSocket(4244)
	live, err := listenControl(4245, retune)
	require.NoError(t, err)
	defer live.Close()
	c, err = listenControl(4242, retune)
	require.NoError(t, err, "over a stale socket")
	c.Close()
	_, err = os.Lstat(killed)
	assert.True(t, os.IsNotExist(err), "a killed pipe's socket was not swept: %v", err)
	_, err = os.Lstat(filepath.Join(filepath.Dir(sock), socketName(4245)))
	assert.NoError(t, err, "a live pipe's socket was swept")

	require.NoError(t, os.Chmod(filepath.Dir(sock), 0o777))
	_, err = listenControl(4242, retune)
	assert.ErrorContains(t, err, "open to other users")
}

// A request the socket does not understand gets an error line; a rate
// the pipe refuses gets a usage line (status 2 at the caller).
func TestControlAnswers(t *testing.T) {
	dir, _ := strings.CutPrefix(clitest.RuntimeDir(t)[0], "XDG_RUNTIME_DIR=")
	t.Setenv("XDG_RUNTIME_DIR", dir)
	c, err := listenControl(4243, func(rate float64) (string, error) {
		if rate < 1 {
			return "", badRate{fmt.Errorf("rate %g: too slow", rate)}
		}
		return "", fmt.Errorf("redis down")
	})
	require.NoError(t, err)
	defer c.Close()
	answer, status := requestRate(4243, 0.5)
	assert.Equal(t, command.ExitUsage, status)
	assert.Equal(t, "process 4243 refused: rate 0.5: too slow", answer)
	answer, status = requestRate(4243, 5)
	assert.Equal(t, command.ExitFail, status)
	assert.Equal(t, "process 4243: redis down", answer)

	conn, err := net.Dial("unix", filepath.Join(os.Getenv("XDG_RUNTIME_DIR"), socketName(4243)))
	require.NoError(t, err)
	defer conn.Close()
	_, err = conn.Write([]byte("speed 5\n"))
	require.NoError(t, err)
	reply := make([]byte, 100)
	n, _ := conn.Read(reply)
	assert.Equal(t, "error request \"speed 5\\n\" not understood\n", string(reply[:n]))
}

// TestControlWithoutRuntimeDir: without $XDG_RUNTIME_DIR (cron, ssh, a
// container) the control socket is in $TMPDIR/ratelimit-UID, made if it
// is not there yet, and -R reaches it. The directory was made only when
// it came second, after $XDG_RUNTIME_DIR: without one, -R never worked.
func TestControlWithoutRuntimeDir(t *testing.T) {
	t.Setenv("XDG_RUNTIME_DIR", "")
	t.Setenv("TMPDIR", t.TempDir())
	set := make(chan float64, 1)
	c, err := listenControl(4251, func(rate float64) (string, error) { set <- rate; return "set", nil })
	if err != nil {
		t.Fatalf("listenControl: %v", err)
	}
	defer c.Close()
	if answer, status := requestRate(4251, 5e6); status != command.ExitOK {
		t.Fatalf("requestRate: %q, status %d", answer, status)
	}
	if got := <-set; got != 5e6 {
		t.Errorf("rate set %v, want 5e6", got)
	}
}
