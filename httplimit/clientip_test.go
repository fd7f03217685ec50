package httplimit

import (
	"net/http"
	"net/http/httptest"
	"testing"
)

// clientKey is the key IP() gives r under opts.
func clientKey(t *testing.T, r *http.Request, opts ...Option) string {
	t.Helper()
	lim := newLimiter(t, nil)
	c, err := build(lim, opts)
	if err != nil {
		t.Fatal(err)
	}
	m := &middleware{config: c}
	return m.key(&c.Limits[0], r)
}

func TestClientIP(t *testing.T) {
	lb := WithTrustedProxies("10.0.0.0/8")
	two := WithTrustedProxies("10.0.0.0/8", "192.0.2.7")
	fwd := WithForwardingHeader(Forwarded)
	cases := []struct {
		name   string
		remote string
		header map[string][]string
		opts   []Option
		want   string
	}{
		{"remote addr", "203.0.113.9:4242", nil, nil, "203.0.113.9"},
		{"no trusted proxy: XFF ignored", "203.0.113.9:4242", map[string][]string{"X-Forwarded-For": {"1.1.1.1"}}, nil, "203.0.113.9"},
		{"no trusted proxy: Forwarded ignored", "203.0.113.9:4242", map[string][]string{"Forwarded": {"for=1.1.1.1"}}, []Option{fwd}, "203.0.113.9"},
		{"untrusted peer: XFF ignored", "203.0.113.9:4242", map[string][]string{"X-Forwarded-For": {"1.1.1.1"}}, []Option{lb}, "203.0.113.9"},
		{"trusted peer", "10.1.2.3:80", map[string][]string{"X-Forwarded-For": {"198.51.100.4"}}, []Option{lb}, "198.51.100.4"},
		// The client sent "X-Forwarded-For: 6.6.6.6"; the load balancer
		// appended the address it saw. Only the rightmost counts.
		{"spoofed leftmost entry", "10.1.2.3:80", map[string][]string{"X-Forwarded-For": {"6.6.6.6, 198.51.100.4"}}, []Option{lb}, "198.51.100.4"},
		{"spoofed entry in its own header line", "10.1.2.3:80", map[string][]string{"X-Forwarded-For": {"6.6.6.6", "198.51.100.4"}}, []Option{lb}, "198.51.100.4"},
		{"spoof that names a trusted proxy", "10.1.2.3:80", map[string][]string{"X-Forwarded-For": {"10.9.9.9, 198.51.100.4"}}, []Option{lb}, "198.51.100.4"},
		{"chain of trusted proxies", "10.1.2.3:80", map[string][]string{"X-Forwarded-For": {"6.6.6.6, 198.51.100.4, 192.0.2.7, 10.2.2.2"}}, []Option{two}, "198.51.100.4"},
		{"all hops trusted: leftmost", "10.1.2.3:80", map[string][]string{"X-Forwarded-For": {"10.4.4.4, 10.2.2.2"}}, []Option{lb}, "10.4.4.4"},
		{"trusted peer, no header", "10.1.2.3:80", nil, []Option{lb}, "10.1.2.3"},
		{"garbage from a trusted hop: that hop", "10.1.2.3:80", map[string][]string{"X-Forwarded-For": {"198.51.100.4, nonsense, 10.2.2.2"}}, []Option{lb}, "10.2.2.2"},
		{"XFF entry with a port", "10.1.2.3:80", map[string][]string{"X-Forwarded-For": {"198.51.100.4:5555"}}, []Option{lb}, "198.51.100.4"},
		{"empty XFF elements skipped", "10.1.2.3:80", map[string][]string{"X-Forwarded-For": {"198.51.100.4, , "}}, []Option{lb}, "198.51.100.4"},
		{"Forwarded", "10.1.2.3:80", map[string][]string{"Forwarded": {`for=6.6.6.6, for=198.51.100.4;proto=https;by=10.1.2.3`}}, []Option{lb, fwd}, "198.51.100.4"},
		{"Forwarded quoted IPv6 with port", "10.1.2.3:80", map[string][]string{"Forwarded": {`For="[2001:db8:cafe::17]:4711"`}}, []Option{lb, fwd}, "2001:db8:cafe::/64"},
		{"Forwarded obfuscated: the hop", "10.1.2.3:80", map[string][]string{"Forwarded": {`for=_hidden`}}, []Option{lb, fwd}, "10.1.2.3"},
		{"Forwarded configured: XFF spoof ignored", "10.1.2.3:80", map[string][]string{"X-Forwarded-For": {"6.6.6.6"}, "Forwarded": {"for=198.51.100.4"}}, []Option{lb, fwd}, "198.51.100.4"},
		{"XFF configured: Forwarded spoof ignored", "10.1.2.3:80", map[string][]string{"X-Forwarded-For": {"198.51.100.4"}, "Forwarded": {"for=6.6.6.6"}}, []Option{lb}, "198.51.100.4"},
		{"IPv6 grouped by /64", "[2001:db8:1:2:3:4:5:6]:443", nil, nil, "2001:db8:1:2::/64"},
		{"IPv6 zone dropped", "[fe80::1%eth0]:443", nil, []Option{WithIPPrefix(32, 128)}, "fe80::1"},
		{"IPv6 prefix configurable", "[2001:db8:1:2:3:4:5:6]:443", nil, []Option{WithIPPrefix(32, 48)}, "2001:db8:1::/48"},
		{"IPv4 prefix configurable", "203.0.113.9:1", nil, []Option{WithIPPrefix(24, 64)}, "203.0.113.0/24"},
		{"IPv4-mapped IPv6 is IPv4", "[::ffff:203.0.113.9]:1", nil, nil, "203.0.113.9"},
		{"mapped trusted proxy CIDR", "[::ffff:10.1.2.3]:1", map[string][]string{"X-Forwarded-For": {"198.51.100.4"}}, []Option{WithTrustedProxies("::ffff:10.0.0.0/104")}, "198.51.100.4"},
		{"Unix socket peer", "@", nil, nil, "@"},
		{"no peer at all", "", nil, nil, "?"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			r := httptest.NewRequest("GET", "/", nil)
			r.RemoteAddr = tc.remote
			for k, v := range tc.header {
				r.Header[k] = v
			}
			if got := clientKey(t, r, tc.opts...); got != "default:"+tc.want {
				t.Errorf("key %q, want %q", got, "default:"+tc.want)
			}
		})
	}
}

