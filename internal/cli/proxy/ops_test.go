package proxy

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/smoothrate/ratelimit/internal/cli/clitest"
	"github.com/smoothrate/ratelimit/internal/cli/command"
	"github.com/smoothrate/ratelimit/internal/redistest"
	"github.com/smoothrate/ratelimit/internal/tlstest"
)

// These tests hold the proxy to what an operator relies on: a Redis set up
// wrong never failing open, outage logs, paths and forwarding headers that
// cannot be spoofed, and reload, driving the built binary.

// runProxyEnv runs the proxy to its end (it is expected to exit at start)
// with more environment variables.
func runProxyEnv(t *testing.T, bin string, env []string, args ...string) (stderr string, code int) {
	t.Helper()
	return clitest.RunToExit(t, bin, env, lineTimeout, append([]string{"proxy", "--listen", "127.0.0.1:0"}, args...)...)
}

// TestProxyRedisSetUpWrong: a Redis that answers but is set up wrong makes
// the proxy exit 2 at start, --fail-open or not; a password from a file or
// $REDIS_PASSWORD works; set up wrong later, requests get 503, never
// unlimited.
func TestProxyRedisSetUpWrong(t *testing.T) {
	t.Parallel()
	bin := clitest.Binary(t)
	srv := redistest.Start(t)
	srv.CLI("CONFIG", "SET", "requirepass", "s3cret")
	// A user that PING lets in but that may not run the limiter's
	// script: only the start-up decision finds it.
	srv.CLI("-a", "s3cret", "--no-auth-warning", "ACL", "SETUSER", "noscript", "on", ">pw", "~*", "+@all", "-evalsha", "-eval")
	be := backend(t).URL
	host := srv.Addr()
	dir := t.TempDir()
	pwFile := filepath.Join(dir, "pw")
	if err := os.WriteFile(pwFile, []byte("s3cret\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, failOpen := range []bool{false, true} {
		for _, tc := range []struct {
			name string
			env  []string
			args []string
		}{
			{"no password", nil, []string{"--redis", "redis://" + host + "/0"}},
			{"wrong password", nil, []string{"--redis", "redis://:nope@" + host + "/0"}},
			{"wrong REDIS_PASSWORD", []string{"REDIS_PASSWORD=nope"}, []string{"--redis", "redis://" + host + "/0"}},
			{"no such database", nil, []string{"--redis", "redis://" + host + "/99", "--redis-password-file", pwFile}},
			{"cluster URL for one server", nil, []string{"--redis", "redis+cluster://" + host, "--redis-password-file", pwFile}},
			{"a user that may not run the script", nil, []string{"--redis", "redis://noscript:pw@" + host + "/0"}},
		} {
			args := append(tc.args, "--limit", "10/d", be)
			if failOpen {
				args = append([]string{"--fail-open"}, args...)
			}
			stderr, code := runProxyEnv(t, bin, tc.env, args...)
			if code != command.ExitUsage || !strings.HasPrefix(stderr, "ratelimit proxy: redis at ") || !strings.Contains(stderr, "set up wrong") {
				t.Errorf("%s (fail-open %v): status %d, stderr %q; want 2 and the reason", tc.name, failOpen, code, stderr)
			}
			if strings.Contains(stderr, "s3cret") {
				t.Errorf("%s: the password is in the message: %q", tc.name, stderr)
			}
		}
	}

	viaFile := startProxy(t, bin, "--fail-open", "--redis", "redis://"+host+"/0", "--redis-password-file", pwFile, "--limit", "10/d", be)
	viaEnv := startProxyWith(t, procSetup{env: []string{"REDIS_PASSWORD=s3cret"}}, bin,
		"--fail-open", "--redis", "redis://"+host+"/0", "--limit", "10/d", be)
	for _, p := range []*proxyProc{viaFile, viaEnv} {
		if r := get(t, "http://"+p.addr+"/", ""); r.code != 200 || r.rateLimit == "" {
			t.Fatalf("with the right password: %d, RateLimit %q", r.code, r.rateLimit)
		}
	}
	// The password changes under the running proxies, and their
	// connections are dropped: they reconnect with the old one.
	srv.CLI("-a", "s3cret", "--no-auth-warning", "CONFIG", "SET", "requirepass", "changed")
	srv.CLI("-a", "changed", "--no-auth-warning", "CLIENT", "KILL", "TYPE", "normal")
	for _, p := range []*proxyProc{viaFile, viaEnv} {
		for range 3 {
			if r := get(t, "http://"+p.addr+"/", ""); r.code != 503 {
				t.Errorf("--fail-open, Redis's password changed: %d %q, want 503 (set up wrong never fails open)", r.code, r.body)
			}
		}
		p.waitStderr(t, "set up wrong: never fails open")
	}
}

// TestProxyRedisTLS: proxies share their limits through a Redis that
// serves TLS only and requires a client certificate, with --redis rediss://
// and the --redis-tls-* flags: the limit holds across two proxies and its
// keys are there. Without the certificate the proxy does not start, even
// with --fail-open; the flags without --redis are a usage error.
func TestProxyRedisTLS(t *testing.T) {
	t.Parallel()
	bin := clitest.Binary(t)
	srv, files := redistest.StartTLSClientAuth(t, "proxy")
	cliCert, cliKey, caFile := files.ClientCert, files.ClientKey, files.CA
	be := backend(t).URL
	url := "rediss://" + srv.TLSAddr() + "/0"
	tlsArgs := []string{"--redis", url, "--redis-tls-cert", cliCert, "--redis-tls-key", cliKey, "--redis-tls-ca", caFile}
	a := startProxy(t, bin, append(tlsArgs, "--limit", "3/h", be)...)
	b := startProxy(t, bin, append(tlsArgs, "--limit", "3/h", be)...)
	var codes []int
	for _, p := range []*proxyProc{a, b, a, b} {
		codes = append(codes, get(t, "http://"+p.addr+"/", "").code)
	}
	if want := []int{200, 200, 200, 429}; fmt.Sprint(codes) != fmt.Sprint(want) {
		t.Errorf("4 requests through two proxies sharing 3/h: %v, want %v", codes, want)
	}
	if keys := srv.CLI("KEYS", "*"); keys == "" {
		t.Error("no key in the TLS Redis")
	}
	// A handshake refused is Redis set up wrong for this proxy, not an
	// outage: --fail-open must not pass requests unlimited on it.
	stderr, code := runProxyEnv(t, bin, nil, "--fail-open", "--redis", url, "--redis-tls-ca", caFile, "--limit", "3/h", be)
	if code != command.ExitUsage || !strings.Contains(stderr, "set up wrong") || !strings.Contains(stderr, "certificate required") {
		t.Errorf("without the client certificate: status %d, stderr %q; want 2, set up wrong, and why", code, stderr)
	}
	// Nor is a redis:// URL for the TLS port, which closes the
	// connection as a server going down would.
	stderr, code = runProxyEnv(t, bin, nil, "--fail-open", "--redis", "redis://"+srv.TLSAddr()+"/0", "--limit", "3/h", be)
	if code != command.ExitUsage || !strings.Contains(stderr, "set up wrong: its port speaks TLS: use a rediss:// URL") {
		t.Errorf("redis:// for the TLS port: status %d, stderr %q; want 2 and rediss://", code, stderr)
	}
	stderr, code = runProxyEnv(t, bin, nil, "--redis-tls-ca", caFile, "--limit", "3/h", be)
	if code != command.ExitUsage || !strings.Contains(stderr, "--redis-tls-* flags apply with --redis rediss://") {
		t.Errorf("--redis-tls-ca without --redis: status %d, stderr %q", code, stderr)
	}
	// Nor once it runs: Redis no longer trusting the proxy's certificate
	// (its CA replaced) gets 503 at once, not a wait for the store's
	// timeout taken for an outage, on which --fail-open would pass.
	open := startProxy(t, bin, append(tlsArgs, "--fail-open", "--limit", "1000/h", "--key", "route", be)...)
	if r := get(t, "http://"+open.addr+"/", ""); r.code != 200 {
		t.Fatalf("--fail-open proxy before: %d", r.code)
	}
	other := tlstest.NewCA(t, "another CA").WriteCA(t, t.TempDir(), "other.crt")
	srv.CLI("CONFIG", "SET", "tls-ca-cert-file", other)
	srv.CLI("CLIENT", "KILL", "TYPE", "normal")
	for i := range 3 {
		if r := get(t, "http://"+open.addr+"/", ""); r.code != 503 {
			t.Errorf("request %d, the proxy's certificate refused: %d, want 503 (never fail open)", i, r.code)
		}
	}
	if line := waitStderrLine(t, open, "outage began"); !strings.Contains(line, "set up wrong") || !strings.Contains(line, "unknown certificate authority") {
		t.Errorf("log %q: want set up wrong and why", line)
	}
	srv.CLI("CONFIG", "SET", "tls-ca-cert-file", caFile)
	if r := get(t, "http://"+open.addr+"/", ""); r.code != 200 {
		t.Errorf("the CA back: %d", r.code)
	}
}

// outageLine matches the log of an outage's end.
var outageEndRE = regexp.MustCompile(`outage ended after [0-9.]+m?s: (\d+) requests? (failed closed \(503\)|failed open)`)

// TestProxyOutagesLogged: Redis goes down and comes back twice; each
// outage is logged when it begins, with the reason, and when it ends, with
// its duration and the requests it failed. The backend's outages too.
func TestProxyOutagesLogged(t *testing.T) {
	t.Parallel()
	bin := clitest.Binary(t)
	srv := redistest.Start(t)
	be := backend(t)
	for _, failOpen := range []bool{false, true} {
		args := []string{"--limit", "1000/d", "--redis", clitest.RedisURL(srv), be.URL}
		want := "failed closed (503)"
		if failOpen {
			args, want = append([]string{"--fail-open"}, args...), "failed open"
		}
		p := startProxy(t, bin, args...)
		for round := range 2 {
			if r := get(t, "http://"+p.addr+"/", ""); r.code != 200 {
				t.Fatalf("round %d, Redis up: %d", round, r.code)
			}
			srv.Kill()
			for range 3 {
				get(t, "http://"+p.addr+"/", "")
			}
			began := waitStderrLine(t, p, "outage began")
			if !strings.Contains(began, "store (redis "+srv.Addr()+")") || !strings.Contains(began, "connect") || !strings.Contains(began, want) {
				t.Errorf("round %d: outage start %q: want the store, the reason and %q", round, began, want)
			}
			srv.Restart()
			for tries := 0; ; tries++ {
				if r := get(t, "http://"+p.addr+"/", ""); r.code == 200 && r.rateLimit != "" {
					break
				}
				if tries == 100 {
					t.Fatal("still failing 100 requests after Redis restarted")
				}
			}
			ended := waitStderrLine(t, p, "outage ended")
			m := outageEndRE.FindStringSubmatch(ended)
			if m == nil {
				m = []string{"", "0", ""}
			}
			t.Logf("%s\n%s", began, ended)
			if n, _ := strconv.Atoi(m[1]); m == nil || m[2] != want || n < 3 {
				t.Errorf("round %d: outage end %q: want its duration and at least 3 requests %s", round, ended, want)
			}
		}
	}

	t.Run("backend", func(t *testing.T) {
		var down atomic.Bool
		flaky := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if down.Load() { // hang up without an answer
				c, _, _ := http.NewResponseController(w).Hijack()
				c.Close()
				return
			}
			fmt.Fprint(w, "backend")
		}))
		defer flaky.Close()
		p := startProxy(t, bin, "--limit", "1000/d", flaky.URL)
		for round := range 2 {
			down.Store(true)
			for range 3 {
				if r := get(t, "http://"+p.addr+"/", ""); r.code != 502 {
					t.Errorf("backend hanging up: %d, want 502", r.code)
				}
			}
			began := waitStderrLine(t, p, "outage began")
			if !strings.Contains(began, "backend "+flaky.URL) {
				t.Errorf("round %d: %q does not name the backend", round, began)
			}
			down.Store(false)
			if r := get(t, "http://"+p.addr+"/", ""); r.code != 200 {
				t.Errorf("backend back: %d", r.code)
			}
			if ended := waitStderrLine(t, p, "outage ended"); !strings.Contains(ended, "3 requests answered 502") {
				t.Errorf("round %d: outage end %q: want 3 requests answered 502", round, ended)
			}
		}
	})
}

