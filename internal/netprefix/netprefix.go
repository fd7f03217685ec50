// Package netprefix reads the trusted proxies that people type: a CIDR or
// a bare address, IPv4-mapped IPv6 unmapped, so that package httplimit's
// WithTrustedProxies and the ratelimit command's --trusted-proxy accept the
// same values with the same meaning.
package netprefix

import (
	"errors"
	"net/netip"
	"strings"
)

// Parse reads a CIDR ("10.0.0.0/8", "2001:db8::/32") or a bare address (a
// one-address prefix). The prefix is masked; an IPv4-mapped CIDR becomes
// its IPv4 prefix. The error says what is wrong without naming the input.
func Parse(s string) (netip.Prefix, error) {
	if strings.Contains(s, "/") {
		p, err := netip.ParsePrefix(s)
		if err != nil {
			return netip.Prefix{}, errors.New("not a CIDR (want 10.0.0.0/8 or 2001:db8::/32)")
		}
		if p.Addr().Is4In6() {
			if p.Bits() < 96 {
				return netip.Prefix{}, errors.New("an IPv4-mapped CIDR shorter than /96")
			}
			p = netip.PrefixFrom(p.Addr().Unmap(), p.Bits()-96)
		}
		return p.Masked(), nil
	}
	a, err := netip.ParseAddr(s)
	if err != nil {
		return netip.Prefix{}, errors.New("not an address or CIDR")
	}
	a = a.Unmap().WithZone("")
	return netip.PrefixFrom(a, a.BitLen()), nil
}
