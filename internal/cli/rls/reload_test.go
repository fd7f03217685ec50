package rls

// The tests of reloading: only regular files are read, a file still being
// written is not served, a read that does not end holds nothing up.

import (
	"bytes"
	"fmt"
	"io"
	"log"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/smoothrate/ratelimit/internal/cli/clitest"
	"github.com/smoothrate/ratelimit/internal/cli/command"
	"github.com/smoothrate/ratelimit/rls"
)

// limitOf is the requests_per_unit the service answers for domain test's
// descriptor k=x (0: no limit).
func (p *rlsProc) limitOf(key string) uint32 {
	p.t.Helper()
	resp, err := p.call(p.t.Context(), "test", key+"=x")
	require.NoError(p.t, err)
	return resp.Statuses[0].GetCurrentLimit().GetRequestsPerUnit()
}

// TestRLSCheckTooLarge: a file over 16 MiB is refused, named, without
// reading past the bound.
func TestRLSCheckTooLarge(t *testing.T) {
	t.Parallel()
	big := filepath.Join(t.TempDir(), "big.yaml")
	f, err := os.Create(big)
	require.NoError(t, err)
	require.NoError(t, f.Truncate(maxConfigFileBytes+1)) // sparse: costs no disk
	require.NoError(t, f.Close())
	var stdout, stderr bytes.Buffer
	assert.Equal(t, command.ExitUsage, Run([]string{"--config", big, "--check"}, nil, &stdout, &stderr))
	assert.Contains(t, stderr.String(), big+": larger than 16MiB: refused")
}

// The configurations of TestRLSReloadWaitsForStableFiles: the whole file
// limits k and m; its first half, cut at a line boundary, parses and
// limits only k, so that a service that loaded it would answer m without
// a limit.
const (
	stableBefore = "domain: test\ndescriptors:\n  - key: k\n    rate_limit: {unit: day, requests_per_unit: 1}\n  - key: m\n    rate_limit: {unit: day, requests_per_unit: 1}\n"
	stableHalf   = "domain: test\ndescriptors:\n  - key: k\n    rate_limit: {unit: day, requests_per_unit: 5}\n"
	stableRest   = "  - key: m\n    rate_limit: {unit: day, requests_per_unit: 3}\n"
)

// TestRLSReloadWaitsForStableFiles: a file written in two steps, as an
// editor or a copy writes it, is not loaded after the first (which parses:
// it is cut at a line boundary) but once it has read the same at two
// looks; a file renamed into place whose modification time is older than
// the interval is loaded at the first look; SIGHUP loads at once what the
// files hold.
//
// The test writes the second step as soon as the service says it saw the
// first (the line it logs for a change it waits on), which leaves it the
// whole --reload-interval, 2 s, before the next look: it takes
// milliseconds even on a loaded machine.
func TestRLSReloadWaitsForStableFiles(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	cfg := filepath.Join(dir, "config.yaml")
	writeFile(t, cfg, stableBefore)
	p := startRLS(t, nil, "--config", dir, "--reload-interval", "2s")
	loads := p.metric("ratelimit_service_config_load_success")
	const waiting = "changed; loading it once it reads the same at the next look"

	f, err := os.OpenFile(cfg, os.O_WRONLY|os.O_TRUNC, 0)
	require.NoError(t, err)
	_, err = io.WriteString(f, stableHalf)
	require.NoError(t, err)
	p.waitStderr(t, waiting)
	_, err = io.WriteString(f, stableRest)
	require.NoError(t, err)
	require.NoError(t, f.Close())
	p.waitMetric("ratelimit_service_config_load_success", loads+1)
	assert.Equal(t, uint32(5), p.limitOf("k"))
	assert.Equal(t, uint32(3), p.limitOf("m"), "the whole file is in force")
	assert.Equal(t, loads+1, p.metric("ratelimit_service_config_load_success"), "the half file was never loaded")
	assert.Equal(t, 1, strings.Count(p.Stderr.String(), "configuration reloaded"), "stderr: %s", p.Stderr.String())
	assert.Equal(t, 1, strings.Count(p.Stderr.String(), waiting))

	// A file written an hour ago, renamed into place: loaded at the
	// first look, without waiting for a second.
	tmp := filepath.Join(t.TempDir(), "next.yaml")
	writeFile(t, tmp, strings.ReplaceAll(stableBefore, "requests_per_unit: 1}", "requests_per_unit: 7}"))
	hourAgo := time.Now().Add(-time.Hour)
	require.NoError(t, os.Chtimes(tmp, hourAgo, hourAgo))
	require.NoError(t, os.Rename(tmp, cfg))
	p.waitMetric("ratelimit_service_config_load_success", loads+2)
	assert.Equal(t, uint32(7), p.limitOf("m"))
	assert.Equal(t, 1, strings.Count(p.Stderr.String(), waiting), "an old file does not wait: stderr: %s", p.Stderr.String())

	// SIGHUP: the operator says the files are complete; loaded at once,
	// fresh as they are.
	writeFile(t, cfg, stableHalf)
	require.NoError(t, p.Cmd.Process.Signal(syscall.SIGHUP))
	p.waitMetric("ratelimit_service_config_load_success", loads+3)
	resp, err := p.call(t.Context(), "test", "m=x")
	require.NoError(t, err)
	assert.Nil(t, resp.Statuses[0].CurrentLimit, "SIGHUP loaded the file as it was")
	assert.Equal(t, rlsv3.RateLimitResponse_OK, resp.OverallCode)
}