// waitStderrLine is waitStderr returning the line.
func waitStderrLine(t *testing.T, p *proxyProc, s string) string {
	t.Helper()
	deadline := time.After(lineTimeout)
	for {
		select {
		case line, ok := <-p.stderr:
			if !ok {
				t.Fatalf("stderr closed before a line with %q", s)
			}
			if strings.Contains(line, s) {
				return line
			}
		case <-deadline:
			t.Fatalf("no stderr line with %q after %v", s, lineTimeout)
		}
	}
}

// echo is a backend that answers with what it got: the path and the
// forwarding headers.
type echoed struct {
	Path, RequestURI, XRealIP, XFF, Forwarded, XFHost, XFProto, XFPort string
}

func echoBackend(t *testing.T) *httptest.Server {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_ = json.NewEncoder(w).Encode(echoed{r.URL.Path, r.RequestURI, r.Header.Get("X-Real-Ip"),
			strings.Join(r.Header.Values("X-Forwarded-For"), "|"), strings.Join(r.Header.Values("Forwarded"), "|"),
			r.Header.Get("X-Forwarded-Host"), r.Header.Get("X-Forwarded-Proto"), r.Header.Get("X-Forwarded-Port")})
	}))
	t.Cleanup(srv.Close)
	return srv
}

// rawGet sends "GET target" as written (no client library cleans it) with
// headers, and returns the status and what the echo backend got.
func rawGet(t *testing.T, addr, target string, headers ...string) (int, echoed) {
	t.Helper()
	c, br := rawConn(t, addr)
	req := "GET " + target + " HTTP/1.1\r\nHost: example.test\r\n"
	for _, h := range headers {
		req += h + "\r\n"
	}
	_, _ = io.WriteString(c, req+"Connection: close\r\n\r\n")
	resp, body := readResponse(t, c, br, lineTimeout)
	var e echoed
	if resp.StatusCode == 200 {
		if err := json.Unmarshal([]byte(body), &e); err != nil {
			t.Fatalf("echo: %v: %q", err, body)
		}
	}
	return resp.StatusCode, e
}

