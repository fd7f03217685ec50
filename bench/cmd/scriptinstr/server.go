package main

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/smoothrate/ratelimit/bench/distbench"
)

// cgServer is a redis-server running under valgrind's callgrind, which
// counts every instruction the server executes: zero the counters, make
// calls, dump them, read the total.
type cgServer struct {
	*distbench.Server
	dumps string // callgrind's directory
}

// startCallgrind runs redis-server under callgrind on a free loopback
// port, persistence off, and returns once the server accepts connections.
// --hz 1 keeps the server's own timer work (which callgrind counts too)
// to one run a second.
func startCallgrind() (*cgServer, error) {
	for _, bin := range []string{"valgrind", "callgrind_control"} {
		if _, err := exec.LookPath(bin); err != nil {
			return nil, fmt.Errorf("%s must be on PATH (Debian/Ubuntu: apt-get install -y valgrind): %w", bin, err)
		}
	}
	dumps, err := os.MkdirTemp("", "scriptinstr")
	if err != nil {
		return nil, err
	}
	// Valgrind starts slowly, more so on a loaded machine.
	srv, err := distbench.StartServerUnder([]string{"valgrind", "--tool=callgrind", "--callgrind-out-file=" + filepath.Join(dumps, "cg.out")},
		2*time.Minute, "--hz", "1")
	if err != nil {
		os.RemoveAll(dumps)
		return nil, err
	}
	return &cgServer{Server: srv, dumps: dumps}, nil
}

// zero resets callgrind's counters.
func (s *cgServer) zero() error {
	return s.control("-z")
}

// dump writes callgrind's counters to a new file and returns the
// instructions counted since the last zero or dump.
func (s *cgServer) dump() (int64, error) {
	before, _ := filepath.Glob(filepath.Join(s.dumps, "cg.out.*"))
	if err := s.control("-d"); err != nil {
		return 0, err
	}
	after, _ := filepath.Glob(filepath.Join(s.dumps, "cg.out.*"))
	var fresh []string
	for _, f := range after {
		if !slices.Contains(before, f) {
			fresh = append(fresh, f)
		}
	}
	if len(fresh) != 1 {
		return 0, fmt.Errorf("callgrind wrote %d dumps, want 1: %q", len(fresh), fresh)
	}
	f, err := os.Open(fresh[0])
	if err != nil {
		return 0, err
	}
	defer f.Close()
	return totals(f)
}

// totals reads the instruction count from a callgrind dump: its
// "summary:" or "totals:" line (one event, Ir).
func totals(r io.Reader) (int64, error) {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if v, ok := strings.CutPrefix(line, "summary:"); ok {
			return strconv.ParseInt(strings.Fields(v)[0], 10, 64)
		}
		if v, ok := strings.CutPrefix(line, "totals:"); ok {
			return strconv.ParseInt(strings.Fields(v)[0], 10, 64)
		}
	}
	if err := sc.Err(); err != nil {
		return 0, err
	}
	return 0, errors.New("no summary or totals line in the callgrind dump")
}

func (s *cgServer) control(flag string) error {
	out, err := exec.Command("callgrind_control", flag, strconv.Itoa(s.Pid())).CombinedOutput()
	if err != nil {
		return fmt.Errorf("callgrind_control %s: %w: %s", flag, err, out)
	}
	return nil
}

// stop kills the server and removes its directories.
func (s *cgServer) stop() {
	s.Stop()
	if keepDumps {
		fmt.Fprintln(os.Stderr, "scriptinstr: callgrind's dumps (one per row, in order; callgrind_annotate reads them) are in", s.dumps)
		return
	}
	_ = os.RemoveAll(s.dumps)
}

// keepDumps leaves callgrind's dumps behind (-keep), to see where a
// script's instructions go.
var keepDumps bool
