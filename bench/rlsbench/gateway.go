package rlsbench

import (
	"fmt"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
)

// Gateway says how Envoy Gateway runs the rate limit service: its
// certificates, its xDS server, its Redis.
type Gateway struct {
	// Certs is the secret mounted at /certs.
	Certs *Certs
	// XDS is the host:port of the controller's xDS server (go-control-plane's
	// snapshot cache behind ADS, mutual TLS with Certs).
	XDS string
	// Redis is the redis-server's host:port.
	Redis string
	// MapperYAML is PROMETHEUS_MAPPER_YAML, the statsd-exporter
	// ConfigMap's file.
	MapperYAML string
	// Env is added to the environment after Envoy Gateway's.
	Env []string
	// Args are given to ours after `rls` (none under Envoy Gateway; e.g.
	// --store-timeout=1s on a loaded machine); the reference takes none.
	Args []string
}

// GatewayEnv is the environment Envoy Gateway's controller sets for its
// rate limit deployment (internal/infrastructure/kubernetes/ratelimit/
// resource.go in envoyproxy/gateway), with Redis and Prometheus, its
// defaults. The addresses it leaves to their defaults (gRPC :8081, HTTP
// :8080, debug :6070) and PROMETHEUS_ADDR (:19001) are on free loopback
// ports instead, so that several servers run side by side.
func GatewayEnv(g Gateway, grpcPort, httpPort, debugPort, metricsPort int) []string {
	certs := g.Certs
	return []string{
		"RUNTIME_ROOT=/data", "RUNTIME_SUBDIRECTORY=ratelimit", "RUNTIME_IGNOREDOTFILES=true", "RUNTIME_WATCH_ROOT=false",
		"LOG_LEVEL=info", "USE_STATSD=false",
		"CONFIG_TYPE=GRPC_XDS_SOTW", "CONFIG_GRPC_XDS_SERVER_URL=" + g.XDS, "CONFIG_GRPC_XDS_NODE_ID=envoy-ratelimit",
		"GRPC_SERVER_USE_TLS=true", "GRPC_SERVER_TLS_CERT=" + certs.File("tls.crt"), "GRPC_SERVER_TLS_KEY=" + certs.File("tls.key"),
		// Set by Envoy Gateway, read by neither server: under it the
		// reference asks for no client certificate.
		"GRPC_SERVER_TLS_CA_CERT=" + certs.File("ca.crt"),
		"CONFIG_GRPC_XDS_SERVER_USE_TLS=true", "CONFIG_GRPC_XDS_CLIENT_TLS_CERT=" + certs.File("tls.crt"),
		"CONFIG_GRPC_XDS_CLIENT_TLS_KEY=" + certs.File("tls.key"), "CONFIG_GRPC_XDS_SERVER_TLS_CACERT=" + certs.File("ca.crt"),
		"FORCE_START_WITHOUT_INITIAL_CONFIG=true",
		"REDIS_SOCKET_TYPE=tcp", "REDIS_URL=" + g.Redis,
		"USE_PROMETHEUS=true", "PROMETHEUS_ADDR=127.0.0.1:" + strconv.Itoa(metricsPort), "PROMETHEUS_MAPPER_YAML=" + g.MapperYAML,
		"GRPC_HOST=127.0.0.1", "GRPC_PORT=" + strconv.Itoa(grpcPort),
		"HOST=127.0.0.1", "PORT=" + strconv.Itoa(httpPort),
		"DEBUG_HOST=127.0.0.1", "DEBUG_PORT=" + strconv.Itoa(debugPort),
	}
}

// StartGatewayReference starts envoyproxy/ratelimit as Envoy Gateway
// starts it: no argument, GatewayEnv. It serves at once; calls are
// answered with an error until its first configuration arrives over xDS.
func StartGatewayReference(bin string, g Gateway) (*Server, error) {
	return startGateway("reference", bin, nil, g)
}

// StartGatewayOurs starts `ratelimit rls` in the reference's place: the
// same environment, no flag (the image's entry point runs `ratelimit
// rls`).
func StartGatewayOurs(bin string, g Gateway) (*Server, error) {
	return startGateway("ours", bin, append([]string{"rls"}, g.Args...), g)
}

func startGateway(name, bin string, args []string, g Gateway) (*Server, error) {
	ports, err := freePorts(4)
	if err != nil {
		return nil, err
	}
	env := append(cleanEnv(), GatewayEnv(g, ports[0], ports[1], ports[2], ports[3])...)
	env = append(env, g.Env...)
	s, err := start(launch{name: name, bin: bin, args: args, env: env, grpcPort: ports[0], httpPort: ports[1],
		metricsPort: ports[3], tls: g.Certs, unconfigured: true})
	if err != nil {
		return nil, err
	}
	s.Redis = g.Redis
	return s, nil
}

// ReferenceMapping is the path of the reference's own metric mapping
// (src/stats/prom/default_mapper.yaml of the module bench/envoyref pins,
// in the module cache once BuildReference has run), the file Envoy
// Gateway's statsd-exporter ConfigMap copies.
func ReferenceMapping(bench string) (string, error) {
	cmd := exec.Command("go", "list", "-m", "-f", "{{.Dir}}", "github.com/envoyproxy/ratelimit")
	cmd.Dir = filepath.Join(bench, "envoyref")
	out, err := cmd.Output()
	if err != nil {
		return "", fmt.Errorf("go list -m github.com/envoyproxy/ratelimit: %w", err)
	}
	return filepath.Join(strings.TrimSpace(string(out)), "src", "stats", "prom", "default_mapper.yaml"), nil
}