// TestProxyPathsCannotEscape: --key route keys on the cleaned path, and the
// backend gets that path.
func TestProxyPathsCannotEscape(t *testing.T) {
	t.Parallel()
	bin := clitest.Binary(t)
	p := startProxy(t, bin, "--limit", "1/d", "--key", "route", echoBackend(t).URL)
	code, e := rawGet(t, p.addr, "//a")
	if code != 200 || e.Path != "/a" || e.RequestURI != "/a" {
		t.Fatalf("//a: %d, the backend got %q (%q); want 200 and /a", code, e.Path, e.RequestURI)
	}
	for _, target := range []string{"/a", "/./a", "/b/../a", "/%61", "/b/%2e%2e/a", "//./a", "/../a"} {
		if code, _ := rawGet(t, p.addr, target); code != 429 {
			t.Errorf("%s after //a: %d, want 429 (the same route)", target, code)
		}
	}
	for _, tc := range []struct{ target, path, uri string }{
		{"/c/", "/c/", "/c/"},                    // the trailing slash is kept
		{"/d/x/..//y/", "/d/y/", "/d/y/"},        // cleaned, slash kept
		{"/e%2Fx", "/e/x", "/e%2Fx"},             // an escaped slash is no separator
		{"/f%7e%41?q=1", "/f~A", "/f~A?q=1"},     // unreserved escapes decoded, the query kept
		{"/g%c3%a9", "/gé", "/g%C3%A9"},          // others upper-cased
		{"/h/%2e%2e%2f..%2Fz", "/h/../../z", ""}, // %2f stays: not a separator
	} {
		code, e := rawGet(t, p.addr, tc.target)
		if code != 200 || e.Path != tc.path || tc.uri != "" && e.RequestURI != tc.uri {
			t.Errorf("%s: %d, the backend got path %q (request URI %q), want %q (%q)", tc.target, code, e.Path, e.RequestURI, tc.path, tc.uri)
		}
	}
}

