package grpclimit

import (
	"context"
	"fmt"
	"net"
	"net/netip"
	"strings"

	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/peer"

	"github.com/smoothrate/ratelimit/internal/keyopt"
)

// A KeyPart is one component of a limit's key; see WithKey.
type KeyPart struct {
	kind partKind
	md   string
	fn   func(ctx context.Context, fullMethod string) (string, bool)
}

type partKind uint8

const (
	partPeer partKind = iota + 1
	partMethod
	partMetadata
	partFunc
	partGlobal
)

// Peer keys by the client's IP address (IPv6 grouped by /64, the network
// one subscriber gets), as the server's connection sees it. Behind a proxy
// that is the proxy: key by a metadata value the proxy sets instead.
func Peer() KeyPart { return KeyPart{kind: partPeer} }

// Method keys by the full method name, "/package.Service/Method".
func Method() KeyPart { return KeyPart{kind: partMethod} }

// Metadata keys by the first value of a request metadata entry, such as
// an API key. A call without it is keyed by its peer instead, so that
// leaving it out does not escape the limit. The name is matched as gRPC
// matches metadata keys, without regard to case.
func Metadata(name string) KeyPart {
	return KeyPart{kind: partMetadata, md: strings.ToLower(name)}
}

// Func keys by what f returns, such as the user an authentication
// interceptor put in the context; f returns false for an anonymous call,
// which is then keyed by its peer.
func Func(f func(ctx context.Context, fullMethod string) (string, bool)) KeyPart {
	return KeyPart{kind: partFunc, fn: f}
}

// Global gives every call the same key: one allowance shared by all
// clients (a limit on the whole service, or per method with Method()).
func Global() KeyPart { return KeyPart{kind: partGlobal} }

// check reports what is wrong with a part ("" if nothing).
func (kp KeyPart) check() string {
	switch kp.kind {
	case partPeer, partMethod, partGlobal:
		return ""
	case partMetadata:
		if kp.md == "" {
			return "Metadata needs a metadata key"
		}
		// gRPC's keys: 0-9 a-z _ - . (Metadata lowercases the name); a
		// typo would key every call by its peer, unnoticed.
		if strings.Trim(kp.md, "0123456789abcdefghijklmnopqrstuvwxyz_-.") != "" {
			return fmt.Sprintf("Metadata(%q): not a metadata key (letters, digits, '_', '-' and '.')", kp.md)
		}
		return ""
	case partFunc:
		if kp.fn == nil {
			return "Func needs a function"
		}
		return ""
	}
	return "a zero KeyPart (use Peer, Method, Metadata, Func or Global)"
}

// appendKey appends a limit's key for a call: "name:part|part".
func appendKey(b []byte, l *limitSpec, ctx context.Context, method string) []byte {
	b = append(b, l.Name...)
	b = append(b, ':')
	for i, kp := range l.Parts {
		if i > 0 {
			b = append(b, '|')
		}
		var v string
		var ok bool
		switch kp.kind {
		case partPeer:
			b = appendPeer(b, ctx)
			continue
		case partMethod:
			b = keyopt.AppendBounded(b, method)
			continue
		case partGlobal:
			b = append(b, '*')
			continue
		case partMetadata:
			if md, found := metadata.FromIncomingContext(ctx); found {
				if vs := md[kp.md]; len(vs) > 0 && vs[0] != "" {
					v, ok = vs[0], true
				}
			}
		case partFunc:
			v, ok = kp.fn(ctx, method)
		}
		if ok && v != "" {
			b = append(b, '=')
			b = keyopt.AppendBounded(b, v)
		} else {
			b = append(b, "ip="...)
			b = appendPeer(b, ctx)
		}
	}
	return b
}

// appendPeer appends the peer's IP address (IPv6 by /64), or its address
// as a string when it is not an IP one (a Unix socket), or "?" when the
// context has no peer.
func appendPeer(b []byte, ctx context.Context) []byte {
	p, ok := peer.FromContext(ctx)
	if !ok || p.Addr == nil {
		return append(b, '?')
	}
	var a netip.Addr
	switch addr := p.Addr.(type) {
	case *net.TCPAddr:
		a, ok = netip.AddrFromSlice(addr.IP)
	case *net.UDPAddr:
		a, ok = netip.AddrFromSlice(addr.IP)
	case *net.IPAddr:
		a, ok = netip.AddrFromSlice(addr.IP)
	default:
		// host:port, or an address alone (a custom net.Addr's).
		s := addr.String()
		if ap, err := netip.ParseAddrPort(s); err == nil {
			a = ap.Addr()
		} else {
			a, err = netip.ParseAddr(strings.TrimSuffix(strings.TrimPrefix(s, "["), "]"))
			ok = err == nil
		}
	}
	if !ok {
		return append(b, p.Addr.String()...)
	}
	a = a.Unmap().WithZone("")
	if a.Is6() {
		pre, _ := a.Prefix(64)
		return pre.AppendTo(b)
	}
	return a.AppendTo(b)
}
