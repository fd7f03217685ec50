package grpclimit

import (
	"context"
	"net"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/peer"
)

// TestAppendKey: the key of each part, from a context as the server makes
// it: IPv6 peers grouped by /64, IPv4-mapped addresses unmapped, a Unix
// socket by its address, no peer as "?", a missing metadata value falling
// back to the peer, a long value hashed.
func TestAppendKey(t *testing.T) {
	withPeer := func(a net.Addr) context.Context {
		return peer.NewContext(context.Background(), &peer.Peer{Addr: a})
	}
	v6 := withPeer(&net.TCPAddr{IP: net.ParseIP("2001:db8:1:2:3:4:5:6"), Port: 9})
	long := strings.Repeat("k", 100)
	for _, tc := range []struct {
		ctx   context.Context
		parts []KeyPart
		want  string
	}{
		{withPeer(&net.TCPAddr{IP: net.ParseIP("192.0.2.7"), Port: 5}), []KeyPart{Peer()}, "n:192.0.2.7"},
		{withPeer(&net.TCPAddr{IP: net.ParseIP("::ffff:192.0.2.7"), Port: 5}), []KeyPart{Peer()}, "n:192.0.2.7"},
		{v6, []KeyPart{Peer()}, "n:2001:db8:1:2::/64"},
		{withPeer(&net.UnixAddr{Name: "/run/s.sock", Net: "unix"}), []KeyPart{Peer()}, "n:/run/s.sock"},
		// An address without a port is grouped by /64 too (it was keyed
		// whole: a client could rotate through its /64).
		{withPeer(&net.IPAddr{IP: net.ParseIP("2001:db8:1:2:ffff:4:5:7")}), []KeyPart{Peer()}, "n:2001:db8:1:2::/64"},
		{withPeer(&net.IPAddr{IP: net.ParseIP("::ffff:192.0.2.7")}), []KeyPart{Peer()}, "n:192.0.2.7"},
		{withPeer(&net.UDPAddr{IP: net.ParseIP("2001:db8:1:2::9"), Port: 4}), []KeyPart{Peer()}, "n:2001:db8:1:2::/64"},
		{withPeer(bareAddr("2001:db8:1:2:3:4:5:6")), []KeyPart{Peer()}, "n:2001:db8:1:2::/64"},
		{withPeer(bareAddr("[2001:db8:1:2:3:4:5:6]")), []KeyPart{Peer()}, "n:2001:db8:1:2::/64"},
		{context.Background(), []KeyPart{Peer()}, "n:?"},
		{v6, []KeyPart{Method(), Global()}, "n:/s/M|*"},
		{v6, []KeyPart{Metadata("X-Key")}, "n:ip=2001:db8:1:2::/64"},
		{metadata.NewIncomingContext(v6, metadata.Pairs("x-key", "abc")), []KeyPart{Metadata("X-Key")}, "n:=abc"},
		{metadata.NewIncomingContext(v6, metadata.Pairs("x-key", long)), []KeyPart{Metadata("x-key")},
			"n:=sha256:43x8t4zLMPDiA2V21oHWGZScip-4hckaB9prhFeIqc4"}, // SHA-256 of long, base64url

	} {
		got := string(appendKey(nil, &limitSpec{Name: "n", Parts: tc.parts}, tc.ctx, "/s/M"))
		assert.Equal(t, tc.want, got)
	}
}

// bareAddr is a net.Addr of another type whose String is an address
// without a port.
type bareAddr string

func (a bareAddr) Network() string { return "ip" }
func (a bareAddr) String() string  { return string(a) }
