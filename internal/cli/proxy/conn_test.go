package proxy

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os/exec"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/smoothrate/ratelimit/internal/cli/clitest"
)

// These tests hold the proxy's connections to what a hostile client and a
// slow backend must not get from it (file descriptors held, bodies stalled,
// backends hung), driving the built binary as they would.

// rawRequest sends req (a whole HTTP/1.1 request, or its start) on a new
// connection to addr and returns the connection and a reader of it.
func rawConn(t *testing.T, addr string) (net.Conn, *bufio.Reader) {
	t.Helper()
	c, err := net.DialTimeout("tcp", addr, lineTimeout)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c, bufio.NewReader(c)
}

// readResponse reads one response within d.
func readResponse(t *testing.T, c net.Conn, br *bufio.Reader, d time.Duration) (*http.Response, string) {
	t.Helper()
	_ = c.SetReadDeadline(time.Now().Add(d))
	resp, err := http.ReadResponse(br, nil)
	if err != nil {
		t.Fatalf("reading the response: %v", err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	return resp, string(b)
}

// TestProxyRefusedClientHoldsNoFDs: the proxy limited to 2048 file
// descriptors; a client already refused (429) opens 2500 connections, half
// of them sending a keep-alive request and half nothing; another client is
// still served within a second.
func TestProxyRefusedClientHoldsNoFDs(t *testing.T) {
	bin := clitest.Binary(t)
	prlimit, err := exec.LookPath("prlimit")
	if err != nil {
		t.Fatalf("prlimit (util-linux) is needed to limit the proxy's file descriptors: %v", err)
	}
	p := startProxyWith(t, procSetup{wrap: []string{prlimit, "--nofile=2048", "--"}}, bin,
		"--limit", "1/d", "--metrics", "127.0.0.1:0", backend(t).URL)
	if r := get(t, "http://"+p.addr+"/", ""); r.code != 200 {
		t.Fatalf("first request: %d", r.code)
	}
	if r := get(t, "http://"+p.addr+"/", ""); r.code != 429 {
		t.Fatalf("second request: %d, want 429", r.code)
	}
	const attack = 2500
	clitest.HoldConns(t, attack, func(int) string { return p.addr }, func(i int) string {
		if i%2 == 0 {
			return "GET / HTTP/1.1\r\nHost: proxy\r\n\r\n"
		}
		return ""
	})

	// Another client, from another loopback address.
	other := &http.Client{Transport: &http.Transport{DialContext: (&net.Dialer{
		LocalAddr: &net.TCPAddr{IP: net.IPv4(127, 0, 0, 2)}}).DialContext}}
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, "GET", "http://"+p.addr+"/", nil)
	start := time.Now()
	resp, err := other.Do(req)
	if err != nil {
		t.Fatalf("another client, while a refused one holds %d connections: %v after %v", attack, err, time.Since(start))
	}
	resp.Body.Close()
	if resp.StatusCode != 200 {
		t.Errorf("another client: %d, want 200", resp.StatusCode)
	}
	t.Logf("another client served in %v", time.Since(start))
	if line := waitStderrLine(t, p, "over --max-conns-per-client"); !strings.Contains(line, "--max-conns-per-client 256 (from 127.0.0.1)") {
		t.Errorf("the log of the connections over the cap: %q", line)
	}
	m := metricsOf(t, p)
	if !strings.Contains(m, "ratelimit_proxy_connections_refused_total ") || strings.Contains(m, "ratelimit_proxy_connections_refused_total 0\n") {
		t.Errorf("no connection refused over the per-client cap:\n%s", m)
	}
}

// TestProxyTrustedProxyHasNoConnCap: a load balancer carries many clients;
// its connections are not capped.
func TestProxyTrustedProxyHasNoConnCap(t *testing.T) {
	t.Parallel()
	bin := clitest.Binary(t)
	for _, tc := range []struct {
		trusted bool
		want    int // connections served of 8
	}{{false, 3}, {true, 8}} {
		args := []string{"--limit", "100/d", "--max-conns-per-client", "3", backend(t).URL}
		if tc.trusted {
			args = append([]string{"--trusted-proxy", "127.0.0.1"}, args...)
		}
		p := startProxy(t, bin, args...)
		served := 0
		for range 8 {
			// A connection over the cap is reset as soon as it is
			// accepted: the reset may reach the dial, or the read.
			c, err := net.DialTimeout("tcp", p.addr, lineTimeout)
			if err != nil {
				continue
			}
			defer c.Close()
			_, _ = io.WriteString(c, "GET / HTTP/1.1\r\nHost: proxy\r\n\r\n")
			_ = c.SetReadDeadline(time.Now().Add(lineTimeout))
			if resp, err := http.ReadResponse(bufio.NewReader(c), nil); err == nil {
				resp.Body.Close()
				served++
			}
		}
		if served != tc.want {
			t.Errorf("trusted %v, --max-conns-per-client 3: %d of 8 open connections served, want %d", tc.trusted, served, tc.want)
		}
	}
}

// TestProxyTimeouts: a body that stalls is cut off (408) after
// --read-timeout, one that keeps coming is not; a backend that does not
// answer within --upstream-timeout gives 504; an idle connection is closed
// after --idle-timeout; headers past --max-header-bytes get 431.
func TestProxyTimeouts(t *testing.T) {
	t.Parallel()
	bin := clitest.Binary(t)
	var bodies sync.Map // path -> bytes the backend read, or an error
	release := make(chan struct{})
	defer close(release)
	be := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/hang" {
			select {
			case <-release:
			case <-r.Context().Done():
			}
			return
		}
		b, err := io.ReadAll(r.Body)
		if err != nil {
			bodies.Store(r.URL.Path, err.Error())
			return
		}
		bodies.Store(r.URL.Path, len(b))
		fmt.Fprint(w, "backend")
	}))
	defer be.Close()
	p := startProxy(t, bin, "--limit", "1000/d", "--read-timeout", "1s", "--upstream-timeout", "1s",
		"--idle-timeout", "1s", "--max-header-bytes", "16KiB", be.URL)

	t.Run("stalled body", func(t *testing.T) {
		c, br := rawConn(t, p.addr)
		start := time.Now()
		_, _ = io.WriteString(c, "POST /stall HTTP/1.1\r\nHost: proxy\r\nContent-Length: 100\r\n\r\n0123456789")
		resp, _ := readResponse(t, c, br, lineTimeout)
		if el := time.Since(start); resp.StatusCode != 408 || el < 900*time.Millisecond {
			t.Errorf("a body stalled after 10 of 100 bytes: %d after %v, want 408 after --read-timeout 1s", resp.StatusCode, el)
		}
		if v, ok := bodies.Load("/stall"); ok && v == 100 {
			t.Errorf("the backend got the whole body")
		}
	})

	t.Run("slow but steady body", func(t *testing.T) {
		c, br := rawConn(t, p.addr)
		_, _ = io.WriteString(c, "POST /steady HTTP/1.1\r\nHost: proxy\r\nContent-Length: 60\r\n\r\n")
		for range 6 { // 2.4 s in all, each read within the 1 s timeout
			time.Sleep(400 * time.Millisecond) // the client's pace, what is tested
			_, _ = io.WriteString(c, "0123456789")
		}
		resp, body := readResponse(t, c, br, lineTimeout)
		if v, _ := bodies.Load("/steady"); resp.StatusCode != 200 || body != "backend" || v != 60 {
			t.Errorf("a steady body over 2.4 s: %d %q, the backend read %v; want 200 and 60 bytes", resp.StatusCode, body, v)
		}
	})

	t.Run("slow backend", func(t *testing.T) {
		start := time.Now()
		r := get(t, "http://"+p.addr+"/hang", "")
		if el := time.Since(start); r.code != 504 || el > 10*time.Second {
			t.Errorf("a backend that does not answer: %d after %v, want 504 after --upstream-timeout 1s", r.code, el)
		}
		p.waitStderr(t, "outage began")
	})

	t.Run("idle connection", func(t *testing.T) {
		c, br := rawConn(t, p.addr)
		_, _ = io.WriteString(c, "GET /idle HTTP/1.1\r\nHost: proxy\r\n\r\n")
		if resp, _ := readResponse(t, c, br, lineTimeout); resp.StatusCode != 200 {
			t.Fatalf("status %d", resp.StatusCode)
		}
		start := time.Now()
		_ = c.SetReadDeadline(time.Now().Add(lineTimeout))
		if _, err := br.ReadByte(); err != io.EOF {
			t.Errorf("idle keep-alive connection: read %v, want EOF (closed by the proxy)", err)
		}
		if el := time.Since(start); el < 900*time.Millisecond || el > 10*time.Second {
			t.Errorf("closed after %v idle, want about --idle-timeout 1s", el)
		}
	})

	t.Run("big headers", func(t *testing.T) {
		for _, tc := range []struct {
			size, want int
		}{{8 << 10, 200}, {40 << 10, 431}} {
			req, _ := http.NewRequest("GET", "http://"+p.addr+"/h", nil)
			req.Header.Set("X-Big", strings.Repeat("x", tc.size))
			resp, err := client.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			resp.Body.Close()
			if resp.StatusCode != tc.want {
				t.Errorf("a %d-byte header: %d, want %d", tc.size, resp.StatusCode, tc.want)
			}
		}
	})
}

// TestProxyUpstreamReusesConnections: 400 requests, 8 at a time, open about
// 8 connections to the backend, not one per request (Go's default idle
// pool of 2 per host opened hundreds, leaving as many in TIME_WAIT).
func TestProxyUpstreamReusesConnections(t *testing.T) {
	t.Parallel()
	bin := clitest.Binary(t)
	var opened atomic.Int64
	be := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprint(w, "backend")
	}))
	be.Config.ConnState = func(_ net.Conn, s http.ConnState) {
		if s == http.StateNew {
			opened.Add(1)
		}
	}
	be.Start()
	defer be.Close()
	p := startProxy(t, bin, "--limit", "100000/d", be.URL)
	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() {
			for range 50 {
				if r := get(t, "http://"+p.addr+"/", ""); r.code != 200 {
					t.Errorf("status %d", r.code)
				}
			}
		})
	}
	wg.Wait()
	if n := opened.Load(); n > 16 {
		t.Errorf("400 requests, 8 at a time, opened %d connections to the backend; want at most 16", n)
	}
}
