package serve

import (
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"

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
