//go:build !unix

package redistest

import (
	"net"
	"testing"
)

// closedPort returns a loopback port found free: listened on, then closed
// (release does nothing).
func closedPort(t testing.TB) (port int, release func()) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port = ln.Addr().(*net.TCPAddr).Port
	_ = ln.Close()
	return port, func() {}
}