// TestProxyForwardingHeaders: what the client writes in X-Real-IP,
// X-Forwarded-* and Forwarded never reaches the backend; what does is what
// the proxy knows, with the chain of a trusted proxy.
func TestProxyForwardingHeaders(t *testing.T) {
	t.Parallel()
	bin := clitest.Binary(t)
	be := echoBackend(t)
	spoof := []string{"X-Real-IP: 6.6.6.6", "X-Forwarded-For: 6.6.6.6", "Forwarded: for=6.6.6.6;proto=https",
		"X-Forwarded-Host: evil.test", "X-Forwarded-Proto: https", "X-Forwarded-Port: 1"}

	direct := startProxy(t, bin, "--limit", "10/d", be.URL)
	code, e := rawGet(t, direct.addr, "/", spoof...)
	want := echoed{Path: "/", RequestURI: "/", XRealIP: "127.0.0.1", XFF: "127.0.0.1",
		Forwarded: "for=127.0.0.1;host=example.test;proto=http", XFHost: "example.test", XFProto: "http"}
	if code != 200 || e != want {
		t.Errorf("a client's own forwarding headers:\n got %+v\nwant %+v", e, want)
	}

	behind := startProxy(t, bin, "--limit", "10/d", "--trusted-proxy", "127.0.0.1", "--trusted-proxy", "10.0.0.0/8", be.URL)
	code, e = rawGet(t, behind.addr, "/",
		"X-Real-IP: 6.6.6.6", "X-Forwarded-For: 6.6.6.6, 198.51.100.7, 10.1.1.1", "X-Forwarded-Proto: https",
		"X-Forwarded-Host: api.test", "Forwarded: for=6.6.6.6")
	want = echoed{Path: "/", RequestURI: "/", XRealIP: "198.51.100.7", XFF: "198.51.100.7, 10.1.1.1, 127.0.0.1",
		Forwarded: "for=198.51.100.7;host=api.test;proto=https, for=10.1.1.1, for=127.0.0.1", XFHost: "api.test", XFProto: "https"}
	if code != 200 || e != want {
		t.Errorf("behind trusted proxies:\n got %+v\nwant %+v", e, want)
	}
}

