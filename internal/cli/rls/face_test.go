package rls

// The tests of what one client can hold of the service's faces (idle
// connections, stalled bodies, file descriptors) and of its stop (the
// drain window), against the built binary.

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"

	"github.com/smoothrate/ratelimit/internal/cli/clitest"
	"github.com/smoothrate/ratelimit/internal/cli/command"
)

// hostOf is the host:port of an http:// URL.
func hostOf(url string) string { return strings.TrimPrefix(url, "http://") }

// rawConn opens a connection to addr that the test closes.
func rawConn(t *testing.T, addr string) (net.Conn, *bufio.Reader) {
	t.Helper()
	c, err := net.DialTimeout("tcp", addr, rlsWait)
	require.NoError(t, err)
	t.Cleanup(func() { c.Close() })
	return c, bufio.NewReader(c)
}

// readResponse reads one response from c within rlsWait.
func readResponse(t *testing.T, c net.Conn, br *bufio.Reader) *http.Response {
	t.Helper()
	require.NoError(t, c.SetReadDeadline(time.Now().Add(rlsWait)))
	resp, err := http.ReadResponse(br, nil)
	require.NoError(t, err)
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	return resp
}

// TestRLSHTTPFaceTimeouts: the HTTP face and the metrics server close a
// keep-alive connection idle for --idle-timeout; a /json body that stalls
// for --read-timeout is cut off with 408 (one that keeps coming is not);
// headers over --max-header-bytes get 431.
func TestRLSHTTPFaceTimeouts(t *testing.T) {
	t.Parallel()
	cfg := filepath.Join(t.TempDir(), "config.yaml")
	writeFile(t, cfg, fmt.Sprintf(perDay, 100))
	p := startRLS(t, nil, "--config", cfg, "--idle-timeout", "1s", "--read-timeout", "1s", "--max-header-bytes", "16KiB")

	for _, face := range []struct{ name, addr, path string }{
		{"http", hostOf(p.httpURL), "/healthcheck"},
		{"metrics", hostOf(p.metricsURL), "/metrics"},
	} {
		c, br := rawConn(t, face.addr)
		_, err := io.WriteString(c, "GET "+face.path+" HTTP/1.1\r\nHost: rls\r\n\r\n")
		require.NoError(t, err)
		require.Equal(t, http.StatusOK, readResponse(t, c, br).StatusCode, face.name)
		start := time.Now()
		_, err = br.ReadByte()
		assert.ErrorIs(t, err, io.EOF, "%s: an idle keep-alive connection is closed by the service", face.name)
		el := time.Since(start)
		assert.True(t, el > 900*time.Millisecond && el < rlsWait, "%s: closed after %v idle, want about --idle-timeout 1s", face.name, el)
	}

	body := `{"domain": "test", "descriptors": [{"entries": [{"key": "k", "value": "a"}]}]}`
	c, br := rawConn(t, hostOf(p.httpURL))
	start := time.Now()
	_, err := fmt.Fprintf(c, "POST /json HTTP/1.1\r\nHost: rls\r\nContent-Length: %d\r\n\r\n%s", len(body), body[:10])
	require.NoError(t, err)
	resp := readResponse(t, c, br)
	el := time.Since(start)
	assert.Equal(t, http.StatusRequestTimeout, resp.StatusCode)
	assert.True(t, resp.Close, "the connection of a stalled body is closed")
	assert.True(t, el > 900*time.Millisecond, "a stalled body cut off after %v, want --read-timeout 1s", el)

	c, br = rawConn(t, hostOf(p.httpURL))
	_, err = fmt.Fprintf(c, "POST /json HTTP/1.1\r\nHost: rls\r\nContent-Length: %d\r\n\r\n", len(body))
	require.NoError(t, err)
	for i := 0; i < len(body); i += 20 { // 1.6 s in all, each part within the 1 s timeout
		time.Sleep(400 * time.Millisecond) // the client's pace, what is tested
		_, err = io.WriteString(c, body[i:min(i+20, len(body))])
		require.NoError(t, err)
	}
	assert.Equal(t, http.StatusOK, readResponse(t, c, br).StatusCode, "a slow but steady body is answered")

	for _, tc := range []struct{ size, want int }{{8 << 10, http.StatusOK}, {40 << 10, http.StatusRequestHeaderFieldsTooLarge}} {
		req, _ := http.NewRequest("GET", p.httpURL+"/healthcheck", nil)
		req.Header.Set("X-Big", strings.Repeat("x", tc.size))
		resp, err := http.DefaultClient.Do(req)
		require.NoError(t, err)
		resp.Body.Close()
		assert.Equal(t, tc.want, resp.StatusCode, "a header of %d bytes", tc.size)
	}
}

// otherClient is an HTTP client and a gRPC connection from 127.0.0.2:
// another client than the tests' own, on 127.0.0.1.
func otherClient(t *testing.T, p *rlsProc) (*http.Client, rlsv3.RateLimitServiceClient, healthpb.HealthClient) {
	t.Helper()
	dialer := &net.Dialer{LocalAddr: &net.TCPAddr{IP: net.IPv4(127, 0, 0, 2)}, Timeout: rlsWait}
	hc := &http.Client{Transport: &http.Transport{DialContext: dialer.DialContext}}
	conn, err := grpc.NewClient(p.grpcAddr, grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithContextDialer(func(ctx context.Context, addr string) (net.Conn, error) {
			return dialer.DialContext(ctx, "tcp", addr)
		}))
	require.NoError(t, err)
	t.Cleanup(func() { conn.Close() })
	return hc, rlsv3.NewRateLimitServiceClient(conn), healthpb.NewHealthClient(conn)
}

