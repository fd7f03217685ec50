// Package serve is how the serving commands (proxy, rls, rlqs) run their
// servers: listen on every address first, so that a taken one stops the
// command before it serves anything; bound what one client can hold (idle
// connections, stalled bodies, connections per address); serve until
// SIGINT or SIGTERM, or until a server fails; after SIGTERM, keep serving
// for a drain window while the health checks fail, so that load balancers
// see it; then stop accepting and let the work in flight finish within
// ShutdownTimeout. Meanwhile they report their health (Health) and look at
// their configuration files every interval and on SIGHUP (Reload), reading
// only regular files (package regularfile).
package serve

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/signal"
	"sync"
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
// command's life. stop releases the signals. A Group running until it ends
// drains (Group.Drain) after SIGTERM, what an orchestrator sends, and not
// after SIGINT, a terminal's Ctrl-C; a second signal of either kind ends
// the drain window at once, and a third has its default effect (the
// process dies), for an operator who will not wait for the calls in flight.
func SignalContext() (ctx context.Context, stop context.CancelFunc) {
	ch := make(chan os.Signal, 1)
	signal.Notify(ch, syscall.SIGINT, syscall.SIGTERM)
	st := &signals{again: make(chan struct{})}
	ctx, cancel := context.WithCancelCause(context.WithValue(context.Background(), signalsKey{}, st))
	done := make(chan struct{})
	go func() {
		select {
		case sig := <-ch:
			cancel(&signalCause{sig})
		case <-done:
			return
		}
		select {
		case <-ch:
			signal.Stop(ch)
			close(st.again)
		case <-done:
		}
	}()
	var once sync.Once
	return ctx, func() {
		once.Do(func() {
			signal.Stop(ch)
			close(done)
			cancel(context.Canceled)
		})
	}
}

// signals is what SignalContext tells Group.Run beyond its context's end:
// again is closed by a second signal.
type signals struct{ again chan struct{} }

type signalsKey struct{}

// signalCause is the cause of a SignalContext's end.
type signalCause struct{ sig os.Signal }

func (c *signalCause) Error() string { return "received " + c.sig.String() }

// DefaultDrain is rls's drain window (--drain): Envoy Gateway probes the
// rate limit service's /healthcheck for readiness every 5 s, with a 1 s
// timeout and one failure enough, so that 6 s lets one probe at least see
// the 500 before the listeners close; Kubernetes itself stops sending new
// connections to a terminating pod within about a second, which the same
// window covers; and 6 s leaves most of Kubernetes' default 30 s grace to
// the calls in flight, which take milliseconds.
const DefaultDrain = 6 * time.Second

// RegisterDrain defines --drain on fs, into d, with default def; health
// says whether the command has health checks to fail meanwhile.
func RegisterDrain(fs *flag.FlagSet, d *time.Duration, def time.Duration, health bool) {
	during := "each HTTP connection closed after its answer"
	if health {
		during = "health checks failing, " + during
	}
	fs.DurationVar(d, "drain", def, "after SIGTERM, keep serving this `long` ("+during+") before refusing new connections; 0: none")
}

// CheckDrain refuses a negative --drain.
func CheckDrain(d time.Duration) error {
	if d < 0 {
		return fmt.Errorf("--drain %v: want 0 (none) or a positive duration", d)
	}
	return nil
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
	Prefix string        // "ratelimit proxy": begins every line the group writes
	Stderr io.Writer     // where it writes them
	Work   string        // what is in flight ("requests", "calls"), for the shutting-down line
	Drain  time.Duration // how long to keep serving once told to stop (see Run)

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

// Run serves until ctx ends or a server fails, then stops: stopping, if
// not nil, runs once the group says it is shutting down (a health check
// turning to failure); for Drain after that, unless ctx ended by SIGINT
// (SignalContext), the servers go on serving as before, except that the
// HTTP servers close each connection after its answer, so that clients
// move to another instance and a load balancer's health check sees the
// failure; a second signal ends the window. Then the gRPC servers stop
// gracefully while the HTTP servers shut down one after the other, all
// within ShutdownTimeout, after which the gRPC calls still running are
// cut. It returns the exit status: 0, or 1 if a server failed or the work
// in flight did not finish in time.
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
	window := g.Drain
	var again <-chan struct{}
	if st, ok := ctx.Value(signalsKey{}).(*signals); ok {
		again = st.again
	}
	if sc, ok := errors.AsType[*signalCause](context.Cause(ctx)); (ok && sc.sig == syscall.SIGINT) || status != command.ExitOK {
		window = 0
	}
	if window > 0 {
		health := ""
		if stopping != nil {
			health = " with health checks failing"
		}
		fmt.Fprintf(g.Stderr, "%s: shutting down: serving on for %v (--drain)%s, then letting %s in flight finish; a second signal ends the wait\n", g.Prefix, window, health, g.Work)
	} else {
		fmt.Fprintf(g.Stderr, "%s: shutting down, letting %s in flight finish\n", g.Prefix, g.Work)
	}
	if window > 0 {
		// Before stopping: a client that sees the health check fail
		// and asks once more gets its answer on a connection closed
		// after it.
		for _, s := range g.http {
			s.SetKeepAlivesEnabled(false)
		}
	}
	if stopping != nil {
		stopping()
	}
	if window > 0 {
		t := time.NewTimer(window)
		select {
		case <-t.C:
		case <-again:
			t.Stop()
		case err := <-failed:
			t.Stop()
			fmt.Fprintf(g.Stderr, "%s: %v\n", g.Prefix, err)
			status = command.ExitFail
		}
		fmt.Fprintf(g.Stderr, "%s: drain window over: refusing new connections, letting %s in flight finish\n", g.Prefix, g.Work)
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
