package rls

// The tests of `ratelimit rls` as Envoy Gateway runs envoyproxy/ratelimit:
// its environment, the configuration pushed over xDS with mutual TLS (by
// internal/xdstest's go-control-plane server), gRPC over TLS, a Unix
// socket, connection ages, the health check, and the reference's
// STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT and LOCAL_CACHE_SIZE_IN_BYTES.

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"syscall"
	"testing"
	"time"

	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	discoverygrpc "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	rlconfv3 "github.com/envoyproxy/go-control-plane/ratelimit/config/ratelimit/v3"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/connectivity"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/status"

	"github.com/smoothrate/ratelimit/internal/cli/clitest"
	"github.com/smoothrate/ratelimit/internal/cli/command"
	"github.com/smoothrate/ratelimit/internal/redistest"
	"github.com/smoothrate/ratelimit/internal/tlstest"
	"github.com/smoothrate/ratelimit/internal/xdstest"
)

// gatewayCerts is Envoy Gateway's secret envoy-rate-limit: one CA and one
// certificate, used as server and as client certificate, in a directory
// as it is mounted at /certs (ca.crt, tls.crt, tls.key).
type gatewayCerts struct {
	dir  string
	ca   *tlstest.CA
	leaf *tlstest.Leaf
}

func newGatewayCerts(t *testing.T) *gatewayCerts {
	t.Helper()
	ca := tlstest.NewCA(t, "envoy-gateway CA")
	g := &gatewayCerts{dir: t.TempDir(), ca: ca, leaf: ca.Issue(t, "envoy-gateway", "envoy-ratelimit", "127.0.0.1")}
	ca.WriteCA(t, g.dir, "ca.crt")
	g.leaf.Write(t, g.dir, "tls.crt", "tls.key")
	return g
}

// creds are a client's TLS credentials trusting ca, presenting leaf
// (none when nil).
func creds(ca *tlstest.CA, leaf *tlstest.Leaf, t *testing.T) credentials.TransportCredentials {
	cfg := &tls.Config{RootCAs: ca.Pool(), MinVersion: tls.VersionTLS12}
	if leaf != nil {
		cfg.Certificates = []tls.Certificate{leaf.TLS(t)}
	}
	return credentials.NewTLS(cfg)
}

// gatewayEnv is the environment Envoy Gateway's controller sets for its
// rate limit deployment (its internal/infrastructure/kubernetes/
// ratelimit/resource.go) with Prometheus on, its default, with the
// certificates in certDir, the metric mapping (its statsd-exporter-config
// ConfigMap) in statsdDir and the xDS server at xdsURL.
func gatewayEnv(certDir, statsdDir, xdsURL string) []string {
	return []string{
		"RUNTIME_ROOT=/data", "RUNTIME_SUBDIRECTORY=ratelimit", "RUNTIME_IGNOREDOTFILES=true", "RUNTIME_WATCH_ROOT=false",
		"LOG_LEVEL=info", "USE_STATSD=false",
		"CONFIG_TYPE=GRPC_XDS_SOTW", "CONFIG_GRPC_XDS_SERVER_URL=" + xdsURL, "CONFIG_GRPC_XDS_NODE_ID=envoy-ratelimit",
		"GRPC_SERVER_USE_TLS=true", "GRPC_SERVER_TLS_CERT=" + certDir + "/tls.crt", "GRPC_SERVER_TLS_KEY=" + certDir + "/tls.key",
		"GRPC_SERVER_TLS_CA_CERT=" + certDir + "/ca.crt",
		"CONFIG_GRPC_XDS_SERVER_USE_TLS=true", "CONFIG_GRPC_XDS_CLIENT_TLS_CERT=" + certDir + "/tls.crt",
		"CONFIG_GRPC_XDS_CLIENT_TLS_KEY=" + certDir + "/tls.key", "CONFIG_GRPC_XDS_SERVER_TLS_CACERT=" + certDir + "/ca.crt",
		"FORCE_START_WITHOUT_INITIAL_CONFIG=true",
		"USE_PROMETHEUS=true", "PROMETHEUS_ADDR=:19001", "PROMETHEUS_MAPPER_YAML=" + statsdDir + "/conf.yaml",
	}
}

