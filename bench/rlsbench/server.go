package rlsbench

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"time"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	pb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protojson"
)

// Server is a rate limit service (the reference or ours) running as a
// child process on free loopback ports, with a gRPC client connected to it.
type Server struct {
	Name string // for reports: "reference", "ours/redis", "ours/memory"
	GRPC string // host:port of ShouldRateLimit
	HTTP string // host:port of /json and /healthcheck
	// Metrics is the host:port of the Prometheus page (/metrics), empty
	// when the server has none.
	Metrics string
	Client  pb.RateLimitServiceClient
	conns   []*grpc.ClientConn
	cmd     *exec.Cmd
	logf    *os.File
	exited  chan struct{}
	// Redis is the store's host:port, empty on our memory store.
	Redis   string
	restart func() (*Server, error)
	// pick, for a Shared pair, chooses the server of each call; the pair
	// has no process of its own.
	pick *picker
	// calls counts the ShouldRateLimit calls sent over gRPC, connect's
	// probes included.
	calls *atomic.Int64
}

// Calls is the number of ShouldRateLimit calls sent to the server over
// gRPC so far (through Client, and the probe of each connection): what
// the server's ratelimit_service_total_requests{grpc_method="ShouldRateLimit"}
// counts.
func (s *Server) Calls() int64 { return s.calls.Load() }

// Restart stops the server and starts it again with the same options
// (on fresh ports): a memory store starts empty.
func (s *Server) Restart() error {
	s.Stop()
	n, err := s.restart()
	if err != nil {
		return err
	}
	name := s.Name
	*s = *n
	s.Name = name
	return nil
}

// Options say how to start a server.
type Options struct {
	// ConfigDir holds the YAML files. The reference reads it through its
	// runtime settings, so it must be ROOT/SUBDIRECTORY/APPDIRECTORY (see
	// WriteConfig).
	ConfigDir string
	// Redis is the redis-server's host:port; empty starts ours on its
	// memory store (the reference has none).
	Redis string
	// Headers sets LIMIT_RESPONSE_HEADERS_ENABLED=true.
	Headers bool
	// Env is added to the environment (after the settings above).
	Env []string
	// Conns is the number of gRPC connections the client opens (default 1).
	Conns int
	// Args are added to ours's command line (e.g. --store-timeout=1s).
	Args []string
	// TLS serves gRPC over TLS with its certificate (the reference's
	// GRPC_SERVER_USE_TLS, GRPC_SERVER_TLS_CERT and _KEY; ours's
	// --grpc-tls-cert and --grpc-tls-key), and the client connects over
	// TLS trusting its CA. Nil: plain text.
	TLS *Certs
}

// WriteConfig writes files (name → YAML) into dir/ratelimit/config, the
// layout the reference reads with RUNTIME_ROOT=dir,
// RUNTIME_SUBDIRECTORY=ratelimit, RUNTIME_APPDIRECTORY=config, and
// returns that directory.
func WriteConfig(dir string, files map[string]string) (string, error) {
	cfg := filepath.Join(dir, "ratelimit", "config")
	if err := os.MkdirAll(cfg, 0o755); err != nil {
		return "", err
	}
	for name, body := range files {
		if err := os.WriteFile(filepath.Join(cfg, name), []byte(body), 0o644); err != nil {
			return "", err
		}
	}
	return cfg, nil
}

// The reference's settings and ours that the environment must not carry
// into a server unless we set them.
var settingPrefixes = []string{"REDIS_", "GRPC_", "PORT=", "HOST=", "DEBUG_", "RUNTIME_", "LIMIT_", "USE_",
	"DISABLE_STATS=", "LOG_", "CACHE_KEY_PREFIX=", "BACKEND_TYPE=", "STOP_CACHE_KEY", "LOCAL_CACHE", "SHADOW_MODE=",
	"EXPIRATION_JITTER", "MERGE_DOMAIN_CONFIG=", "NEAR_LIMIT_RATIO=", "STATSD_", "PROMETHEUS_", "TRACING_",
	"CONFIG_", "FORCE_START_", "XDS_", "STATS_"}