func FuzzClientIP(f *testing.F) {
	f.Add("10.1.2.3:80", "6.6.6.6, 198.51.100.4", `for="[2001:db8::1]:80";proto=http, for=_x`)
	f.Add("[::1]:1", ",,,", `for=""`)
	f.Add("10.0.0.1:1", "10.0.0.2:9, [::ffff:1.2.3.4]:5", "for")
	f.Fuzz(func(t *testing.T, remote, xff, fwd string) {
		for _, h := range []ForwardingHeader{XForwardedFor, Forwarded} {
			c, err := build(newLimiter(t, nil), []Option{WithTrustedProxies("10.0.0.0/8", "::1"), WithForwardingHeader(h)})
			if err != nil {
				t.Fatal(err)
			}
			r := &http.Request{RemoteAddr: remote, Header: http.Header{"X-Forwarded-For": {xff}, "Forwarded": {fwd}}}
			a, ok := c.clientIP(r)
			peer, peerOK := parseHostPort(remote)
			if ok != peerOK {
				t.Fatalf("found %v, peer parsed %v", ok, peerOK)
			}
			// The answer is the peer itself unless the peer is trusted:
			// an untrusted peer can never choose its key.
			if ok && !c.trusted(peer) && a != peer {
				t.Fatalf("untrusted peer %v keyed as %v", peer, a)
			}
		}
	})
}
