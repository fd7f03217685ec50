package serve

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"net/netip"
	"sync/atomic"
	"time"

	"github.com/smoothrate/ratelimit/internal/cli/command"
)

// Defaults of HTTPFlags, nginx's where it has one: a server that one
// hostile client can exhaust is not a limiter. docs/http.md says why each.
const (
	DefaultIdleTimeout       = 75 * time.Second // nginx's keepalive_timeout
	DefaultReadTimeout       = 60 * time.Second // nginx's client_body_timeout
	DefaultMaxHeaderBytes    = 32 << 10         // nginx's large_client_header_buffers (4 x 8k)
	DefaultMaxConnsPerClient = 256
)

// HTTPFlags are the flags that bound what one client can hold of a
// command's servers: its idle keep-alive connections, a request body it
// stops sending, its headers, and how many connections it keeps open.
type HTTPFlags struct {
	IdleTimeout       time.Duration
	ReadTimeout       time.Duration
	MaxHeaderBytes    int64
	MaxConnsPerClient int
}

// Register defines --idle-timeout, --read-timeout, --max-header-bytes and
// --max-conns-per-client on fs with their defaults; exempt, when not "",
// says which clients have no connection cap.
func (f *HTTPFlags) Register(fs *flag.FlagSet, exempt string) {
	f.MaxHeaderBytes = DefaultMaxHeaderBytes
	fs.DurationVar(&f.IdleTimeout, "idle-timeout", DefaultIdleTimeout, "close a keep-alive connection idle this `long`")
	fs.DurationVar(&f.ReadTimeout, "read-timeout", DefaultReadTimeout, "cut off a client that sends nothing of its request body for this `long`")
	fs.Var(command.Size{P: &f.MaxHeaderBytes, Min: 1 << 10, Max: 1 << 30}, "max-header-bytes", "answer 431 to a request whose headers are larger than this `size`")
	capUsage := "most connections open at once from one client address (IPv6: /64); 0: no cap"
	if exempt != "" {
		capUsage = "most connections open at once from one client address (IPv6: /64); " + exempt + "; 0: no cap"
	}
	fs.IntVar(&f.MaxConnsPerClient, "max-conns-per-client", DefaultMaxConnsPerClient, capUsage)
}

// Check refuses values no server can use.
func (f *HTTPFlags) Check() error {
	for _, d := range []struct {
		name string
		v    time.Duration
	}{{"idle-timeout", f.IdleTimeout}, {"read-timeout", f.ReadTimeout}} {
		if d.v <= 0 {
			return fmt.Errorf("--%s %v: want a positive duration", d.name, d.v)
		}
	}
	if f.MaxConnsPerClient < 0 {
		return fmt.Errorf("--max-conns-per-client %d: want 0 (no cap) or more", f.MaxConnsPerClient)
	}
	return nil
}

// Apply sets s's timeouts and header bound from the flags: the request
// line and headers must arrive within ReadHeaderTimeout (or --read-timeout
// if shorter), a keep-alive connection is closed after --idle-timeout.
// A body's reads are bounded by TimedBody, in the handler.
//
// net/http reads up to MaxHeaderBytes plus 4096 bytes of request line and
// headers before it answers 431 (its bufio slop; on a kept-alive connection
// up to 4 KiB more, what its reader holds), and cannot be set under 1 byte
// (0 means its default of 1 MB): it is set 4 KiB under --max-header-bytes,
// or to 1, to bound what it reads, and the handler counts the headers of
// what passes.
func (f *HTTPFlags) Apply(s *http.Server) *http.Server {
	s.ReadHeaderTimeout = min(ReadHeaderTimeout, f.ReadTimeout)
	s.IdleTimeout = f.IdleTimeout
	s.MaxHeaderBytes = max(1, int(f.MaxHeaderBytes)-4096)
	s.Handler = headerBound{s.Handler, int(f.MaxHeaderBytes)}
	return s
}

// headerBound answers 431 to a request whose line and headers (as sent,
// but for spacing) are more than max bytes, and passes the others to h.
type headerBound struct {
	h   http.Handler
	max int
}

func (b headerBound) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	n := len(r.Method) + len(r.RequestURI) + len(r.Proto) + 4 + len("Host: \r\n") + len(r.Host) + 2
	for k, vs := range r.Header {
		for _, v := range vs {
			n += len(k) + len(v) + 4
		}
	}
	if n > b.max {
		w.Header().Set("Connection", "close")
		http.Error(w, "431 Request Header Fields Too Large", http.StatusRequestHeaderFieldsTooLarge)
		return
	}
	h := b.h
	if h == nil {
		h = http.DefaultServeMux
	}
	h.ServeHTTP(w, r)
}

// Cap returns the listeners' wrapper that holds --max-conns-per-client
// (nil when it is 0), its refusals counted in refused and logged on l;
// exempt (nil: none) names the addresses without a cap. One cap wraps
// every listener of a command, so that a client holds at most that many
// connections to the whole process.
func (f *HTTPFlags) Cap(exempt func(netip.Addr) bool, refused *atomic.Int64, l *log.Logger) *ConnCap {
	if f.MaxConnsPerClient == 0 {
		return nil
	}
	return NewConnCap(f.MaxConnsPerClient, exempt, refused, NewCapLog(f.MaxConnsPerClient, l).Refused)
}

// TimedBody reads a request body with a deadline on each read (nginx's
// client_body_timeout): a client that stops sending is cut off after
// Timeout, however long its body, while one that keeps sending is never
// cut off. A read cut off returns an error for which BodyTimedOut is true.
type TimedBody struct {
	Body    io.ReadCloser
	RC      *http.ResponseController
	Timeout time.Duration
}

// NewTimedBody wraps r's body, answered through w, with reads bounded by
// timeout; a request without a body is left as it is.
func NewTimedBody(w http.ResponseWriter, r *http.Request, timeout time.Duration) {
	if r.Body != nil && r.Body != http.NoBody {
		r.Body = &TimedBody{Body: r.Body, RC: http.NewResponseController(w), Timeout: timeout}
	}
}

func (b *TimedBody) Read(buf []byte) (int, error) {
	_ = b.RC.SetReadDeadline(time.Now().Add(b.Timeout))
	n, err := b.Body.Read(buf)
	if err != nil && !BodyTimedOut(err) {
		// The body is read: the server's own watch of the connection
		// must not see a deadline that no longer applies (it would
		// cancel the request).
		_ = b.RC.SetReadDeadline(time.Time{})
	}
	return n, err
}

func (b *TimedBody) Close() error { return b.Body.Close() }

// BodyTimedOut reports whether err is a TimedBody's read cut off by its
// timeout.
func BodyTimedOut(err error) bool {
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
}