// TestRLSHoldsFDs: the service limited to 2 048 file descriptors; one
// client opens 2 100 connections to its three ports (gRPC, HTTP, metrics),
// some sending part of a request and some nothing; another client still
// gets /healthcheck and a gRPC answer within a second, since one client
// holds at most --max-conns-per-client (256) of the process's connections.
// The connections over the cap are counted and logged.
func TestRLSHoldsFDs(t *testing.T) {
	prlimit, err := exec.LookPath("prlimit")
	require.NoError(t, err, "prlimit (util-linux) is needed to limit the service's file descriptors")
	cfg := filepath.Join(t.TempDir(), "config.yaml")
	writeFile(t, cfg, fmt.Sprintf(perDay, 1_000_000))
	p := launchWrapped(t, []string{prlimit, "--nofile=2048", "--"}, nil, []string{"rls", "--config", cfg,
		"--grpc", "127.0.0.1:0", "--http", "127.0.0.1:0", "--metrics", "127.0.0.1:0"})
	hc, rc, _ := otherClient(t, p)

	addrs := []string{p.grpcAddr, hostOf(p.httpURL), hostOf(p.metricsURL)}
	const attack = 2100
	clitest.HoldConns(t, attack, func(i int) string { return addrs[i%3] }, func(i int) string {
		if i%2 == 0 && i%3 != 0 {
			return "GET /healthcheck HTTP/1.1\r\nHost: rls\r\n" // headers never ended
		}
		return ""
	})

	ctx, cancel := context.WithTimeout(t.Context(), time.Second)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, "GET", p.httpURL+"/healthcheck", nil)
	resp, err := hc.Do(req)
	require.NoError(t, err, "/healthcheck from another client while one holds %d connections", attack)
	resp.Body.Close()
	assert.Equal(t, http.StatusOK, resp.StatusCode)
	answer, err := rc.ShouldRateLimit(ctx, request("test", "k=x"))
	require.NoError(t, err, "gRPC from another client while one holds %d connections", attack)
	assert.Equal(t, rlsv3.RateLimitResponse_OK, answer.OverallCode)

	p.waitStderr(t, "over --max-conns-per-client 256 (from 127.0.0.1)")
	resp, err = hc.Get(p.metricsURL + "/metrics")
	require.NoError(t, err)
	m, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	assert.Regexp(t, `\nratelimit_service_connections_refused [1-9]`, string(m))
}

// TestRLSDrain: SIGTERM turns /healthcheck to 500 and the gRPC health
// service to NOT_SERVING, and the service goes on answering, on the
// connections it has and on new ones, for --drain; then it stops and
// exits 0, not before the window has passed. A second SIGTERM ends a
// window at once.
func TestRLSDrain(t *testing.T) {
	t.Parallel()
	cfg := filepath.Join(t.TempDir(), "config.yaml")
	writeFile(t, cfg, fmt.Sprintf(perDay, 100))
	p := startRLS(t, nil, "--config", cfg, "--drain", "3s")
	ctx := t.Context()
	_, err := p.call(ctx, "test", "k=x")
	require.NoError(t, err)

	start := time.Now()
	require.NoError(t, p.Cmd.Process.Signal(syscall.SIGTERM))
	health := func() int {
		resp, err := http.Get(p.httpURL + "/healthcheck")
		if err != nil {
			return 0
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	require.Eventually(t, func() bool { return health() == http.StatusInternalServerError }, rlsWait, 10*time.Millisecond)
	_, err = p.call(ctx, "test", "k=x")
	assert.NoError(t, err, "an existing connection is answered during the drain window")
	_, rc, hs := otherClient(t, p)
	_, err = rc.ShouldRateLimit(ctx, request("test", "k=x"))
	assert.NoError(t, err, "a new connection is answered during the drain window")
	st, err := hs.Check(ctx, &healthpb.HealthCheckRequest{})
	require.NoError(t, err)
	assert.Equal(t, healthpb.HealthCheckResponse_NOT_SERVING, st.Status)
	assert.Equal(t, command.ExitOK, p.wait(), "stderr: %s", p.Stderr.String())
	assert.GreaterOrEqual(t, time.Since(start), 3*time.Second, "the drain window was not kept")
	p.waitStderr(t, "serving on for 3s (--drain)")
	p.waitStderr(t, "drain window over")

	// A second signal ends a window of an hour.
	q := startRLS(t, nil, "--config", cfg, "--drain", "1h")
	require.NoError(t, q.Cmd.Process.Signal(syscall.SIGTERM))
	q.waitStderr(t, "serving on for 1h0m0s")
	require.NoError(t, q.Cmd.Process.Signal(syscall.SIGTERM))
	assert.Equal(t, command.ExitOK, q.wait(), "stderr: %s", q.Stderr.String())
}
