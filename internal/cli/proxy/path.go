package proxy

import (
	"net/url"
	"path"
	"strings"
)

// cleanPath puts u's path in its one canonical form, so that a limit per
// route cannot be escaped by writing the same path another way, and the
// backend gets the path that was keyed: escapes of unreserved characters
// decoded (/%61 is /a), other escapes in upper case, empty and "." segments
// dropped and ".." applied (//a, /./a and /b/../a are /a), a trailing
// slash kept (/a/ and /a are different resources to most servers). An
// escaped slash (%2F) stays escaped: it is not a separator.
func cleanPath(u *url.URL) {
	escaped := u.EscapedPath()
	norm := normalizeEscapes(escaped)
	cleaned := path.Clean("/" + norm)
	if strings.HasSuffix(norm, "/") && cleaned != "/" {
		cleaned += "/"
	}
	if cleaned == escaped {
		return
	}
	p, err := url.PathUnescape(cleaned)
	if err != nil { // normalizeEscapes left only valid escapes
		return
	}
	u.Path, u.RawPath = p, cleaned
	if u.EscapedPath() == cleaned {
		// RawPath is only needed when it differs from Path's own
		// escaping.
		if (&url.URL{Path: p}).EscapedPath() == cleaned {
			u.RawPath = ""
		}
	}
}

// normalizeEscapes decodes %XX escapes of unreserved characters (RFC 3986
// §2.3: they mean the same decoded) and upper-cases the others; a "%" that
// starts no valid escape is escaped itself.
func normalizeEscapes(s string) string {
	if !strings.Contains(s, "%") {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c != '%' {
			b.WriteByte(c)
			continue
		}
		if i+2 >= len(s) || !isHex(s[i+1]) || !isHex(s[i+2]) {
			b.WriteString("%25")
			continue
		}
		v := unhex(s[i+1])<<4 | unhex(s[i+2])
		if isUnreserved(v) {
			b.WriteByte(v)
		} else {
			b.WriteByte('%')
			b.WriteString(strings.ToUpper(s[i+1 : i+3]))
		}
		i += 2
	}
	return b.String()
}

func isHex(c byte) bool {
	return '0' <= c && c <= '9' || 'a' <= c && c <= 'f' || 'A' <= c && c <= 'F'
}

func unhex(c byte) byte {
	switch {
	case '0' <= c && c <= '9':
		return c - '0'
	case 'a' <= c && c <= 'f':
		return c - 'a' + 10
	default:
		return c - 'A' + 10
	}
}

func isUnreserved(c byte) bool {
	return 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || c == '-' || c == '.' || c == '_' || c == '~'
}
