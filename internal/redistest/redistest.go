package redistest

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/smoothrate/ratelimit/internal/tlstest"
)

// startTimeout bounds how long a server may take to report that it accepts
// connections. It is a safety net for a broken machine, not a wait: start-up
// ends as soon as the server says it is ready.
const startTimeout = 15 * time.Second

// Require returns the paths of redis-server and redis-cli. If either is
// missing it skips the test, or fails it when CI=true.
func Require(t testing.TB) (server, cli string) {
	t.Helper()
	server, err1 := exec.LookPath("redis-server")
	cli, err2 := exec.LookPath("redis-cli")
	if err1 == nil && err2 == nil {
		return server, cli
	}
	msg := "redis-server and redis-cli must be on PATH for this test (Debian/Ubuntu: apt-get install -y redis-server)"
	if os.Getenv("CI") == "true" {
		t.Fatal(msg)
	}
	t.Skip(msg)
	return "", ""
}

// Server is one redis-server process owned by a test.
type Server struct {
	t     testing.TB
	bin   string
	cli   string
	dir   string
	extra []string

	// Port is the loopback port the server listens on; it survives
	// Restart.
	Port int
	// TLSPort is the loopback port it serves TLS on (StartTLS), 0 if none;
	// it survives Restart.
	TLSPort int
	tls     []string // the TLS arguments but the port

	mu      sync.Mutex
	cmd     *exec.Cmd
	exited  chan struct{} // closed when cmd has been waited for
	stopped bool          // SIGSTOPped
}

// Addr returns "127.0.0.1:port".
func (s *Server) Addr() string { return net.JoinHostPort("127.0.0.1", strconv.Itoa(s.Port)) }

// Start runs a standalone redis-server on a free loopback port, in a fresh
// temporary directory, with persistence off, and returns once it has
// answered PING. extra are additional command-line arguments
// ("--maxmemory", "10mb", ...). The server is killed when the test ends.
func Start(t testing.TB, extra ...string) *Server {
	t.Helper()
	return start(t, nil, extra)
}

// StartReplica is Start for a replica of primary (role:slave from the
// start, linked or not: a primary with a password refuses it the sync).
func StartReplica(t testing.TB, primary *Server, extra ...string) *Server {
	t.Helper()
	return start(t, nil, append([]string{"--replicaof", "127.0.0.1", strconv.Itoa(primary.Port)}, extra...))
}

// StartTLS is Start with a second port serving TLS (TLSAddr): the server
// presents the certificate of certFile and keyFile and, when caFile is not
// "", requires a client certificate signed by its CAs (tls-auth-clients);
// else it asks for none. The plain port stays, for PING and CLI.
func StartTLS(t testing.TB, certFile, keyFile, caFile string, extra ...string) *Server {
	t.Helper()
	args := []string{"--tls-cert-file", certFile, "--tls-key-file", keyFile}
	if caFile != "" {
		args = append(args, "--tls-ca-cert-file", caFile, "--tls-auth-clients", "yes")
	} else {
		args = append(args, "--tls-auth-clients", "no")
	}
	return start(t, args, extra)
}

// TLSFiles are the files a client of StartTLSClientAuth's server needs:
// the CA of the server's certificate, and a client certificate and key the
// server accepts.
type TLSFiles struct {
	CA, ClientCert, ClientKey string
}

// StartTLSClientAuth is StartTLS with a new CA, in a temporary directory,
// that signs the server's certificate (for 127.0.0.1) and one for a client
// named client: the server requires a client certificate of that CA.
func StartTLSClientAuth(t testing.TB, client string, extra ...string) (*Server, TLSFiles) {
	t.Helper()
	dir := t.TempDir()
	ca := tlstest.NewCA(t, "redis CA")
	f := TLSFiles{CA: ca.WriteCA(t, dir, "ca.crt")}
	srvCert, srvKey := ca.Issue(t, "127.0.0.1").Write(t, dir, "redis.crt", "redis.key")
	f.ClientCert, f.ClientKey = ca.Issue(t, client).Write(t, dir, "tls.crt", "tls.key")
	return StartTLS(t, srvCert, srvKey, f.CA, extra...), f
}

// TLSAddr returns "127.0.0.1:tlsport" (StartTLS).
func (s *Server) TLSAddr() string { return net.JoinHostPort("127.0.0.1", strconv.Itoa(s.TLSPort)) }

func start(t testing.TB, tlsArgs, extra []string) *Server {
	t.Helper()
	bin, cli := Require(t)
	s := &Server{t: t, bin: bin, cli: cli, dir: t.TempDir(), extra: extra, tls: tlsArgs}
	var err error
	// A free port found by listening on :0 can be taken by someone else
	// before the server binds it; try a few.
	for attempt := 0; attempt < 5; attempt++ {
		s.Port, err = freePort()
		if err == nil && tlsArgs != nil {
			s.TLSPort, err = freePort()
		}
		if err != nil {
			break
		}
		if err = s.launch(); err == nil {
			break
		}
	}
	if err != nil {
		t.Fatalf("redistest: starting redis-server: %v", err)
	}
	t.Cleanup(s.shutdown)
	return s
}

func freePort() (int, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port, nil
}