// TestProxyReload: SIGHUP under load re-reads --config: no request fails,
// the new limits apply from the line that says so, and a bad file keeps the
// old limits and says why.
func TestProxyReload(t *testing.T) {
	t.Parallel()
	bin := clitest.Binary(t)
	conf := filepath.Join(t.TempDir(), "limits")
	write := func(s string) {
		t.Helper()
		if err := os.WriteFile(conf, []byte(s), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write("# the load's limit\n--limit 1000000/d\n--key ip\n")
	p := startProxy(t, bin, "--config", conf, backend(t).URL)

	var served, failed atomic.Int64
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() {
			for {
				select {
				case <-stop:
					return
				default:
				}
				if r := get(t, "http://"+p.addr+"/load", ""); r.code == 200 {
					served.Add(1)
				} else {
					failed.Add(1)
				}
			}
		})
	}
	for i := range 10 {
		write(fmt.Sprintf("--limit %d/d --algorithm %s\n", 1000000+i, []string{"gcra", "token-bucket"}[i%2]))
		if err := p.cmd.Process.Signal(syscall.SIGHUP); err != nil {
			t.Fatal(err)
		}
		if line := waitStderrLine(t, p, "SIGHUP"); !strings.Contains(line, "reloaded") || !strings.Contains(line, fmt.Sprintf("%d/24h0m0s", 1000000+i)) {
			t.Errorf("reload %d: %q", i, line)
		}
	}
	close(stop)
	wg.Wait()
	if failed.Load() != 0 || served.Load() == 0 {
		t.Errorf("under 10 reloads: %d requests served, %d failed; want none failed", served.Load(), failed.Load())
	}

	// The new limits apply: 2 a day per X-K header.
	write("--limit 2/d --key header:X-K\n")
	_ = p.cmd.Process.Signal(syscall.SIGHUP)
	waitStderrLine(t, p, "reloaded")
	codes := func() []int {
		var cs []int
		for range 3 {
			req, _ := http.NewRequest("GET", "http://"+p.addr+"/", nil)
			req.Header.Set("X-K", "k1")
			resp, err := client.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			resp.Body.Close()
			cs = append(cs, resp.StatusCode)
		}
		return cs
	}
	if got := fmt.Sprint(codes()); got != "[200 200 429]" {
		t.Errorf("after reloading 2/d per X-K: %s, want [200 200 429]", got)
	}
	// A bad file keeps them.
	for _, bad := range []string{"--limit 2/fortnight\n", "--listen :80\n", "--limit 5/d extra\n", ""} {
		write(bad)
		_ = p.cmd.Process.Signal(syscall.SIGHUP)
		if line := waitStderrLine(t, p, "SIGHUP"); !strings.Contains(line, "not reloaded") || !strings.Contains(line, "keeping 2/24h0m0s (burst 2) per header:X-K") {
			t.Errorf("bad file %q: %q; want it refused and the old limits kept", bad, line)
		}
	}
	if got := fmt.Sprint(codes()); got != "[429 429 429]" {
		t.Errorf("after bad files: %s, want the old limits still refusing: [429 429 429]", got)
	}
	// SIGTERM as before.
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	if code := p.waitExit(t); code != 0 {
		t.Errorf("SIGTERM: exit %d", code)
	}
}

