// Package serve is how the serving commands (proxy, rls, rlqs) run their
// servers: listen on every address first, so that a taken one stops the
// command before it serves anything; serve until SIGINT or SIGTERM, or
// until a server fails; then drain, letting the work in flight finish
// within ShutdownTimeout. Meanwhile they report their health (Health) and
// look at their configuration files every interval and on SIGHUP
// (Reload).
package serve

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"os/signal"
	"syscall"
	"time"

	"github.com/smoothrate/ratelimit/internal/cli/command"
)

// ShutdownTimeout bounds how long the work in flight may take to finish
// after SIGINT or SIGTERM.
const ShutdownTimeout = 30 * time.Second

// ReadHeaderTimeout bounds a request's line and headers, so that a client
// cannot hold a connection by sending them a byte at a time.
const ReadHeaderTimeout = 10 * time.Second

// SignalContext is a context that ends on SIGINT or SIGTERM: a serving
// command's life. stop releases the signals.
func SignalContext() (ctx context.Context, stop context.CancelFunc) {
	return signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
}

// Listeners are a command's listeners, opened one by one and closed
// together when one cannot be.
type Listeners []net.Listener

// Listen listens on addr (TCP). On failure it closes the listeners opened
// before, and the error names flagName ("--metrics: listen tcp ...")
// unless it is "".
func (ls *Listeners) Listen(flagName, addr string) (net.Listener, error) {
	return ls.add(flagName, func() (net.Listener, error) { return net.Listen("tcp", addr) })
}

// add opens a listener with listen and keeps it, or closes the others and
// returns the error, naming flagName unless it is "".
func (ls *Listeners) add(flagName string, listen func() (net.Listener, error)) (net.Listener, error) {
	ln, err := listen()
	if err != nil {
		ls.Close()
		if flagName != "" {
			err = fmt.Errorf("%s: %w", flagName, err)
		}
		return nil, err
	}
	*ls = append(*ls, ln)
	return ln, nil
}

// Close closes the listeners.
func (ls Listeners) Close() {
	for _, l := range ls {
		l.Close()
	}
}

// GRPCServer is what Group needs of a *grpc.Server: a graceful stop that
// waits for the calls in flight without a deadline, and a stop that cuts
// them.
type GRPCServer interface {
	Serve(net.Listener) error
	GracefulStop()
	Stop()
}

// Group is the servers of one command, each on its listener.
type Group struct {
	Prefix string    // "ratelimit proxy": begins every line the group writes
	Stderr io.Writer // where it writes them
	Work   string    // what is in flight ("requests", "calls"), for the shutting-down line

	http   []*http.Server
	httpLn []net.Listener
	grpc   []GRPCServer
	grpcLn []net.Listener
}

// HTTP adds an HTTP server on ln.
func (g *Group) HTTP(s *http.Server, ln net.Listener) {
	g.http, g.httpLn = append(g.http, s), append(g.httpLn, ln)
}

// GRPC adds a gRPC server on ln.
func (g *Group) GRPC(s GRPCServer, ln net.Listener) {
	g.grpc, g.grpcLn = append(g.grpc, s), append(g.grpcLn, ln)
}

// Run serves until ctx ends or a server fails, then drains: stopping, if
// not nil, runs once the group says it is shutting down (a health check
// turning to failure); the gRPC servers stop gracefully while the HTTP
// servers shut down one after the other, all within ShutdownTimeout, after
// which the gRPC calls still running are cut. It returns the exit status:
// 0, or 1 if a server failed or the work in flight did not finish in time.
func (g *Group) Run(ctx context.Context, stopping func()) int {
	failed := make(chan error, len(g.grpc)+len(g.http))
	for i, s := range g.grpc {
		go func() { failed <- s.Serve(g.grpcLn[i]) }()
	}
	for i, s := range g.http {
		go func() { failed <- s.Serve(g.httpLn[i]) }()
	}
	status := command.ExitOK
	select {
	case <-ctx.Done():
	case err := <-failed:
		fmt.Fprintf(g.Stderr, "%s: %v\n", g.Prefix, err)
		status = command.ExitFail
	}
	fmt.Fprintf(g.Stderr, "%s: shutting down, letting %s in flight finish\n", g.Prefix, g.Work)
	if stopping != nil {
		stopping()
	}
	drain, cancel := context.WithTimeout(context.Background(), ShutdownTimeout)
	defer cancel()
	stopped := make(chan struct{})
	go func() {
		for _, s := range g.grpc {
			s.GracefulStop()
		}
		close(stopped)
	}()
	for _, s := range g.http {
		if err := s.Shutdown(drain); err != nil {
			fmt.Fprintf(g.Stderr, "%s: shutdown: %v\n", g.Prefix, err)
			status = command.ExitFail
		}
	}
	if len(g.grpc) == 0 {
		return status
	}
	select {
	case <-stopped:
	case <-drain.Done():
		for _, s := range g.grpc {
			s.Stop()
		}
		fmt.Fprintf(g.Stderr, "%s: shutdown: gRPC calls still running after %v: stopped\n", g.Prefix, ShutdownTimeout)
		status = command.ExitFail
	}
	return status
}
