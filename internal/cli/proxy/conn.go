package proxy

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

// connCap is a listener that keeps at most max connections open at once
// per client address (IPv6 by /64, as the limit keys it), so that one
// client opening thousands cannot take the proxy's file descriptors from
// everyone else. A connection over the cap is closed as soon as it is
// accepted. Exempt addresses (the trusted proxies, which carry many
// clients each) have no cap.
type connCap struct {
	net.Listener
	max      int
	exempt   func(netip.Addr) bool
	refused  *atomic.Int64
	onRefuse func(netip.Addr) // nil: none

	mu   sync.Mutex
	open map[netip.Addr]int
}

func newConnCap(ln net.Listener, max int, exempt func(netip.Addr) bool, refused *atomic.Int64, onRefuse func(netip.Addr)) net.Listener {
	return &connCap{Listener: ln, max: max, exempt: exempt, refused: refused, onRefuse: onRefuse, open: map[netip.Addr]int{}}
}

func (l *connCap) Accept() (net.Conn, error) {
	for {
		c, err := l.Listener.Accept()
		if err != nil {
			return nil, err
		}
		a, ok := connAddr(c)
		if !ok || l.exempt(a) {
			return c, nil
		}
		if a.Is6() {
			p, _ := a.Prefix(64)
			a = p.Addr()
		}
		l.mu.Lock()
		n := l.open[a]
		if n >= l.max {
			l.mu.Unlock()
			if tc, ok := c.(*net.TCPConn); ok {
				_ = tc.SetLinger(0) // reset: free the socket now, not after TIME_WAIT
			}
			_ = c.Close()
			l.refused.Add(1)
			if l.onRefuse != nil {
				l.onRefuse(a)
			}
			continue
		}
		l.open[a] = n + 1
		l.mu.Unlock()
		return &cappedConn{Conn: c, l: l, addr: a}, nil
	}
}

func (l *connCap) release(a netip.Addr) {
	l.mu.Lock()
	if n := l.open[a]; n <= 1 {
		delete(l.open, a)
	} else {
		l.open[a] = n - 1
	}
	l.mu.Unlock()
}

// cappedConn gives its place back when closed.
type cappedConn struct {
	net.Conn
	l    *connCap
	addr netip.Addr
	once sync.Once
}

func (c *cappedConn) Close() error {
	err := c.Conn.Close()
	c.once.Do(func() { c.l.release(c.addr) })
	return err
}

func connAddr(c net.Conn) (netip.Addr, bool) {
	if ta, ok := c.RemoteAddr().(*net.TCPAddr); ok {
		ap := ta.AddrPort()
		return ap.Addr().Unmap().WithZone(""), ap.Addr().IsValid()
	}
	return netip.Addr{}, false
}

// capLog logs the connections the cap refuses, summarised: the first at
// once, then at most one line every outage.SummaryEvery with how many were
// refused since and from which addresses (the first few), so that an
// operator sees who hits the cap without a line per connection.
type capLog struct {
	max int
	log *log.Logger
	now func() time.Time

	mu       sync.Mutex
	lastLine time.Time
	n        int
	from     []netip.Addr
}

// capLogAddrs is how many addresses a line names.
const capLogAddrs = 3

func (c *capLog) refused(a netip.Addr) {
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
