package httplimit

import (
	"net/http"
	"net/netip"
	"strings"
)

// ForwardingHeader names the header that the trusted proxies in front of the
// server append the client's address to.
type ForwardingHeader uint8

const (
	// XForwardedFor is "X-Forwarded-For: client, proxy1, proxy2", the
	// de-facto standard that every load balancer writes.
	XForwardedFor ForwardingHeader = iota + 1
	// Forwarded is RFC 7239's "Forwarded: for=client, for=proxy1".
	Forwarded
)

// clientIP finds the address a request came from and reports whether it
// found one. The peer of the connection (RemoteAddr) is the client unless
// it is a trusted proxy; then the forwarding header is read from the right,
// skipping trusted proxies, and the first address that is not one is the
// client: everything to its left was written by the client itself and may
// be forged. If every hop is trusted, the leftmost is the client. If a
// trusted hop reported something that is not an address, the hop is taken
// as the client: it is the last address we can vouch for.
//
// It allocates nothing: it reads the headers in place.
func (c *config) clientIP(r *http.Request) (netip.Addr, bool) {
	peer, ok := parseHostPort(r.RemoteAddr)
	if !ok {
		return netip.Addr{}, false
	}
	if !c.trusted(peer) {
		return peer, true
	}
	name, parse := "X-Forwarded-For", parseXFFEntry
	if c.header == Forwarded {
		name, parse = "Forwarded", parseForwardedEntry
	}
	client := peer
	values := r.Header[name]
	for i := len(values) - 1; i >= 0; i-- {
		v := values[i]
		for len(v) > 0 {
			var entry string
			if j := strings.LastIndexByte(v, ','); j >= 0 {
				v, entry = v[:j], v[j+1:]
			} else {
				v, entry = "", v
			}
			entry = strings.TrimSpace(entry)
			if entry == "" {
				continue
			}
			a, ok := parse(entry)
			if !ok {
				return client, true
			}
			client = a
			if !c.trusted(a) {
				return a, true
			}
		}
	}
	return client, true
}

func (c *config) trusted(a netip.Addr) bool {
	for _, p := range c.trustedProxies {
		if p.Contains(a) {
			return true
		}
	}
	return false
}

// parseHostPort reads "1.2.3.4:5", "[::1]:5" (RemoteAddr's forms) or a bare
// address, unmapping IPv4-in-IPv6 and dropping zones so that a client has
// one key whichever socket accepted it.
func parseHostPort(s string) (netip.Addr, bool) {
	// Try the form s has, not one after the other: a failed parse
	// allocates its error, and this runs on every request.
	withPort := strings.HasPrefix(s, "[") && strings.Contains(s, "]:") ||
		strings.Count(s, ":") == 1
	if withPort {
		ap, err := netip.ParseAddrPort(s)
		if err != nil {
			return netip.Addr{}, false
		}
		return ap.Addr().Unmap().WithZone(""), true
	}
	a, err := netip.ParseAddr(strings.TrimSuffix(strings.TrimPrefix(s, "["), "]"))
	if err != nil {
		return netip.Addr{}, false
	}
	return a.Unmap().WithZone(""), true
}

// parseXFFEntry reads one X-Forwarded-For element: an address, possibly
// with a port (some proxies add one).
func parseXFFEntry(s string) (netip.Addr, bool) { return parseHostPort(s) }

// parseForwardedEntry reads the for= parameter of one Forwarded element
// (RFC 7239 §4): "for=192.0.2.60;proto=http", `for="[2001:db8::17]:4711"`.
// Obfuscated identifiers ("_hidden") and "unknown" are not addresses.
func parseForwardedEntry(s string) (netip.Addr, bool) {
	for len(s) > 0 {
		var pair string
		if j := strings.IndexByte(s, ';'); j >= 0 {
			pair, s = s[:j], s[j+1:]
		} else {
			pair, s = s, ""
		}
		pair = strings.TrimSpace(pair)
		if len(pair) < 4 || !strings.EqualFold(pair[:4], "for=") {
			continue
		}
		v := pair[4:]
		if len(v) >= 2 && v[0] == '"' && v[len(v)-1] == '"' {
			v = v[1 : len(v)-1]
		}
		return parseXFFEntry(v)
	}
	return netip.Addr{}, false
}

// appendIP appends a's group: the address itself, or its prefix ("/64") when
// the configured prefix is shorter than the address.
func (c *config) appendIP(dst []byte, a netip.Addr) []byte {
	bits := c.v6Bits
	if a.Is4() {
		bits = c.v4Bits
	}
	if bits >= a.BitLen() {
		return a.AppendTo(dst)
	}
	p, err := a.Prefix(bits)
	if err != nil { // bits is checked when configured; keep the address then
		return a.AppendTo(dst)
	}
	return p.AppendTo(dst)
}
