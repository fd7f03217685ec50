package redistest

import (
	"context"
	"fmt"
	"net"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/redis/go-redis/v9"
	"github.com/redis/go-redis/v9/logging"
)

// ClientLog holds the lines go-redis printed through its process-wide
// logger while a test ran (CaptureClientLog).
type ClientLog struct {
	mu    sync.Mutex
	lines []string
}

// Printf implements go-redis's logger.
func (l *ClientLog) Printf(_ context.Context, format string, v ...any) {
	l.mu.Lock()
	l.lines = append(l.lines, fmt.Sprintf(format, v...))
	l.mu.Unlock()
}

// About returns the lines that mention s, an address: other tests of the
// process may log about theirs meanwhile.
func (l *ClientLog) About(s string) []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	var got []string
	for _, line := range l.lines {
		if strings.Contains(line, s) {
			got = append(got, line)
		}
	}
	return got
}

// CaptureClientLog makes go-redis print to a new ClientLog until the test
// ends, then to its default logger again.
func CaptureClientLog(t testing.TB) *ClientLog {
	l := &ClientLog{}
	redis.SetLogger(l)
	t.Cleanup(logging.Enable)
	return l
}

// ClosedAddr returns a loopback address that nothing listens on while the
// test runs: a connection to it is refused (closedPort).
func ClosedAddr(t testing.TB) string {
	addr, _ := ClosedAddrUntil(t)
	return addr
}

// ClosedAddrUntil is ClosedAddr for a test that later starts a server at
// the address: the port stays closed, and no other test's, until release
// is called (or the test ends).
func ClosedAddrUntil(t testing.TB) (addr string, release func()) {
	port, release := closedPort(t)
	return net.JoinHostPort("127.0.0.1", strconv.Itoa(port)), release
}
