package serve

import (
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"net/netip"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/smoothrate/ratelimit/internal/cli/clitest"
)

// fakeGRPC is a GRPCServer whose graceful stop waits for release.
type fakeGRPC struct {
	release      chan struct{}
	stopped      chan struct{}
	gracefulDone bool
}

func (f *fakeGRPC) Serve(ln net.Listener) error {
	<-f.stopped
	return nil
}

func (f *fakeGRPC) GracefulStop() {
	<-f.release
	f.gracefulDone = true
	close(f.stopped)
}

func (f *fakeGRPC) Stop() { panic("Stop: the graceful stop was not waited for") }

// TestGroupDrains: once ctx ends, the group says so, calls stopping, lets
// the request in flight and the gRPC calls finish, and exits 0.
func TestGroupDrains(t *testing.T) {
	var ls Listeners
	httpLn, err := ls.Listen("--http", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	grpcLn, err := ls.Listen("--grpc", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ls.Close()
	arrived, release := make(chan struct{}), make(chan struct{})
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		close(arrived)
		<-release
		io.WriteString(w, "finished")
	})}
	grpc := &fakeGRPC{release: release, stopped: make(chan struct{})}
	var out clitest.LockedBuffer
	g := &Group{Prefix: "ratelimit test", Stderr: &out, Work: "calls"}
	g.GRPC(grpc, grpcLn)
	g.HTTP(srv, httpLn)

	ctx, cancel := context.WithCancel(context.Background())
	stopping := make(chan struct{})
	status := make(chan int, 1)
	go func() { status <- g.Run(ctx, func() { close(stopping) }) }()

	got := make(chan string, 1)
	go func() {
		resp, err := http.Get("http://" + httpLn.Addr().String() + "/")
		if err != nil {
			got <- err.Error()
			return
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		got <- string(b)
	}()
	<-arrived
	cancel()
	<-stopping
	if want := "ratelimit test: shutting down, letting calls in flight finish\n"; out.String() != want {
		t.Errorf("stderr %q, want %q", out.String(), want)
	}
	close(release)
	if s := <-status; s != 0 {
		t.Errorf("status %d, want 0; stderr %q", s, out.String())
	}
	if b := <-got; b != "finished" {
		t.Errorf("the request in flight got %q", b)
	}
	if !grpc.gracefulDone {
		t.Error("the gRPC server was not stopped gracefully")
	}
}

// TestGroupServerFails: a server that fails ends the command with status
// 1 and its error, after the others drained.
func TestGroupServerFails(t *testing.T) {
	var ls Listeners
	ln, err := ls.Listen("", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ln.Close() // Serve fails at once
	var out clitest.LockedBuffer
	g := &Group{Prefix: "ratelimit test", Stderr: &out, Work: "requests"}
	g.HTTP(&http.Server{}, ln)
	if s := g.Run(context.Background(), nil); s != 1 {
		t.Errorf("status %d, want 1", s)
	}
	lines := strings.Split(strings.TrimSuffix(out.String(), "\n"), "\n")
	if len(lines) != 2 || !strings.HasPrefix(lines[0], "ratelimit test: accept tcp") ||
		lines[1] != "ratelimit test: shutting down, letting requests in flight finish" {
		t.Errorf("stderr %q", out.String())
	}
}

// TestListenersCloseTogether: an address that cannot be listened on closes
// the listeners already open and names its flag.
func TestListenersCloseTogether(t *testing.T) {
	var ls Listeners
	first, err := ls.Listen("--grpc", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	_, err = ls.Listen("--http", first.Addr().String())
	if err == nil || !strings.HasPrefix(err.Error(), "--http: listen tcp "+first.Addr().String()) {
		t.Fatalf("listening twice on %s: %v", first.Addr(), err)
	}
	if _, err := first.Accept(); !errors.Is(err, net.ErrClosed) {
		t.Errorf("the first listener is still open: Accept: %v", err)
	}
}

// startGroup runs a group of one HTTP server answering "served" (and
// telling whether it keeps the connection) until ctx ends, and returns its
// address and the channel of Run's status.
func startGroup(t *testing.T, ctx context.Context, drain time.Duration, stopping func()) (string, chan int, *clitest.LockedBuffer) {
	t.Helper()
	var ls Listeners
	ln, err := ls.Listen("--http", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(ls.Close)
	out := &clitest.LockedBuffer{}
	g := &Group{Prefix: "ratelimit test", Stderr: out, Work: "calls", Drain: drain}
	g.HTTP(&http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.WriteString(w, "served")
	})}, ln)
	status := make(chan int, 1)
	go func() { status <- g.Run(ctx, stopping) }()
	return ln.Addr().String(), status, out
}

