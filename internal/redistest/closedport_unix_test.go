//go:build unix

package redistest

import (
	"errors"
	"net"
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