// statsdConfig writes the metric mapping Envoy Gateway mounts at
// /etc/statsd-exporter (the reference's default mapping) in a new
// directory, and returns it.
func statsdConfig(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	writeFile(t, filepath.Join(dir, "conf.yaml"), defaultMapping)
	return dir
}

// fastXDS are the xDS client's waits made short for tests.
var fastXDS = []string{"XDS_CLIENT_BACKOFF_INITIAL_INTERVAL=20ms", "XDS_CLIENT_BACKOFF_MAX_INTERVAL=200ms",
	"CONFIG_GRPC_XDS_SERVER_CONNECT_RETRY_INTERVAL=50ms"}

// loopbackPorts puts the service's three faces on free loopback ports.
var loopbackPorts = []string{"GRPC_HOST=127.0.0.1", "GRPC_PORT=0", "HOST=127.0.0.1", "PORT=0",
	"USE_PROMETHEUS=true", "PROMETHEUS_ADDR=127.0.0.1:0"}

// routeConfig is a RateLimitConfig as Envoy Gateway's translator writes
// one: name = domain = the listener, the route's name as key and value,
// the limit (n an hour) on the client address beneath it.
func routeConfig(domain string, n uint32) *rlconfv3.RateLimitConfig {
	const route = "httproute/default/backend/rule/0/match/0/www_example_com"
	return &rlconfv3.RateLimitConfig{Name: domain, Domain: domain, Descriptors: []*rlconfv3.RateLimitDescriptor{{
		Key: route, Value: route,
		Descriptors: []*rlconfv3.RateLimitDescriptor{{
			Key:       "remote_address",
			RateLimit: &rlconfv3.RateLimitPolicy{Unit: rlconfv3.RateLimitUnit_HOUR, RequestsPerUnit: n},
		}},
	}}}
}

// callRoute asks about routeConfig's descriptor in domain.
func (p *rlsProc) callRoute(ctx context.Context, domain string) (*rlsv3.RateLimitResponse, error) {
	const route = "httproute/default/backend/rule/0/match/0/www_example_com"
	return p.call(ctx, domain, route+"="+route, "remote_address=192.0.2.7")
}