// TestReloadReadThatNeverEnds: a read of the configuration that does not
// end (a filesystem that does not answer) is given up after its bound with
// a log line, the next looks start no other read while it runs, and its
// result is taken once it ends; stopping the watcher (at SIGTERM) returns
// at once while a look waits on such a read.
func TestReloadReadThatNeverEnds(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	writeFile(t, filepath.Join(dir, "config.yaml"), fmt.Sprintf(perDay, 1))
	c := flagDefaults()
	c.configPath = dir
	s, cfg, err := c.load()
	require.NoError(t, err)
	svc, err := rls.New(cfg, mustMemoryStore(t))
	require.NoError(t, err)
	var logs clitest.LockedBuffer
	w := newConfigWatcher(c, svc, s, log.New(&logs, "", 0))
	release := make(chan struct{})
	var reads atomic.Int32
	w.read = func(path string) configSnapshot {
		reads.Add(1)
		<-release
		return readConfigFiles(path)
	}
	w.readTimeout = 10 * time.Millisecond
	w.look(false)
	w.look(false)
	w.look(true)
	assert.Equal(t, int32(1), reads.Load(), "one read at a time")
	assert.Equal(t, 1, strings.Count(logs.String(), "takes more than 10ms"), logs.String())
	close(release)
	w.readTimeout = rlsWait
	w.look(false)
	assert.Contains(t, logs.String(), "ended after")
	assert.Equal(t, int32(1), reads.Load())

	never := make(chan struct{})
	t.Cleanup(func() { close(never) })
	started := make(chan struct{})
	c.reloadInterval = time.Millisecond
	w = newConfigWatcher(c, svc, s, log.New(io.Discard, "", 0))
	w.read = func(string) configSnapshot {
		close(started)
		<-never
		return configSnapshot{}
	}
	w.readTimeout = time.Hour
	stop := w.start()
	<-started
	stopped := make(chan struct{})
	go func() {
		stop()
		close(stopped)
	}()
	select {
	case <-stopped:
	case <-time.After(rlsWait):
		t.Fatal("stopping the watcher waited for a read that does not end")
	}
}

func mustMemoryStore(t *testing.T) *rls.MemoryStore {
	m, err := rls.NewMemoryStore()
	require.NoError(t, err)
	return m
}

// TestRLSCheckEmpty: --check on a directory with no file is an error (served,
// it would answer every call OK without a limit), not "valid: 0 files".
func TestRLSCheckEmpty(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	writeFile(t, filepath.Join(dir, ".hidden.yaml"), fmt.Sprintf(perDay, 1)) // names starting with '.' are not read
	var stdout, stderr bytes.Buffer
	assert.Equal(t, command.ExitUsage, Run([]string{"--config", dir, "--check"}, nil, &stdout, &stderr))
	assert.Equal(t, "ratelimit rls: "+dir+" holds no configuration file\n", stderr.String())
	assert.Empty(t, stdout.String())
}
