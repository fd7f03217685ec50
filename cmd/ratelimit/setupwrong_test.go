package main

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/smoothrate/ratelimit/internal/cli/clitest"
	"github.com/smoothrate/ratelimit/internal/cli/command"
	"github.com/smoothrate/ratelimit/internal/redistest"
)

// TestServerSetUpWrong: a single-server URL (redis://) naming a node of a
// Redis Cluster, or a replica, is a misconfiguration for every command
// that takes --redis: exit status 2 at start with the reason, --fail-open
// or not, not MOVED or READONLY answers (and requests failing open)
// forever. rls has its own cluster case in TestRLSRedisCluster.
func TestServerSetUpWrong(t *testing.T) {
	t.Parallel()
	cl := redistest.StartCluster(t, 3)
	primary := redistest.Start(t)
	replica := redistest.Start(t, "--replicaof", "127.0.0.1", strconv.Itoa(primary.Port))
	bin := clitest.Binary(t)
	rlsConfig := filepath.Join(t.TempDir(), "config.yaml")
	if err := os.WriteFile(rlsConfig, []byte("domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unit: second, requests_per_unit: 1}\n"), 0o644); err != nil {
		t.Fatal(err)
	}
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
	if _, stderr, code := clitest.Run(t, bin, "", "rls", "--config", rlsConfig, "--redis", "redis://"+replica.Addr(),
		"--grpc", "127.0.0.1:0", "--http", "127.0.0.1:0"); code != command.ExitUsage || !strings.Contains(stderr, "it is a replica") {
		t.Errorf("rls on a replica: status %d, stderr %q", code, stderr)
	}
}