// health reads /healthcheck: its status code and body ("" when it does
// not answer).
func (p *rlsProc) health() (int, string) {
	resp, err := http.Get(p.httpURL + "/healthcheck")
	if err != nil {
		return 0, ""
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// waitHealth waits until /healthcheck answers code.
func (p *rlsProc) waitHealth(t *testing.T, code int) {
	t.Helper()
	require.Eventually(t, func() bool { c, _ := p.health(); return c == code }, rlsWait, 10*time.Millisecond,
		"/healthcheck never answered %d; stderr: %s", code, p.Stderr.String())
}

// TestRLSXDSGateway: started as Envoy Gateway starts the reference (no
// arguments, its environment) but without FORCE_START_WITHOUT_INITIAL_CONFIG,
// the service waits for the first configuration: /healthcheck is 500 and
// gRPC is not served. Then, over mutual TLS to the xDS server and TLS to
// its clients, a configuration is applied, a second replaces it whole
// (the first domain is gone), and an invalid one is refused (NACK with the
// loader's reason, logged, counted) while the second keeps serving.
func TestRLSXDSGateway(t *testing.T) {
	t.Parallel()
	certs := newGatewayCerts(t)
	srv := xdstest.Start(t, xdstest.ServerTLS(t, certs.ca, certs.leaf))
	env := append(append(append(gatewayEnv(certs.dir, statsdConfig(t), srv.Addr), fastXDS...), loopbackPorts...),
		"FORCE_START_WITHOUT_INITIAL_CONFIG=false")
	p := launchRLSOver(t, env, nil, creds(certs.ca, certs.leaf, t))
	ctx := t.Context()

	code, body := p.health()
	assert.Equal(t, http.StatusInternalServerError, code)
	assert.Contains(t, body, "configuration")
	short, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
	_, err := p.callRoute(short, "default/eg/http")
	cancel()
	assert.Error(t, err, "gRPC served before the first configuration")

	srv.Set(1, routeConfig("default/eg/http", 2))
	p.waitStderr(t, "applied: 1 domain default/eg/http")
	p.waitHealth(t, http.StatusOK)
	for i, want := range []rlsv3.RateLimitResponse_Code{rlsv3.RateLimitResponse_OK, rlsv3.RateLimitResponse_OK, rlsv3.RateLimitResponse_OVER_LIMIT} {
		resp, err := p.callRoute(ctx, "default/eg/http")
		require.NoError(t, err, "call %d", i)
		assert.Equal(t, want, resp.OverallCode, "call %d", i)
		assert.Equal(t, uint32(2), resp.Statuses[0].CurrentLimit.GetRequestsPerUnit(), "call %d", i)
	}

	srv.Set(2, routeConfig("default/eg/other", 5))
	p.waitStderr(t, "applied: 1 domain default/eg/other")
	resp, err := p.callRoute(ctx, "default/eg/http")
	require.NoError(t, err)
	assert.Equal(t, rlsv3.RateLimitResponse_OK, resp.OverallCode)
	assert.Nil(t, resp.Statuses[0].CurrentLimit, "the first domain is gone")
	resp, err = p.callRoute(ctx, "default/eg/other")
	require.NoError(t, err)
	assert.Equal(t, uint32(5), resp.Statuses[0].CurrentLimit.GetRequestsPerUnit())

	bad := routeConfig("default/eg/bad", 1)
	bad.Descriptors[0].Descriptors[0].Key = ""
	srv.Set(3, bad)
	nack := srv.NextRequest(func(r *discoverygrpc.DiscoveryRequest) bool { return r.ErrorDetail != nil })
	assert.Contains(t, nack.ErrorDetail.Message, "default/eg/bad")
	p.waitStderr(t, "rejected (NACK), keeping the previous one: default/eg/bad")
	p.waitMetric("ratelimit_service_config_load_error", 1)
	resp, err = p.callRoute(ctx, "default/eg/other")
	require.NoError(t, err)
	assert.Equal(t, uint32(3), resp.Statuses[0].LimitRemaining, "the second configuration serves on")
	code, _ = p.health()
	assert.Equal(t, http.StatusOK, code)
}

// TestRLSXDSForceStart: with --force-start (and the xDS server given by
// flags), the service serves at once: calls before the first
// configuration are answered with an error, /healthcheck is 200; once a
// configuration arrives, calls are decided by it. SIGHUP does not stop
// it.
func TestRLSXDSForceStart(t *testing.T) {
	t.Parallel()
	certs := newGatewayCerts(t)
	srv := xdstest.Start(t, xdstest.ServerTLS(t, certs.ca, certs.leaf))
	p := startRLS(t, fastXDS, "--xds", srv.Addr, "--xds-node-id", xdstest.NodeID, "--force-start",
		"--xds-tls-cert", filepath.Join(certs.dir, "tls.crt"), "--xds-tls-key", filepath.Join(certs.dir, "tls.key"),
		"--xds-tls-ca", filepath.Join(certs.dir, "ca.crt"))
	ctx := t.Context()
	_, err := p.callRoute(ctx, "default/eg/http")
	assert.Equal(t, codes.Unknown, status.Code(err), "%v", err)
	assert.Contains(t, status.Convert(err).Message(), "no rate limit configuration")
	code, _ := p.health()
	assert.Equal(t, http.StatusOK, code)

	srv.Set(1, routeConfig("default/eg/http", 3))
	p.waitStderr(t, "applied: 1 domain default/eg/http")
	resp, err := p.callRoute(ctx, "default/eg/http")
	require.NoError(t, err)
	assert.Equal(t, uint32(2), resp.Statuses[0].LimitRemaining)

	// SIGHUP reloads files; from xDS it changes nothing, and does not
	// stop the service.
	require.NoError(t, p.Cmd.Process.Signal(syscall.SIGHUP))
	resp, err = p.callRoute(ctx, "default/eg/http")
	require.NoError(t, err, "after SIGHUP; stderr: %s", p.Stderr.String())
	assert.Equal(t, uint32(1), resp.Statuses[0].LimitRemaining)
	select {
	case <-p.Exited():
		t.Fatalf("SIGHUP stopped the service (status %d)", p.Status())
	default:
	}
}

// tlsCall makes one call over a new connection with creds.
func tlsCall(t *testing.T, addr string, c credentials.TransportCredentials) error {
	t.Helper()
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(c))
	require.NoError(t, err)
	defer conn.Close()
	ctx, cancel := context.WithTimeout(t.Context(), rlsWait)
	defer cancel()
	_, err = rlsv3.NewRateLimitServiceClient(conn).ShouldRateLimit(ctx, request("test", "k=x"))
	return err
}

// TestRLSGRPCTLSClientCert: with a client CA, a client certificate signed
// by it and valid for the client SAN is required: none, one from another
// CA, or one for another name fails the handshake. GRPC_SERVER_TLS_CA_CERT
// (set by Envoy Gateway, not read by the reference) does not stop the
// service, even naming a file that does not exist.
func TestRLSGRPCTLSClientCert(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	ca := tlstest.NewCA(t, "rls CA")
	serverCert, serverKey := ca.Issue(t, "127.0.0.1").Write(t, dir, "server.crt", "server.key")
	good := ca.Issue(t, "envoy.example")
	cfg := filepath.Join(dir, "config.yaml")
	writeFile(t, cfg, fmt.Sprintf(perDay, 100))
	p := launchRLSOver(t, []string{"GRPC_SERVER_TLS_CA_CERT=/nonexistent/ca.crt"}, []string{"rls", "--config", cfg,
		"--grpc", "127.0.0.1:0", "--http", "127.0.0.1:0", "--grpc-tls-cert", serverCert, "--grpc-tls-key", serverKey,
		"--grpc-tls-client-ca", ca.WriteCA(t, dir, "ca.crt"), "--grpc-tls-client-san", "envoy.example"},
		creds(ca, good, t))

	require.NoError(t, tlsCall(t, p.grpcAddr, creds(ca, good, t)), "a client certificate for the SAN")
	other := tlstest.NewCA(t, "another CA")
	for name, c := range map[string]credentials.TransportCredentials{
		"no client certificate":       creds(ca, nil, t),
		"one from another CA":         creds(ca, other.Issue(t, "envoy.example"), t),
		"one for another name":        creds(ca, ca.Issue(t, "intruder.example"), t),
		"plain text to a TLS service": insecure.NewCredentials(),
	} {
		assert.Equal(t, codes.Unavailable, status.Code(tlsCall(t, p.grpcAddr, c)), name)
	}
}

// servedSerial is the serial number of the certificate the TLS server at
// addr presents.
func servedSerial(t *testing.T, addr string, roots *x509.CertPool) string {
	t.Helper()
	c, err := tls.Dial("tcp", addr, &tls.Config{RootCAs: roots, NextProtos: []string{"h2"}})
	if err != nil {
		return "error: " + err.Error()
	}
	defer c.Close()
	return c.ConnectionState().PeerCertificates[0].SerialNumber.String()
}

// TestRLSGRPCCertReload: the server certificate is re-read while serving:
// new connections get the new one, without a restart (GRPC_SERVER_* as
// Envoy Gateway sets them, cert-manager rotating the secret).
func TestRLSGRPCCertReload(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	ca := tlstest.NewCA(t, "rls CA")
	first := ca.Issue(t, "127.0.0.1")
	certFile, keyFile := first.Write(t, dir, "tls.crt", "tls.key")
	cfg := filepath.Join(dir, "config.yaml")
	writeFile(t, cfg, fmt.Sprintf(perDay, 100))
	p := launchRLSOver(t, []string{"GRPC_SERVER_USE_TLS=true", "GRPC_SERVER_TLS_CERT=" + certFile, "GRPC_SERVER_TLS_KEY=" + keyFile},
		[]string{"rls", "--config", cfg, "--grpc", "127.0.0.1:0", "--http", "127.0.0.1:0", "--reload-interval", "20ms"},
		creds(ca, nil, t))
	assert.Equal(t, first.Cert.SerialNumber.String(), servedSerial(t, p.grpcAddr, ca.Pool()))
	_, err := p.call(t.Context(), "test", "k=x")
	require.NoError(t, err)

	second := ca.Issue(t, "127.0.0.1")
	second.Write(t, dir, "tls.crt", "tls.key")
	p.waitStderr(t, "TLS certificate "+certFile+" reloaded")
	assert.Equal(t, second.Cert.SerialNumber.String(), servedSerial(t, p.grpcAddr, ca.Pool()))
	assert.NoError(t, tlsCall(t, p.grpcAddr, creds(ca, nil, t)))
}

// TestRLSUDS: GRPC_UDS serves gRPC on a Unix socket, replacing a stale
// socket file left by a process that is gone; the file is removed when the
// service stops.
func TestRLSUDS(t *testing.T) {
	t.Parallel()
	sockDir, err := os.MkdirTemp("", "rls") // short: a socket path is at most ~100 bytes
	require.NoError(t, err)
	t.Cleanup(func() { os.RemoveAll(sockDir) })
	sock := filepath.Join(sockDir, "rls.sock")
	stale, err := (&net.ListenConfig{}).Listen(t.Context(), "unix", sock)
	require.NoError(t, err)
	stale.(*net.UnixListener).SetUnlinkOnClose(false)
	stale.Close()

	cfg := filepath.Join(t.TempDir(), "config.yaml")
	writeFile(t, cfg, fmt.Sprintf(perDay, 2))
	p := launchRLS(t, []string{"GRPC_UDS=" + sock}, []string{"rls", "--config", cfg, "--http", "127.0.0.1:0", "--drain", "0"})
	assert.Equal(t, "unix:"+sock, p.grpcAddr)
	resp, err := p.call(t.Context(), "test", "k=x")
	require.NoError(t, err)
	assert.Equal(t, uint32(1), resp.Statuses[0].LimitRemaining)

	require.NoError(t, p.Cmd.Process.Signal(syscall.SIGTERM))
	assert.Equal(t, command.ExitOK, p.wait(), "stderr: %s", p.Stderr.String())
	_, err = os.Lstat(sock)
	assert.True(t, os.IsNotExist(err), "the socket file is left: %v", err)
}

// TestRLSMaxConnectionAge: GRPC_MAX_CONNECTION_AGE closes a connection
// once it is that old (the client sees it leave READY), so that clients
// spread over new instances.
func TestRLSMaxConnectionAge(t *testing.T) {
	t.Parallel()
	cfg := filepath.Join(t.TempDir(), "config.yaml")
	writeFile(t, cfg, fmt.Sprintf(perDay, 100))
	p := startRLS(t, []string{"GRPC_MAX_CONNECTION_AGE=300ms", "GRPC_MAX_CONNECTION_AGE_GRACE=100ms"}, "--config", cfg)
	conn, err := grpc.NewClient(p.grpcAddr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	require.NoError(t, err)
	defer conn.Close()
	_, err = rlsv3.NewRateLimitServiceClient(conn).ShouldRateLimit(t.Context(), request("test", "k=x"))
	require.NoError(t, err)
	require.Equal(t, connectivity.Ready, conn.GetState())
	ctx, cancel := context.WithTimeout(t.Context(), rlsWait)
	defer cancel()
	assert.True(t, conn.WaitForStateChange(ctx, connectivity.Ready), "the connection is still READY after %v", rlsWait)
}

// TestRLSHealthWaitsForStore: a Redis that does not answer at start keeps
// /healthcheck at 500 (the reference does not start until it answers a
// PING); once it answers, 200.
func TestRLSHealthWaitsForStore(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	srv.Kill()
	cfg := filepath.Join(t.TempDir(), "config.yaml")
	writeFile(t, cfg, fmt.Sprintf(perDay, 100))
	p := startRLS(t, nil, "--config", cfg, "--redis", "redis://"+srv.Addr()+"/0")
	code, body := p.health()
	assert.Equal(t, http.StatusInternalServerError, code)
	assert.Contains(t, body, "store")
	_, err := p.call(t.Context(), "test", "k=x")
	assert.Equal(t, codes.Unavailable, status.Code(err), "%v", err)

	srv.Restart()
	p.waitHealth(t, http.StatusOK)
	p.waitStderr(t, "redis "+srv.Addr()+" answers")
	_, err = p.call(t.Context(), "test", "k=x")
	assert.NoError(t, err)
}

// TestRLSHealthStopping: once SIGTERM arrives, the health service reports
// NOT_SERVING (to a client watching it) before the process exits 0. The
// drain window is shorter than the default 6 s: NOT_SERVING is sent as it
// opens.
func TestRLSHealthStopping(t *testing.T) {
	t.Parallel()
	cfg := filepath.Join(t.TempDir(), "config.yaml")
	writeFile(t, cfg, fmt.Sprintf(perDay, 100))
	p := startRLS(t, nil, "--config", cfg, "--drain", "1s")
	conn, err := grpc.NewClient(p.grpcAddr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	require.NoError(t, err)
	defer conn.Close()
	ctx, cancel := context.WithCancel(t.Context())
	watch, err := healthpb.NewHealthClient(conn).Watch(ctx, &healthpb.HealthCheckRequest{Service: rlsv3.RateLimitService_ServiceDesc.ServiceName})
	require.NoError(t, err)
	st, err := watch.Recv()
	require.NoError(t, err)
	assert.Equal(t, healthpb.HealthCheckResponse_SERVING, st.Status)

	require.NoError(t, p.Cmd.Process.Signal(syscall.SIGTERM))
	st, err = watch.Recv()
	require.NoError(t, err)
	assert.Equal(t, healthpb.HealthCheckResponse_NOT_SERVING, st.Status)
	cancel() // a watch would hold the graceful stop
	assert.Equal(t, command.ExitOK, p.wait(), "stderr: %s", p.Stderr.String())
}

// broadNarrow is a broad limit (10 a day) and a narrow one (2 a day).
const broadNarrow = `domain: d
descriptors:
  - key: broad
    rate_limit: {unit: day, requests_per_unit: 10}
  - key: narrow
    rate_limit: {unit: day, requests_per_unit: 2}
`

// TestRLSStopCacheKeyIncrement: one call of the broad and the narrow
// descriptor, six times for each of six narrow values, on Redis: counting
// every hit, the calls refused by the narrow limit fill the broad one and 4
// of 36 are admitted; with the reference's
// STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT=true (or --count-only-admitted)
// a refused call counts nowhere, and 10 are, as by the reference.
func TestRLSStopCacheKeyIncrement(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	cfg := filepath.Join(t.TempDir(), "config.yaml")
	writeFile(t, cfg, broadNarrow)
	for i, c := range []struct {
		env  []string
		args []string
		want int
	}{
		{nil, nil, 4},
		{[]string{"STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT=false"}, nil, 4},
		{[]string{"STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT=true"}, nil, 10},
		{nil, []string{"--count-only-admitted"}, 10},
	} {
		p := startRLS(t, c.env, append([]string{"--config", cfg, "--redis", "redis://" + srv.Addr() + "/" + strconv.Itoa(i)}, c.args...)...)
		admitted := 0
		for v := range 6 {
			for range 6 {
				resp, err := p.client.ShouldRateLimit(t.Context(), &rlsv3.RateLimitRequest{Domain: "d", Descriptors: []*ratelimitv3.RateLimitDescriptor{
					{Entries: []*ratelimitv3.RateLimitDescriptor_Entry{{Key: "broad", Value: "all"}}},
					{Entries: []*ratelimitv3.RateLimitDescriptor_Entry{{Key: "narrow", Value: strconv.Itoa(v)}}},
				}})
				require.NoError(t, err)
				if resp.OverallCode == rlsv3.RateLimitResponse_OK {
					admitted++
				}
			}
		}
		assert.Equal(t, c.want, admitted, "%v %v: admitted of 36", c.env, c.args)
	}
}

// TestRLSRedisTLS: Redis over TLS with a client certificate, as Envoy
// Gateway configures the reference (REDIS_URL host:port, REDIS_TLS and
// REDIS_TLS_CLIENT_CERT/_KEY; here with REDIS_TLS_CACERT, the test's CA
// not being in the system's roots), and the same with --redis rediss://
// and the --redis-tls-* flags: the counts are in the Redis that requires
// the certificate.
func TestRLSRedisTLS(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	srv, files := redistest.StartTLSClientAuth(t, "envoy-ratelimit")
	cliCert, cliKey, caFile := files.ClientCert, files.ClientKey, files.CA
	cfg := filepath.Join(dir, "config.yaml")
	writeFile(t, cfg, fmt.Sprintf(perDay, 10))
	for i, c := range []struct {
		env  []string
		args []string
	}{
		{[]string{"REDIS_SOCKET_TYPE=tcp", "REDIS_URL=" + srv.TLSAddr(), "REDIS_TLS=true",
			"REDIS_TLS_CLIENT_CERT=" + cliCert, "REDIS_TLS_CLIENT_KEY=" + cliKey, "REDIS_TLS_CACERT=" + caFile}, nil},
		{nil, []string{"--redis", "rediss://" + srv.TLSAddr() + "/0", "--redis-tls-cert", cliCert, "--redis-tls-key", cliKey,
			"--redis-tls-ca", caFile}},
	} {
		p := startRLS(t, c.env, append([]string{"--config", cfg}, c.args...)...)
		resp, err := p.call(t.Context(), "test", "k=x")
		require.NoError(t, err, "%v %v; stderr: %s", c.env, c.args, p.Stderr.String())
		assert.Equal(t, uint32(10-1-i), resp.Statuses[0].LimitRemaining, "%v %v: the count is shared through Redis", c.env, c.args)
		assert.NotContains(t, p.Stderr.String(), "does not answer")
	}
	assert.Contains(t, srv.CLI("KEYS", "*"), "test_k_x_")
	// Once it serves, Redis no longer trusting its certificate (the CA
	// replaced) is set up wrong too: INTERNAL, not UNAVAILABLE, which the
	// gateway may take for an outage and fail open on. (That the refusal
	// comes at once, after one dial, where go-redis alone would retry it
	// until the store's timeout, redisflag's TestTLSRefusedMidRun holds:
	// the timeout here leaves a loaded machine time for the handshakes.)
	p := startRLS(t, nil, "--config", cfg, "--store-timeout", "2s", "--redis", "rediss://"+srv.TLSAddr()+"/0", "--redis-tls-cert", cliCert,
		"--redis-tls-key", cliKey, "--redis-tls-ca", caFile)
	_, err := p.call(t.Context(), "test", "k=y")
	require.NoError(t, err, p.Stderr.String())
	srv.CLI("CONFIG", "SET", "tls-ca-cert-file", tlstest.NewCA(t, "another CA").WriteCA(t, dir, "other.crt"))
	srv.CLI("CLIENT", "KILL", "TYPE", "normal")
	for range 3 {
		_, err = p.call(t.Context(), "test", "k=y")
		assert.Equal(t, codes.Internal, status.Code(err), "%v", err)
		assert.Contains(t, fmt.Sprint(err), "unknown certificate authority")
	}
	srv.CLI("CONFIG", "SET", "tls-ca-cert-file", caFile)
	_, err = p.call(t.Context(), "test", "k=y")
	assert.NoError(t, err, "the CA back")
	// Without the client certificate the handshake is refused: Redis set
	// up wrong for this service, exit 2 at start, not an outage to wait
	// out.
	stderr, code := clitest.RunToExit(t, clitest.Binary(t), nil, rlsWait, "rls", "--config", cfg, "--grpc", "127.0.0.1:0",
		"--http", "127.0.0.1:0", "--redis", "rediss://"+srv.TLSAddr()+"/0", "--redis-tls-ca", caFile)
	assert.Equal(t, command.ExitUsage, code, stderr)
	assert.Contains(t, stderr, "certificate required")
	// The TLS port without REDIS_TLS: set up wrong too, not an outage.
	stderr, code = clitest.RunToExit(t, clitest.Binary(t), []string{"REDIS_SOCKET_TYPE=tcp", "REDIS_URL=" + srv.TLSAddr()}, rlsWait, "rls",
		"--config", cfg, "--grpc", "127.0.0.1:0", "--http", "127.0.0.1:0")
	assert.Equal(t, command.ExitUsage, code, stderr)
	assert.Contains(t, stderr, "its port speaks TLS")
}
