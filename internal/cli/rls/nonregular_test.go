//go:build unix

package rls

// The tests of files under --config that are not regular files (named
// pipes, sockets, devices): Unix's.

import (
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/smoothrate/ratelimit/internal/cli/clitest"
	"github.com/smoothrate/ratelimit/internal/cli/command"
)

// nonRegular makes, at path, a file of each kind that is not a regular
// file and that a test can make without privileges: a named pipe, a Unix
// socket, and links to two character devices (one that never ends).
var nonRegular = []struct {
	kind string
	make func(t *testing.T, path string) (remove func())
}{
	{"a named pipe (FIFO)", func(t *testing.T, path string) func() {
		require.NoError(t, syscall.Mkfifo(path, 0o644))
		return func() { os.Remove(path) }
	}},
	{"a socket", func(t *testing.T, path string) func() {
		ln, err := net.Listen("unix", path)
		require.NoError(t, err)
		return func() { ln.Close(); os.Remove(path) }
	}},
	{"a character device", func(t *testing.T, path string) func() {
		require.NoError(t, os.Symlink("/dev/zero", path))
		return func() { os.Remove(path) }
	}},
	{"a character device", func(t *testing.T, path string) func() {
		require.NoError(t, os.Symlink("/dev/null", path))
		return func() { os.Remove(path) }
	}},
}

// TestRLSReloadRefusesNonRegular: a named pipe, a socket or a device under
// --config is refused with a log line naming it, the previous
// configuration kept and the refusal counted; reloading goes on (a later
// edit is loaded, SIGHUP is heard), and SIGTERM exits. Reading a pipe
// would have frozen reloading for good and kept SIGTERM from exiting.
func TestRLSReloadRefusesNonRegular(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	cfg := filepath.Join(dir, "config.yaml")
	writeFile(t, cfg, fmt.Sprintf(perDay, 1))
	p := startRLS(t, nil, "--config", dir, "--drain", "1s")
	loads, errs := p.metric("ratelimit_service_config_load_success"), int64(0)
	limit := uint32(1)
	for i, nr := range nonRegular {
		path := filepath.Join(dir, fmt.Sprintf("z%d.yaml", i))
		remove := nr.make(t, path)
		errs++
		p.waitMetric("ratelimit_service_config_load_error", errs)
		p.waitStderr(t, path+": "+nr.kind+", not a regular file: refused")
		assert.Equal(t, limit, p.limitOf("k"), "%s: the previous configuration is kept", nr.kind)

		// SIGHUP reads again at once, and refuses again.
		errs++
		require.NoError(t, p.Cmd.Process.Signal(syscall.SIGHUP))
		p.waitMetric("ratelimit_service_config_load_error", errs)

		// The configuration edited, and the file gone: loaded. (In this
		// order, no look can see the previous configuration alone.)
		limit++
		writeFile(t, cfg, fmt.Sprintf(perDay, limit))
		remove()
		loads++
		p.waitMetric("ratelimit_service_config_load_success", loads)
		assert.Equal(t, limit, p.limitOf("k"), "%s removed", nr.kind)
	}

	// A pipe that stays: SIGTERM still exits, at once (after --drain).
	require.NoError(t, syscall.Mkfifo(filepath.Join(dir, "stays.yaml"), 0o644))
	p.waitMetric("ratelimit_service_config_load_error", errs+1)
	require.NoError(t, p.Cmd.Process.Signal(syscall.SIGTERM))
	assert.Equal(t, command.ExitOK, p.wait(), "stderr: %s", p.Stderr.String())
}

// TestRLSCheckNonRegular: --check on a named pipe, or on a directory that
// holds one, or on a device, answers at once: exit 2 and one line naming
// the file (it used to wait for a writer, for ever).
func TestRLSCheckNonRegular(t *testing.T) {
	t.Parallel()
	bin := clitest.Binary(t)
	dir := t.TempDir()
	writeFile(t, filepath.Join(dir, "a.yaml"), fmt.Sprintf(perDay, 1))
	fifo := filepath.Join(dir, "b.yaml")
	require.NoError(t, syscall.Mkfifo(fifo, 0o644))
	for _, path := range []string{fifo, dir, "/dev/zero"} {
		stderr, code := clitest.RunToExit(t, bin, nil, rlsWait, "rls", "--config", path, "--check")
		assert.Equal(t, command.ExitUsage, code, "%s: %s", path, stderr)
		assert.Equal(t, 1, strings.Count(stderr, "\n"), "%s: one line: %q", path, stderr)
		assert.Contains(t, stderr, "not a regular file", path)
	}
}