// TestProxyRedisNotRedis: --redis naming a port where another server
// answers (here the backend, HTTP) is set up wrong: exit 2, --fail-open or
// not, not a warning that Redis does not answer and a proxy that then
// passes every request unlimited.
func TestProxyRedisNotRedis(t *testing.T) {
	t.Parallel()
	be := backend(t).URL
	stderr, code := runProxyEnv(t, clitest.Binary(t), nil, "--fail-open", "--redis", "redis://"+strings.TrimPrefix(be, "http://")+"/0", "--limit", "3/h", be)
	if code != command.ExitUsage || !strings.Contains(stderr, "does not speak Redis's protocol (a wrong port?)") || !strings.Contains(stderr, "HTTP/1.1 400") {
		t.Errorf("status %d, stderr %q; want 2, and what answered", code, stderr)
	}
}

// TestProxyWarnsOfEvictions: a Redis that may evict the limits' keys when
// full gets a warning at start.
func TestProxyWarnsOfEvictions(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t, "--maxmemory", "30mb", "--maxmemory-policy", "allkeys-lru")
	p := startProxy(t, clitest.Binary(t), "--redis", clitest.RedisURL(srv), "--limit", "3/h", backend(t).URL)
	line := waitStderrLine(t, p, "warning")
	if want := "ratelimit proxy: warning: Redis at " + srv.Addr() + " evicts keys when it is full (maxmemory 30.00M, maxmemory-policy allkeys-lru)"; !strings.Contains(line, want) {
		t.Errorf("%q, want %q", line, want)
	}
}
