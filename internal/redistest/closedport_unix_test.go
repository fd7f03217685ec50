//go:build unix

package redistest

import (
	"errors"
	"net"
	"os/exec"
	"syscall"
	"testing"
)

// TestClosedAddr: a connection to ClosedAddr is refused, and while the
// test runs the port cannot be listened on (so no other test's server
// takes it).
func TestClosedAddr(t *testing.T) {
	addr := ClosedAddr(t)
	if c, err := net.Dial("tcp", addr); err == nil {
		c.Close()
		t.Fatalf("dial %s: connected", addr)
	} else if !errors.Is(err, syscall.ECONNREFUSED) {
		t.Errorf("dial %s: %v, want connection refused", addr, err)
	}
	if ln, err := net.Listen("tcp", addr); err == nil {
		ln.Close()
		t.Errorf("listen on %s: taken", addr)
	}
}

// TestClosedAddrNotInherited: a process the test starts does not inherit
// the socket that keeps ClosedAddr's port (it would keep the port after
// release).
func TestClosedAddrNotInherited(t *testing.T) {
	addr, release := ClosedAddrUntil(t)
	cmd := exec.Command("sleep", "30")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = cmd.Process.Kill(); _ = cmd.Wait() }()
	release()
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		t.Fatalf("listen on %s after release, with a child running: %v", addr, err)
	}
	ln.Close()
}