func cleanEnv() []string {
	var env []string
next:
	for _, kv := range os.Environ() {
		for _, p := range settingPrefixes {
			if strings.HasPrefix(kv, p) {
				continue next
			}
		}
		env = append(env, kv)
	}
	return env
}

// StartReference starts envoyproxy/ratelimit (bin from BuildReference)
// on Redis, configured the only way it can be: by environment variables
// (src/settings/settings.go). Its stats go nowhere (DISABLE_STATS), as
// ours are not scraped: both serve calls and nothing else.
func StartReference(bin string, o Options) (*Server, error) {
	s, err := startWithReferenceEnv("reference", bin, nil, o)
	if err != nil {
		return nil, err
	}
	s.restart = func() (*Server, error) { return StartReference(bin, o) }
	return s, nil
}

// StartOursAsReference starts `ratelimit rls` without flags, with the
// reference's environment: a deployment that swaps the image and keeps
// its manifests.
func StartOursAsReference(bin string, o Options) (*Server, error) {
	s, err := startWithReferenceEnv("ours/env", bin, []string{"rls"}, o)
	if err != nil {
		return nil, err
	}
	s.restart = func() (*Server, error) { return StartOursAsReference(bin, o) }
	return s, nil
}

func startWithReferenceEnv(name, bin string, args []string, o Options) (*Server, error) {
	if o.Redis == "" {
		return nil, errors.New("the reference needs Redis")
	}
	ports, err := freePorts(3)
	if err != nil {
		return nil, err
	}
	appdir := filepath.Base(o.ConfigDir)
	sub := filepath.Dir(o.ConfigDir)
	env := append(cleanEnv(),
		"RUNTIME_ROOT="+filepath.Dir(sub),
		"RUNTIME_SUBDIRECTORY="+filepath.Base(sub),
		"RUNTIME_APPDIRECTORY="+appdir,
		"USE_STATSD=false", "DISABLE_STATS=true", "LOG_LEVEL=warn",
		"REDIS_SOCKET_TYPE=tcp", "REDIS_TYPE=single", "REDIS_URL="+o.Redis,
		"HOST=127.0.0.1", "PORT="+strconv.Itoa(ports[0]),
		"GRPC_HOST=127.0.0.1", "GRPC_PORT="+strconv.Itoa(ports[1]),
		"DEBUG_HOST=127.0.0.1", "DEBUG_PORT="+strconv.Itoa(ports[2]),
		"LIMIT_RESPONSE_HEADERS_ENABLED="+strconv.FormatBool(o.Headers),
	)
	if o.TLS != nil {
		env = append(env, "GRPC_SERVER_USE_TLS=true",
			"GRPC_SERVER_TLS_CERT="+o.TLS.File("tls.crt"), "GRPC_SERVER_TLS_KEY="+o.TLS.File("tls.key"))
	}
	env = append(env, o.Env...)
	s, err := start(launch{name: name, bin: bin, args: args, env: env, grpcPort: ports[1], httpPort: ports[0],
		conns: o.Conns, tls: o.TLS})
	if err != nil {
		return nil, err
	}
	s.Redis = o.Redis
	return s, nil
}

// StartOurs starts `ratelimit rls` (bin from BuildOurs) with its flags:
// on Redis when o.Redis is set, else on its memory store.
func StartOurs(bin string, o Options) (*Server, error) {
	ports, err := freePorts(2)
	if err != nil {
		return nil, err
	}
	args := []string{"rls", "--config", o.ConfigDir,
		"--grpc", "127.0.0.1:" + strconv.Itoa(ports[1]), "--http", "127.0.0.1:" + strconv.Itoa(ports[0])}
	name := "ours/memory"
	if o.Redis != "" {
		args = append(args, "--redis", "redis://"+o.Redis)
		name = "ours/redis"
	}
	if o.TLS != nil {
		args = append(args, "--grpc-tls-cert", o.TLS.File("tls.crt"), "--grpc-tls-key", o.TLS.File("tls.key"))
	}
	args = append(args, o.Args...)
	env := append(cleanEnv(), "LIMIT_RESPONSE_HEADERS_ENABLED="+strconv.FormatBool(o.Headers))
	env = append(env, o.Env...)
	s, err := start(launch{name: name, bin: bin, args: args, env: env, grpcPort: ports[1], httpPort: ports[0],
		conns: o.Conns, tls: o.TLS})
	if err != nil {
		return nil, err
	}
	s.Redis = o.Redis
	s.restart = func() (*Server, error) { return StartOurs(bin, o) }
	return s, nil
}

