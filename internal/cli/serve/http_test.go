package serve

import (
	"fmt"
	"net"
	"net/http"
	"strings"
	"testing"
)

// TestMaxHeaderBytesHeld: --max-header-bytes is the most a request's line
// and headers may take, whatever the size, where net/http alone lets 4096
// bytes more through (its MaxHeaderBytes plus bufio's slop): a request a
// little under passes, a little over gets 431, at sizes above and below
// 4 KiB.
func TestMaxHeaderBytesHeld(t *testing.T) {
	for _, size := range []int{1 << 10, 2 << 10, 4 << 10, 16 << 10, DefaultMaxHeaderBytes} {
		t.Run(fmt.Sprint(size), func(t *testing.T) {
			f := HTTPFlags{IdleTimeout: DefaultIdleTimeout, ReadTimeout: DefaultReadTimeout, MaxHeaderBytes: int64(size)}
			ln, err := net.Listen("tcp", "127.0.0.1:0")
			if err != nil {
				t.Fatal(err)
			}
			s := f.Apply(&http.Server{Handler: http.HandlerFunc(func(http.ResponseWriter, *http.Request) {})})
			go s.Serve(ln)
			t.Cleanup(func() { s.Close() })
			for _, c := range []struct{ value, want int }{{size - 300, 200}, {size + 100, 431}} {
				req, _ := http.NewRequest("GET", "http://"+ln.Addr().String()+"/h", nil)
				req.Header.Set("X-Big", strings.Repeat("x", c.value))
				resp, err := http.DefaultClient.Do(req)
				if err != nil {
					t.Fatal(err)
				}
				resp.Body.Close()
				if resp.StatusCode != c.want {
					t.Errorf("a header of %d bytes under --max-header-bytes %d: %d, want %d", c.value, size, resp.StatusCode, c.want)
				}
			}
		})
	}
}
