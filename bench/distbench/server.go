package distbench

import (
	"bufio"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"time"
)

// Server is a redis-server started for a benchmark run: persistence off,
// on a free loopback port, in a temporary directory.
type Server struct {
	Addr string
	cmd  *exec.Cmd
	dir  string
}

// StartServer runs redis-server (found on PATH) and returns once it
// accepts connections. Stop it with Stop.
func StartServer() (*Server, error) {
	return StartServerUnder(nil, 15*time.Second)
}

// StartServerUnder is StartServer with redis-server run by wrapper (a
// command and its flags, e.g. valgrind's, found on PATH; none when empty),
// given up to wait to accept connections, with extra arguments after the
// usual ones.
func StartServerUnder(wrapper []string, wait time.Duration, extra ...string) (*Server, error) {
	bin, err := exec.LookPath("redis-server")
	if err != nil {
		return nil, err
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	port := ln.Addr().(*net.TCPAddr).Port
	ln.Close()
	dir, err := os.MkdirTemp("", "distbench")
	if err != nil {
		return nil, err
	}
	args := append(slices.Clone(wrapper), bin, "--port", strconv.Itoa(port), "--bind", "127.0.0.1", "--dir", dir,
		"--save", "", "--appendonly", "no", "--daemonize", "no", "--logfile", "")
	args = append(args, extra...)
	cmd := exec.Command(args[0], args[1:]...)
	out, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	cmd.Stderr = cmd.Stdout
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	s := &Server{Addr: net.JoinHostPort("127.0.0.1", strconv.Itoa(port)), cmd: cmd, dir: dir}
	// The server says when it accepts connections; read its log until
	// then (and keep draining it afterwards).
	ready := make(chan bool, 1)
	go func() {
		sc := bufio.NewScanner(out)
		said := false
		for sc.Scan() {
			if !said && strings.Contains(sc.Text(), "Ready to accept connections") {
				said = true
				ready <- true
			}
		}
		if !said {
			ready <- false
		}
	}()
	select {
	case ok := <-ready:
		if !ok {
			s.Stop()
			return nil, errors.New("redis-server exited before accepting connections")
		}
	case <-time.After(wait):
		s.Stop()
		return nil, fmt.Errorf("redis-server did not start within %v", wait)
	}
	return s, nil
}

// Pid is the server's process id (for its CPU time).
func (s *Server) Pid() int { return s.cmd.Process.Pid }

// Stop kills the server and removes its directory.
func (s *Server) Stop() {
	_ = s.cmd.Process.Kill()
	_ = s.cmd.Wait()
	_ = os.RemoveAll(s.dir)
}