// launch starts the process on s.Port and waits until it is ready: the
// server logs "Ready to accept connections" on stdout, which we read as it
// comes (no sleeping), then one PING confirms.
func (s *Server) launch() error {
	args := []string{
		"--port", strconv.Itoa(s.Port),
		"--bind", "127.0.0.1",
		"--dir", s.dir,
		"--save", "",
		"--appendonly", "no",
		"--daemonize", "no",
		"--loglevel", "notice",
		"--logfile", "",
		// A replica's first sync starts at once, not after the 5 s
		// Redis 7 waits by default for more replicas to share it.
		"--repl-diskless-sync-delay", "0",
	}
	if s.tls != nil {
		args = append(append(args, "--tls-port", strconv.Itoa(s.TLSPort)), s.tls...)
	}
	args = append(args, s.extra...)
	cmd := exec.Command(s.bin, args...)
	cmd.Dir = s.dir
	out, err := cmd.StdoutPipe()
	if err != nil {
		return err
	}
	cmd.Stderr = cmd.Stdout
	if err := cmd.Start(); err != nil {
		return err
	}
	ready := make(chan error, 1)
	var log strings.Builder
	go func() {
		sc := bufio.NewScanner(out)
		signalled := false
		for sc.Scan() {
			line := sc.Text()
			if !signalled {
				log.WriteString(line + "\n")
				if strings.Contains(line, "Ready to accept connections") {
					signalled = true
					ready <- nil
				}
			}
		}
		if !signalled {
			ready <- errors.New("redis-server exited before it was ready")
		}
		_, _ = io.Copy(io.Discard, out)
	}()
	exited := make(chan struct{})
	timer := time.NewTimer(startTimeout)
	defer timer.Stop()
	select {
	case err = <-ready:
	case <-timer.C:
		err = errors.New("redis-server did not become ready in time")
	}
	if err == nil {
		err = Ping(s.Addr())
	}
	go func() { _ = cmd.Wait(); close(exited) }()
	if err != nil {
		_ = cmd.Process.Kill()
		<-exited
		return fmt.Errorf("port %d: %w\n%s", s.Port, err, log.String())
	}
	s.mu.Lock()
	s.cmd, s.exited, s.stopped = cmd, exited, false
	s.mu.Unlock()
	return nil
}

// Ping sends PING to addr over a fresh connection and expects PONG within
// two seconds.
func Ping(addr string) error { return PingTimeout(addr, 2*time.Second) }

// PingTimeout is Ping with a deadline of d for the whole exchange.
func PingTimeout(addr string, d time.Duration) error {
	c, err := net.DialTimeout("tcp", addr, d)
	if err != nil {
		return err
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(d))
	if _, err := c.Write([]byte("PING\r\n")); err != nil {
		return err
	}
	line, err := bufio.NewReader(c).ReadString('\n')
	if err != nil {
		return err
	}
	if strings.TrimSpace(line) != "+PONG" {
		return fmt.Errorf("PING answered %q", line)
	}
	return nil
}

// Kill sends SIGKILL (kill -9) and waits for the process to end. Whatever
// was not persisted is lost, which is everything: persistence is off.
func (s *Server) Kill() {
	s.t.Helper()
	s.mu.Lock()
	cmd, exited, stopped := s.cmd, s.exited, s.stopped
	s.cmd = nil
	s.mu.Unlock()
	if cmd == nil {
		return
	}
	_ = cmd.Process.Signal(syscall.SIGKILL)
	if stopped {
		_ = cmd.Process.Signal(sigCont)
	}
	<-exited
}

// Restart starts the server again on the same port and directory, after a
// Kill. The new server is empty.
func (s *Server) Restart() {
	s.t.Helper()
	s.Kill()
	if err := s.launch(); err != nil {
		s.t.Fatalf("redistest: restarting redis-server: %v", err)
	}
}

// Pause sends SIGSTOP: the server keeps its connections but answers nothing,
// like a hung or swapped-out host.
func (s *Server) Pause() {
	s.t.Helper()
	s.signal(sigStop, true)
}

// Resume sends SIGCONT after Pause.
func (s *Server) Resume() {
	s.t.Helper()
	s.signal(sigCont, false)
}

func (s *Server) signal(sig syscall.Signal, stopped bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.cmd == nil {
		s.t.Fatalf("redistest: signal %v to a server that is not running", sig)
	}
	if err := s.cmd.Process.Signal(sig); err != nil {
		s.t.Fatalf("redistest: signal %v: %v", sig, err)
	}
	s.stopped = stopped
}

func (s *Server) shutdown() { s.Kill() }

// CLI runs redis-cli against the server with args ("SCRIPT", "FLUSH") and
// returns its trimmed output. A failure of redis-cli fails the test.
func (s *Server) CLI(args ...string) string {
	s.t.Helper()
	out, err := runCLI(s.cli, s.Port, args...)
	if err != nil {
		s.t.Fatalf("redistest: redis-cli %v: %v\n%s", args, err, out)
	}
	return out
}

func runCLI(cli string, port int, args ...string) (string, error) {
	full := append([]string{"-h", "127.0.0.1", "-p", strconv.Itoa(port)}, args...)
	out, err := exec.Command(cli, full...).CombinedOutput()
	return strings.TrimSpace(string(out)), err
}
