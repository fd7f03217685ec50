package serve

import (
	"io"
	"net"
	"strconv"
	"testing"
	"time"

	"google.golang.org/grpc"

	"github.com/smoothrate/ratelimit/internal/cli/clitest"
)

// TestGRPCOptions: a server with GRPCOptions says its bound on streams in
// its HTTP/2 settings, and closes a connection that sends nothing after
// ReadHeaderTimeout (gRPC's default: 120 s).
func TestGRPCOptions(t *testing.T) {
	t.Parallel()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	gs := grpc.NewServer(GRPCOptions(7)...)
	go gs.Serve(ln)
	t.Cleanup(gs.Stop)
	if got, ok := clitest.MaxStreams(t, ln.Addr().String()); !ok || got != 7 {
		t.Errorf("SETTINGS_MAX_CONCURRENT_STREAMS %d (set: %v), want 7", got, ok)
	}

	conn, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	start := time.Now()
	if err := conn.SetReadDeadline(start.Add(3 * ReadHeaderTimeout)); err != nil {
		t.Fatal(err)
	}
	_, err = io.Copy(io.Discard, conn) // the server's settings, then its close
	if took := time.Since(start); err != nil || took < ReadHeaderTimeout-time.Second {
		t.Errorf("a connection that sends nothing: %v after %v, want closed after %v", err, took, ReadHeaderTimeout)
	}
}

// TestCheckMaxStreams: a bound below 1, or past HTTP/2's 32 bits, is refused.
func TestCheckMaxStreams(t *testing.T) {
	cases := map[int]bool{0: false, -1: false, 1: true, DefaultMaxStreams: true}
	if strconv.IntSize == 64 {
		shift := 32
		cases[1<<shift] = false
	}
	for n, ok := range cases {
		if err := CheckMaxStreams(n); (err == nil) != ok {
			t.Errorf("CheckMaxStreams(%d) = %v", n, err)
		}
	}
}
