//go:build linux

package rls

import (
	"bufio"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/smoothrate/ratelimit/internal/cli/command"
	"github.com/smoothrate/ratelimit/internal/redistest"
	"github.com/smoothrate/ratelimit/internal/xdstest"
)

// TestImage: the image scripts/image builds, run as Envoy Gateway runs
// envoyproxy/ratelimit's: the command /bin/ratelimit with no arguments,
// Envoy Gateway's whole environment, its certificates at /certs, uid
// 65534, a read-only root and no capabilities; Redis as host:port, the
// configuration from an xDS server over mutual TLS. It serves: /healthcheck
// is 200, and ShouldRateLimit over TLS answers as the pushed configuration
// says; SIGTERM (podman stop) stops it cleanly.
//
// How podman runs here: --runtime runc; --ulimit nofile and nproc at most
// the current limits (runc fails setting a limit above them, which podman
// asks for by default, and raising one is not permitted); --network host,
// so that the container reaches the test's servers on loopback and the
// test reaches its ports (set to 0 on loopback, read from its banner,
// rather than Envoy Gateway's fixed 8080, 8081 and 19001, which others on
// the machine may hold); --add-host, so that it dials the xDS server by
// Envoy Gateway's name.
func TestImage(t *testing.T) {
	t.Parallel()
	podman, err := exec.LookPath("podman")
	if err != nil {
		msg := "podman is needed to run the image (Debian: apt-get install -y podman runc)"
		if os.Getenv("CI") == "true" {
			t.Fatal(msg)
		}
		t.Skip(msg)
	}
	var nonce [6]byte
	_, _ = rand.Read(nonce[:])
	tag := "localhost/ratelimit:test-" + hex.EncodeToString(nonce[:])
	build := exec.Command("../../../scripts/image", tag)
	build.Env = append(os.Environ(), "CONTAINER_ENGINE=podman")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("scripts/image: %v\n%s", err, out)
	}
	t.Cleanup(func() { _ = exec.Command(podman, "rmi", "-f", tag).Run() })
	user, err := exec.Command(podman, "image", "inspect", "--format", "{{.Config.User}}", tag).Output()
	require.NoError(t, err)
	assert.Equal(t, "65534:65534", strings.TrimSpace(string(user)))

	certs := newGatewayCerts(t)
	// The pod's user reads the secret.
	require.NoError(t, os.Chmod(certs.dir, 0o755))
	for _, f := range []string{"ca.crt", "tls.crt", "tls.key"} {
		require.NoError(t, os.Chmod(filepath.Join(certs.dir, f), 0o644))
	}
	srv := xdstest.Start(t, xdstest.ServerTLS(t, certs.ca, certs.leaf))
	_, xdsPort, err := net.SplitHostPort(srv.Addr)
	require.NoError(t, err)
	redis := redistest.Start(t)

	statsd := statsdConfig(t)
	require.NoError(t, os.Chmod(statsd, 0o755))
	require.NoError(t, os.Chmod(filepath.Join(statsd, "conf.yaml"), 0o644))
	env := append(append(gatewayEnv("/certs", "/etc/statsd-exporter", "envoy-gateway:"+xdsPort), fastXDS...), loopbackPorts...)
	env = append(env, "REDIS_SOCKET_TYPE=tcp", "REDIS_URL="+redis.Addr())
	name := "ratelimit-test-" + hex.EncodeToString(nonce[:])
	args := []string{"run", "--rm", "--name", name, "--runtime", "runc",
		"--ulimit", "nofile=" + belowLimit(t, "Max open files"), "--ulimit", "nproc=" + belowLimit(t, "Max processes"),
		"--network", "host", "--add-host", "envoy-gateway:127.0.0.1",
		"--read-only", "--user", "65534:65534", "--cap-drop", "ALL", "--security-opt", "no-new-privileges",
		"-v", certs.dir + ":/certs:ro", "-v", statsd + ":/etc/statsd-exporter:ro", "--entrypoint", "/bin/ratelimit"}
	for _, e := range env {
		args = append(args, "-e", e)
	}
	args = append(args, tag) // no arguments after the image: Envoy Gateway gives none
	t.Cleanup(func() { _ = exec.Command(podman, "rm", "-f", "-t", "0", name).Run() })
	p := attachRLS(t, exec.Command(podman, args...), creds(certs.ca, certs.leaf, t))

	srv.Set(1, routeConfig("default/eg/http", 2))
	p.waitStderr(t, "applied: 1 domain default/eg/http")
	p.waitHealth(t, http.StatusOK)
	ctx := t.Context()
	for i, want := range []rlsv3.RateLimitResponse_Code{rlsv3.RateLimitResponse_OK, rlsv3.RateLimitResponse_OK, rlsv3.RateLimitResponse_OVER_LIMIT} {
		resp, err := p.callRoute(ctx, "default/eg/http")
		require.NoError(t, err, "call %d; stderr: %s", i, p.Stderr.String())
		assert.Equal(t, want, resp.OverallCode, "call %d", i)
		assert.Equal(t, uint32(2), resp.Statuses[0].CurrentLimit.GetRequestsPerUnit(), "call %d", i)
	}
	assert.Contains(t, redis.CLI("KEYS", "*"), "default/eg/http_", "the counts are in Redis")
	p.waitMetric("ratelimit_service_rate_limit_over_limit", 1) // named by the mapping mounted as Envoy Gateway mounts it

	stop := exec.Command(podman, "stop", "-t", "20", name)
	if out, err := stop.CombinedOutput(); err != nil {
		t.Fatalf("podman stop: %v\n%s", err, out)
	}
	assert.Equal(t, command.ExitOK, p.wait(), "stderr: %s", p.Stderr.String())
	assert.Contains(t, p.Stderr.String(), "shutting down")
}

// belowLimit is "n:n" for a ulimit of the container no higher than this
// process's limit named (as /proc/self/limits names it), and at most 4096.
func belowLimit(t *testing.T, name string) string {
	t.Helper()
	f, err := os.Open("/proc/self/limits")
	require.NoError(t, err)
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		rest, ok := strings.CutPrefix(sc.Text(), name)
		if !ok {
			continue
		}
		n := 4096
		if soft := strings.Fields(rest)[0]; soft != "unlimited" {
			v, err := strconv.Atoi(soft)
			require.NoError(t, err)
			n = min(n, v)
		}
		return fmt.Sprintf("%d:%d", n, n)
	}
	t.Fatalf("/proc/self/limits has no %q", name)
	return ""
}
