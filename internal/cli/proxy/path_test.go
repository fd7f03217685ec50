package proxy

import (
	"net/url"
	"strings"
	"testing"
)

// FuzzCleanPath: whatever the path, its clean form is a fixed point (the
// backend, given it, keys it the same), starts with "/", and has no empty,
// "." or ".." segment left to escape a route's key with.
func FuzzCleanPath(f *testing.F) {
	for _, s := range []string{"/", "//a", "/./a", "/b/../a", "/%61", "/a/", "/%2e%2e/x", "/%2F/", "/%zz", "/a%", "/é", "/..", "/a//b/./c/../d/"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		u, err := url.Parse(s)
		if err != nil || u.Opaque != "" || u.Host != "" || u.Scheme != "" {
			return
		}
		cleanPath(u)
		once := u.EscapedPath()
		if !strings.HasPrefix(once, "/") {
			t.Fatalf("%q -> %q: not absolute", s, once)
		}
		for _, seg := range strings.Split(once[1:], "/")[:max(0, strings.Count(once[1:], "/"))] {
			if seg == "" || seg == "." || seg == ".." {
				t.Fatalf("%q -> %q: segment %q left", s, once, seg)
			}
		}
		last := once[strings.LastIndexByte(once, '/')+1:]
		if last == "." || last == ".." {
			t.Fatalf("%q -> %q: ends in %q", s, once, last)
		}
		again, err := url.Parse(once)
		if err != nil {
			t.Fatalf("%q -> %q: %v", s, once, err)
		}
		cleanPath(again)
		if again.EscapedPath() != once || again.Path != u.Path {
			t.Fatalf("%q -> %q (%q) -> %q (%q): not a fixed point", s, once, u.Path, again.EscapedPath(), again.Path)
		}
	})
}
