package main

import (
	"strings"
	"testing"
	"time"

	"github.com/smoothrate/ratelimit/internal/cli/clitest"
	"github.com/smoothrate/ratelimit/internal/cli/command"
	"github.com/smoothrate/ratelimit/internal/redistest"
)

// TestClusterNodeAsServer: a single-server URL (redis://) naming a node of
// a Redis Cluster is a misconfiguration for every command that takes
// --redis: exit status 2 at start with the reason, --fail-open or not, not
// MOVED answers (and requests failing open) forever. rls has its own
// case in TestRLSRedisCluster.
func TestClusterNodeAsServer(t *testing.T) {
	t.Parallel()
	cl := redistest.StartCluster(t, 3)
	bin := clitest.Binary(t)
	url := "redis://" + cl.Addrs()[0]
	const why = "node of a Redis Cluster"
	for _, failOpen := range []bool{false, true} {
		args := []string{"--redis", url, "--limit", "10/s", "http://127.0.0.1:1"}
		if failOpen {
			args = append([]string{"--fail-open"}, args...)
		}
		if stderr, code := clitest.RunToExit(t, bin, nil, 30*time.Second, append([]string{"proxy", "--listen", "127.0.0.1:0"}, args...)...); code != command.ExitUsage || !strings.Contains(stderr, why) {
			t.Errorf("proxy (fail-open %v): status %d, stderr %q", failOpen, code, stderr)
		}
	}
	for _, args := range [][]string{
		{"pipe", "--redis", url, "--name", "node", "1MB/s"},
		{"run", "--redis", url, "--name", "node", "--rate", "10/s", "--", "true", ":::", "a"},
	} {
		if _, stderr, code, _ := clitest.Exec(t, bin, []byte("x"), "", args...); code != command.ExitUsage || !strings.Contains(stderr, why) {
			t.Errorf("%s: status %d, stderr %q", args[0], code, stderr)
		}
	}
}