// launch is how start runs a server.
type launch struct {
	name, bin string
	args, env []string
	// The ports the server was told to listen on (metricsPort 0: none).
	grpcPort, httpPort, metricsPort int
	conns                           int
	tls                             *Certs
	// unconfigured: the server serves before its first configuration and
	// answers calls with an error (gRPC Unknown) until then
	// (FORCE_START_WITHOUT_INITIAL_CONFIG).
	unconfigured bool
}

func start(l launch) (*Server, error) {
	logf, err := os.CreateTemp("", "rlsbench-"+strings.ReplaceAll(l.name, "/", "-")+"-*.log")
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(l.bin, l.args...)
	cmd.Env = l.env
	cmd.Stdout, cmd.Stderr = logf, logf
	if err := cmd.Start(); err != nil {
		logf.Close()
		os.Remove(logf.Name())
		return nil, err
	}
	s := &Server{Name: l.name, GRPC: "127.0.0.1:" + strconv.Itoa(l.grpcPort), HTTP: "127.0.0.1:" + strconv.Itoa(l.httpPort),
		cmd: cmd, logf: logf, exited: make(chan struct{})}
	if l.metricsPort != 0 {
		s.Metrics = "127.0.0.1:" + strconv.Itoa(l.metricsPort)
	}
	go func() { _ = cmd.Wait(); close(s.exited) }()
	creds := insecure.NewCredentials()
	if l.tls != nil {
		creds = credentials.NewTLS(l.tls.ClientTLS())
	}
	if err := s.connect(max(1, l.conns), creds, l.unconfigured); err != nil {
		s.Stop()
		return nil, fmt.Errorf("%s: %w\n%s", l.name, err, s.Log())
	}
	return s, nil
}

// connect opens the client and waits, with one call that waits for the
// connection (WaitForReady), until the server answers: both load their
// configuration files before they listen. A server that may be
// unconfigured (serving at once, its configuration to come over xDS) is
// asked a call without a domain, which it answers gRPC Unknown whether or
// not it has a configuration yet, so that the probe counts in no rule's or
// domain's series. It gives up when the process exits.
func (s *Server) connect(conns int, creds credentials.TransportCredentials, unconfigured bool) error {
	var cs []*grpc.ClientConn
	for range conns {
		c, err := grpc.NewClient(s.GRPC, grpc.WithTransportCredentials(creds))
		if err != nil {
			return err
		}
		cs = append(cs, c)
	}
	s.conns = cs
	s.calls = new(atomic.Int64)
	if len(cs) == 1 {
		s.Client = &counting{pb.NewRateLimitServiceClient(cs[0]), s.calls}
	} else {
		s.Client = &counting{&roundRobin{cs: cs}, s.calls}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	go func() {
		select {
		case <-s.exited:
			cancel()
		case <-ctx.Done():
		}
	}()
	probe := &pb.RateLimitRequest{Domain: "rlsbench-probe",
		Descriptors: []*rlsv3.RateLimitDescriptor{{Entries: []*rlsv3.RateLimitDescriptor_Entry{{Key: "k", Value: "v"}}}}}
	if unconfigured {
		probe.Domain = ""
	}
	for _, c := range cs {
		s.calls.Add(1)
		_, err := pb.NewRateLimitServiceClient(c).ShouldRateLimit(ctx, probe, grpc.WaitForReady(true))
		if unconfigured && status.Code(err) == codes.Unknown {
			continue
		}
		if err != nil {
			select {
			case <-s.exited:
				return fmt.Errorf("exited (%v) before answering", s.cmd.ProcessState)
			default:
			}
			return fmt.Errorf("probe call: %w", err)
		}
	}
	return nil
}

// Pid is the server's process id.
func (s *Server) Pid() int { return s.cmd.Process.Pid }

// Exited reports whether the process has ended.
func (s *Server) Exited() bool {
	select {
	case <-s.exited:
		return true
	default:
		return false
	}
}

// Log returns what the server wrote so far (its last 4 KiB).
func (s *Server) Log() string {
	b, err := os.ReadFile(s.logf.Name())
	if err != nil {
		return ""
	}
	if len(b) > 4096 {
		b = b[len(b)-4096:]
	}
	return string(b)
}

// Stop closes the client, stops the server (SIGTERM, then SIGKILL after
// 5 s) and removes its log.
func (s *Server) Stop() {
	for _, c := range s.conns {
		c.Close()
	}
	_ = s.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-s.exited:
	case <-time.After(5 * time.Second):
		_ = s.cmd.Process.Kill()
		<-s.exited
	}
	s.logf.Close()
	os.Remove(s.logf.Name())
}

