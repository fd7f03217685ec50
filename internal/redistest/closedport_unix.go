//go:build unix

package redistest

import (
	"sync"
	"syscall"
	"testing"
)

// closedPort returns a loopback port that is bound, without
// SO_REUSEADDR, by a socket that never listens, until the test ends: a
// connection to it is refused, and no other socket can take the port
// meanwhile. A port only found free and left (listened on, then closed)
// can be taken by another test of the run, a Redis it starts and kills
// among them: a client meant to find nothing there then finds a server,
// or finds one and then none. release closes the socket, at once or at
// the test's end.
func closedPort(t testing.TB) (port int, release func()) {
	t.Helper()
	// Close-on-exec, as the net package's sockets are, under the lock it
	// takes: a server a test starts must not inherit the port.
	syscall.ForkLock.RLock()
	fd, err := syscall.Socket(syscall.AF_INET, syscall.SOCK_STREAM, 0)
	if err == nil {
		syscall.CloseOnExec(fd)
	}
	syscall.ForkLock.RUnlock()
	if err != nil {
		t.Fatal(err)
	}
	release = sync.OnceFunc(func() { _ = syscall.Close(fd) })
	t.Cleanup(release)
	if err := syscall.Bind(fd, &syscall.SockaddrInet4{Addr: [4]byte{127, 0, 0, 1}}); err != nil {
		t.Fatal(err)
	}
	sa, err := syscall.Getsockname(fd)
	if err != nil {
		t.Fatal(err)
	}
	return sa.(*syscall.SockaddrInet4).Port, release
}