// TestGroupDrainWindow: once told to stop, the group keeps serving for its
// drain window, health failing (stopping has run), and closes each
// connection after its answer so that clients go elsewhere; a second
// signal ends the window, and the group then stops as before.
func TestGroupDrainWindow(t *testing.T) {
	st := &signals{again: make(chan struct{})}
	ctx, cancel := context.WithCancelCause(context.WithValue(context.Background(), signalsKey{}, st))
	stopping := make(chan struct{})
	addr, status, out := startGroup(t, ctx, time.Hour, func() { close(stopping) })
	cancel(&signalCause{syscall.SIGTERM})
	<-stopping
	for range 3 {
		resp, err := http.Get("http://" + addr + "/")
		if err != nil {
			t.Fatalf("during the drain window: %v", err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if string(b) != "served" || !resp.Close {
			t.Errorf("during the drain window: %q, connection kept %v; want served, then closed", b, !resp.Close)
		}
	}
	select {
	case s := <-status:
		t.Fatalf("the group stopped (%d) within its drain window of an hour", s)
	default:
	}
	close(st.again)
	if s := <-status; s != 0 {
		t.Errorf("status %d, want 0; stderr %q", s, out.String())
	}
	if _, err := http.Get("http://" + addr + "/"); err == nil {
		t.Error("still accepting after the drain window")
	}
	for _, want := range []string{"serving on for 1h0m0s (--drain)", "drain window over: refusing new connections, letting calls in flight finish"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("stderr %q lacks %q", out.String(), want)
		}
	}
}

// TestGroupSIGINTSkipsDrain: Ctrl-C at a terminal (SIGINT) stops at once,
// whatever --drain says.
func TestGroupSIGINTSkipsDrain(t *testing.T) {
	ctx, cancel := context.WithCancelCause(context.Background())
	_, status, out := startGroup(t, ctx, time.Hour, nil)
	cancel(&signalCause{syscall.SIGINT})
	if s := <-status; s != 0 {
		t.Errorf("status %d, want 0", s)
	}
	if want := "ratelimit test: shutting down, letting calls in flight finish\n"; out.String() != want {
		t.Errorf("stderr %q, want %q", out.String(), want)
	}
}

// TestConnCapAcrossListeners: one cap wraps every listener of a command:
// a client holds at most its cap of connections to them all, and a closed
// connection gives its place back.
func TestConnCapAcrossListeners(t *testing.T) {
	var refused atomic.Int64
	from := make(chan netip.Addr, 8)
	cc := NewConnCap(2, nil, &refused, func(a netip.Addr) { from <- a })
	var ls Listeners
	defer ls.Close()
	var lns []net.Listener
	for range 2 {
		ln, err := ls.Listen("", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		lns = append(lns, cc.Wrap(ln))
	}
	accepted := make(chan net.Conn, 8)
	for _, ln := range lns {
		go func() {
			for {
				c, err := ln.Accept()
				if err != nil {
					return
				}
				accepted <- c
			}
		}()
	}
	dial := func(ln net.Listener) net.Conn {
		c, err := net.Dial("tcp", ln.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		return c
	}
	dial(lns[0])
	first := <-accepted
	dial(lns[1])
	<-accepted
	// The third is reset as soon as it is accepted: the reset may reach
	// the dial, or the read.
	if over, err := net.Dial("tcp", lns[1].Addr().String()); err == nil {
		defer over.Close()
		over.SetReadDeadline(time.Now().Add(10 * time.Second))
		if _, err := over.Read(make([]byte, 1)); err == nil || BodyTimedOut(err) {
			t.Errorf("a third connection from one client: read %v; want it closed at once", err)
		}
	}
	select {
	case a := <-from:
		if refused.Load() != 1 || a != netip.MustParseAddr("127.0.0.1") {
			t.Errorf("refused %d, from %v; want 1 from 127.0.0.1", refused.Load(), a)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("a third connection from one client was not refused")
	}
	first.Close()
	dial(lns[0])
	select {
	case <-accepted:
	case <-time.After(10 * time.Second):
		t.Error("a closed connection did not give its place back")
	}
}