// CPU is the process's user and system CPU time so far (Linux).
func CPU(pid int) (time.Duration, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, err
	}
	// Fields after the command name, which ends with the last ')'.
	i := strings.LastIndexByte(string(b), ')')
	f := strings.Fields(string(b[i+1:]))
	if len(f) < 13 {
		return 0, errors.New("short /proc/pid/stat")
	}
	ut, err1 := strconv.ParseInt(f[11], 10, 64)
	st, err2 := strconv.ParseInt(f[12], 10, 64)
	if err := errors.Join(err1, err2); err != nil {
		return 0, err
	}
	const userHZ = 100 // USER_HZ, fixed on Linux
	return time.Duration(ut+st) * time.Second / userHZ, nil
}

func freePorts(n int) ([]int, error) {
	var ls []net.Listener
	defer func() {
		for _, l := range ls {
			l.Close()
		}
	}()
	var ports []int
	for range n {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, err
		}
		ls = append(ls, l)
		ports = append(ports, l.Addr().(*net.TCPAddr).Port)
	}
	return ports, nil
}

// roundRobin spreads calls over several connections, as Envoy's workers
// each hold their own.
type roundRobin struct {
	cs []*grpc.ClientConn
	n  atomic.Uint64
}

func (r *roundRobin) ShouldRateLimit(ctx context.Context, in *pb.RateLimitRequest, opts ...grpc.CallOption) (*pb.RateLimitResponse, error) {
	c := r.cs[r.n.Add(1)%uint64(len(r.cs))]
	return pb.NewRateLimitServiceClient(c).ShouldRateLimit(ctx, in, opts...)
}

// counting counts the calls it passes on.
type counting struct {
	c pb.RateLimitServiceClient
	n *atomic.Int64
}

func (c *counting) ShouldRateLimit(ctx context.Context, in *pb.RateLimitRequest, opts ...grpc.CallOption) (*pb.RateLimitResponse, error) {
	c.n.Add(1)
	return c.c.ShouldRateLimit(ctx, in, opts...)
}

// JSON calls the reference's HTTP face: POST /json with the request in
// protojson, the answer parsed back when the status is 200 or 429.
func (s *Server) JSON(ctx context.Context, req *pb.RateLimitRequest) (*pb.RateLimitResponse, int, error) {
	if s.pick != nil {
		return s.pick.next().JSON(ctx, req)
	}
	body, err := protojson.Marshal(req)
	if err != nil {
		return nil, 0, err
	}
	hr, err := http.NewRequestWithContext(ctx, http.MethodPost, "http://"+s.HTTP+"/json", bytes.NewReader(body))
	if err != nil {
		return nil, 0, err
	}
	hr.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(hr)
	if err != nil {
		return nil, 0, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return nil, resp.StatusCode, err
	}
	if resp.StatusCode != http.StatusOK && resp.StatusCode != http.StatusTooManyRequests {
		return nil, resp.StatusCode, nil
	}
	var out pb.RateLimitResponse
	if err := (protojson.UnmarshalOptions{DiscardUnknown: true}).Unmarshal(b, &out); err != nil {
		return nil, resp.StatusCode, fmt.Errorf("/json answered %d with %q: %w", resp.StatusCode, b, err)
	}
	return &out, resp.StatusCode, nil
}
