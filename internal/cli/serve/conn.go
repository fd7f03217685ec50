package serve

import (
	"log"
	"net"
	"net/netip"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/smoothrate/ratelimit/internal/cli/command"
	"github.com/smoothrate/ratelimit/internal/cli/outage"
)

// ConnCap keeps at most Max connections open at once per client address
// (IPv6 by /64, as the limits key it) across every listener it wraps, so
// that one client opening thousands cannot take a server's file
// descriptors from everyone else. A connection over the cap is reset as
// soon as it is accepted. Exempt addresses (trusted proxies, which carry
// many clients each) have no cap; connections that are not TCP (a Unix
// socket) are not capped either.
type ConnCap struct {
	max      int
	exempt   func(netip.Addr) bool
	refused  *atomic.Int64
	onRefuse func(netip.Addr) // nil: none

	mu   sync.Mutex
	open map[netip.Addr]int
}

// NewConnCap returns a cap of max connections per client (max ≥ 1).
// exempt (nil: none) names the addresses without a cap; refused counts the
// connections closed over the cap, and onRefuse (nil: none) hears of each.
func NewConnCap(max int, exempt func(netip.Addr) bool, refused *atomic.Int64, onRefuse func(netip.Addr)) *ConnCap {
	if exempt == nil {
		exempt = func(netip.Addr) bool { return false }
	}
	if refused == nil {
		refused = new(atomic.Int64)
	}
	return &ConnCap{max: max, exempt: exempt, refused: refused, onRefuse: onRefuse, open: map[netip.Addr]int{}}
}

// Wrap returns ln with its connections counted against the cap.
func (c *ConnCap) Wrap(ln net.Listener) net.Listener { return &cappedListener{Listener: ln, c: c} }

type cappedListener struct {
	net.Listener
	c *ConnCap
}

func (l *cappedListener) Accept() (net.Conn, error) {
	for {
		conn, err := l.Listener.Accept()
		if err != nil {
			return nil, err
		}
		if capped, ok := l.c.admit(conn); ok {
			return capped, nil
		}
	}
}

// admit returns conn counted against its client's cap, or closes it (and
// returns false) when the client is at the cap.
func (c *ConnCap) admit(conn net.Conn) (net.Conn, bool) {
	a, ok := connAddr(conn)
	if !ok || c.exempt(a) {
		return conn, true
	}
	if a.Is6() {
		p, _ := a.Prefix(64)
		a = p.Addr()
	}
	c.mu.Lock()
	n := c.open[a]
	if n >= c.max {
		c.mu.Unlock()
		if tc, ok := conn.(*net.TCPConn); ok {
			_ = tc.SetLinger(0) // reset: free the socket now, not after TIME_WAIT
		}
		_ = conn.Close()
		c.refused.Add(1)
		if c.onRefuse != nil {
			c.onRefuse(a)
		}
		return nil, false
	}
	c.open[a] = n + 1
	c.mu.Unlock()
	return &cappedConn{Conn: conn, c: c, addr: a}, true
}

func (c *ConnCap) release(a netip.Addr) {
	c.mu.Lock()
	if n := c.open[a]; n <= 1 {
		delete(c.open, a)
	} else {
		c.open[a] = n - 1
	}
	c.mu.Unlock()
}

// cappedConn gives its place back when closed.
type cappedConn struct {
	net.Conn
	c    *ConnCap
	addr netip.Addr
	once sync.Once
}

func (c *cappedConn) Close() error {
	err := c.Conn.Close()
	c.once.Do(func() { c.c.release(c.addr) })
	return err
}

func connAddr(c net.Conn) (netip.Addr, bool) {
	if ta, ok := c.RemoteAddr().(*net.TCPAddr); ok {
		ap := ta.AddrPort()
		return ap.Addr().Unmap().WithZone(""), ap.Addr().IsValid()
	}
	return netip.Addr{}, false
}

// CapLog logs the connections a ConnCap refuses, summarised: the first at
// once, then at most one line every outage.SummaryEvery with how many were
// refused since and from which addresses (the first few), so that an
// operator sees who hits the cap without a line per connection. Refused is
// its ConnCap's onRefuse.
type CapLog struct {
	max int
	log *log.Logger
	now func() time.Time

	mu       sync.Mutex
	lastLine time.Time
	n        int
	from     []netip.Addr
}

// NewCapLog returns the log of a cap of max connections, written on l.
func NewCapLog(max int, l *log.Logger) *CapLog {
	return &CapLog{max: max, log: l, now: time.Now}
}

// capLogAddrs is how many addresses a line names.
const capLogAddrs = 3

// Refused records a connection from a closed over the cap.
func (c *CapLog) Refused(a netip.Addr) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.n++
	if len(c.from) < capLogAddrs && !slices.Contains(c.from, a) {
		c.from = append(c.from, a)
	}
	now := c.now()
	if !c.lastLine.IsZero() && now.Sub(c.lastLine) < outage.SummaryEvery {
		return
	}
	from := make([]string, len(c.from))
	for i, a := range c.from {
		from[i] = a.String()
	}
	c.log.Printf("closed %d %s over --max-conns-per-client %d (from %s)", c.n, command.Plural(int64(c.n), "connection", "connections"), c.max, strings.Join(from, ", "))
	c.lastLine, c.n, c.from = now, 0, c.from[:0]
}
