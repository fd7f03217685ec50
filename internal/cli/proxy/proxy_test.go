package proxy

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/smoothrate/ratelimit/internal/cli/clitest"
	"github.com/smoothrate/ratelimit/internal/cli/command"
	"github.com/smoothrate/ratelimit/internal/cli/metrics/metricstest"
	"github.com/smoothrate/ratelimit/internal/redistest"
)

func TestMain(m *testing.M) { clitest.Main(m) }

// These tests run the built binary as a user would: a backend on a free
// loopback port, the proxy in front of it, a real HTTP client. Limits have
// long periods (a day) so that nothing refills while a test runs, however
// slow the machine: the counts they check are exact.

// proxyProc is a running `ratelimit proxy`.
type proxyProc struct {
	cmd     *exec.Cmd
	addr    string // host:port it serves on
	metrics string // host:port of /metrics, if asked
	stderr  chan string
	exited  chan int
	started string // the line it printed when it was ready
}

// lineTimeout bounds every wait for the proxy to say something.
const lineTimeout = 30 * time.Second

var listeningRE = regexp.MustCompile(`^ratelimit proxy: listening on http://([^,]+), .*?(?:metrics on http://([^/]+)/metrics)?$`)

// startProxy starts the proxy and waits for its start-up line, which names
// the address it got (the tests listen on port 0).
func startProxy(t *testing.T, bin string, args ...string) *proxyProc {
	t.Helper()
	return startProxyWith(t, procSetup{}, bin, args...)
}

// procSetup is how startProxyWith runs the binary: under a wrapper command
// (prlimit), with more environment variables, in a directory.
type procSetup struct {
	wrap []string
	env  []string
	dir  string
}

func startProxyWith(t *testing.T, ps procSetup, bin string, args ...string) *proxyProc {
	t.Helper()
	argv := append(append(append([]string{}, ps.wrap...), bin, "proxy", "--listen", "127.0.0.1:0"), args...)
	cmd := exec.Command(argv[0], argv[1:]...)
	if ps.env != nil {
		cmd.Env = append(os.Environ(), ps.env...)
	}
	cmd.Dir = ps.dir
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	stderr, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	p := &proxyProc{cmd: cmd, stderr: make(chan string, 1000), exited: make(chan int, 1)}
	first := make(chan string, 1)
	var readers sync.WaitGroup
	readers.Add(2)
	go func() {
		defer readers.Done()
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			select {
			case first <- sc.Text():
			default:
				t.Errorf("proxy printed a second line on stdout: %q", sc.Text())
			}
		}
	}()
	go func() {
		defer readers.Done()
		defer close(p.stderr)
		sc := bufio.NewScanner(stderr)
		for sc.Scan() {
			select {
			case p.stderr <- sc.Text():
			default: // nobody reads: drop
			}
		}
	}()
	go func() {
		readers.Wait() // Wait must not close the pipes before they are read
		err := cmd.Wait()
		code := 0
		if exit, ok := err.(*exec.ExitError); ok {
			code = exit.ExitCode()
		} else if err != nil {
			code = -1
		}
		p.exited <- code
	}()
	t.Cleanup(func() { p.kill() })
	select {
	case line := <-first:
		m := listeningRE.FindStringSubmatch(line)
		if m == nil {
			t.Fatalf("start-up line %q does not name the address", line)
		}
		p.addr, p.metrics, p.started = m[1], m[2], line
		t.Logf("%s", line)
	case code := <-p.exited:
		t.Fatalf("proxy exited with status %d before listening; stderr: %s", code, drain(p.stderr))
	case <-time.After(lineTimeout):
		t.Fatalf("no start-up line after %v", lineTimeout)
	}
	return p
}

// kill ends the process if it still runs, and waits for it.
func (p *proxyProc) kill() {
	select {
	case code := <-p.exited:
		p.exited <- code
	default:
		_ = p.cmd.Process.Kill()
		p.exited <- <-p.exited
	}
}

// waitExit waits for the process to end and returns its status.
func (p *proxyProc) waitExit(t *testing.T) int {
	t.Helper()
	select {
	case code := <-p.exited:
		p.exited <- code
		return code
	case <-time.After(lineTimeout):
		t.Fatalf("proxy still running after %v", lineTimeout)
		return -1
	}
}

// waitStderr waits for a line of stderr containing s.
func (p *proxyProc) waitStderr(t *testing.T, s string) {
	t.Helper()
	waitStderrLine(t, p, s)
}

func drain(ch chan string) string {
	var b strings.Builder
	for {
		select {
		case l, ok := <-ch:
			if !ok {
				return b.String()
			}
			b.WriteString(l + "\n")
		case <-time.After(time.Second):
			return b.String()
		}
	}
}

// client is shared by the tests: enough idle connections for the
// concurrency they use.
var client = &http.Client{
	Transport: &http.Transport{MaxIdleConnsPerHost: 64},
	Timeout:   lineTimeout,
}

// result is what a client saw of one response.
type result struct {
	code                  int
	body                  string
	rateLimit, policy, ra string
	contentType           string
}

func get(t *testing.T, url, xff string) result {
	t.Helper()
	req, err := http.NewRequest("GET", url, nil)
	if err != nil {
		t.Fatal(err)
	}
	if xff != "" {
		req.Header.Set("X-Forwarded-For", xff)
	}
	resp, err := client.Do(req)
	if err != nil {
		t.Errorf("GET %s: %v", url, err)
		return result{}
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return result{code: resp.StatusCode, body: string(b), rateLimit: resp.Header.Get("RateLimit"),
		policy: resp.Header.Get("RateLimit-Policy"), ra: resp.Header.Get("Retry-After"), contentType: resp.Header.Get("Content-Type")}
}

var rateLimitRE = regexp.MustCompile(`^"default";r=(\d+)(?:;t=(\d+))?$`)

// checkRefusal checks that a 429 carries headers a client can use.
func checkRefusal(t *testing.T, r result, policy string) {
	t.Helper()
	ra, err := strconv.Atoi(r.ra)
	if err != nil || ra < 1 {
		t.Errorf("429 with Retry-After %q", r.ra)
	}
	m := rateLimitRE.FindStringSubmatch(r.rateLimit)
	if m == nil || m[1] != "0" || m[2] == "" {
		t.Errorf("429 with RateLimit %q", r.rateLimit)
	} else if tt, _ := strconv.Atoi(m[2]); tt > ra {
		t.Errorf("RateLimit t=%d later than Retry-After %d", tt, ra)
	}
	if r.policy != policy {
		t.Errorf("429 with RateLimit-Policy %q, want %q", r.policy, policy)
	}
	if r.contentType != "application/problem+json" || !strings.Contains(r.body, "quota-exceeded") {
		t.Errorf("429 body %q (%s)", r.body, r.contentType)
	}
}

// backend answers "backend" to everything.
func backend(t *testing.T) *httptest.Server {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprint(w, "backend")
	}))
	t.Cleanup(srv.Close)
	return srv
}

// hammer sends perClient requests for each of clients client IPs (through
// X-Forwarded-For, the proxy trusting loopback) over the proxies in turn,
// 8 at a time per client, and returns the number of 200s per client.
func hammer(t *testing.T, proxies []*proxyProc, clients, perClient int, policy string) []int {
	t.Helper()
	ok := make([]int, clients)
	var mu sync.Mutex
	var wg sync.WaitGroup
	for c := range clients {
		ip := fmt.Sprintf("198.51.100.%d", c+1)
		work := make(chan int)
		for range 8 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for i := range work {
					p := proxies[i%len(proxies)]
					r := get(t, "http://"+p.addr+"/x", ip)
					switch r.code {
					case 200:
						if r.body != "backend" || r.policy != policy || !rateLimitRE.MatchString(r.rateLimit) {
							t.Errorf("200 with body %q, RateLimit-Policy %q, RateLimit %q", r.body, r.policy, r.rateLimit)
						}
						mu.Lock()
						ok[c]++
						mu.Unlock()
					case 429:
						checkRefusal(t, r, policy)
					default:
						t.Errorf("status %d: %s", r.code, r.body)
					}
				}
			}()
		}
		go func() {
			for i := range perClient {
				work <- i
			}
			close(work)
		}()
	}
	wg.Wait()
	return ok
}

func metricsOf(t *testing.T, p *proxyProc) string {
	t.Helper()
	r := get(t, "http://"+p.metrics+"/metrics", "")
	if r.code != 200 {
		t.Fatalf("/metrics: %d", r.code)
	}
	return r.body
}

func TestProxy(t *testing.T) {
	t.Parallel()
	bin := clitest.Binary(t)

	t.Run("bad flags", func(t *testing.T) {
		t.Parallel()
		for _, tc := range []struct {
			args []string
			msg  string
		}{
			{[]string{"--listen", ":0", "--limit", "10/min"}, "missing TARGET_URL"},
			{[]string{"--listen", ":0", "--limit", "10/min", "ftp://x"}, "TARGET_URL"},
			{[]string{"--limit", "10/min", "http://x"}, "--listen is required"},
			{[]string{"--listen", ":0", "http://x"}, "--limit is required"},
			{[]string{"--listen", ":0", "--limit", "10", "http://x"}, "want COUNT/PERIOD"},
			{[]string{"--listen", ":0", "--limit", "0/s", "http://x"}, "at least 1"},
			{[]string{"--listen", ":0", "--limit", "99999999999999999999/min", "http://x"}, `--limit "99999999999999999999/min": count "99999999999999999999": too large`},
			{[]string{"--listen", ":0", "--limit", "10/s", "--idle-timeout", "0s", "http://x"}, "--idle-timeout"},
			{[]string{"--listen", ":0", "--limit", "10/s", "--max-header-bytes", "12", "http://x"}, `invalid value "12" for flag -max-header-bytes: want between 1KiB and 1GiB`},
			{[]string{"--listen", ":0", "--limit", "10/s", "--drain", "-1s", "http://x"}, "--drain -1s"},
			{[]string{"--listen", ":0", "--limit", "10/s", "--max-conns-per-client", "-1", "http://x"}, "--max-conns-per-client"},
			{[]string{"--listen", ":0", "--limit", "10/s", "--config", "/nonexistent", "http://x"}, "--limit is read from --config"},
			{[]string{"--listen", ":0", "--config", "/nonexistent", "http://x"}, "--config: open /nonexistent"},
			{[]string{"--listen", ":0", "--limit", "10/s", "--redis-password-file", "/nonexistent", "http://x"}, "--redis-password-file only applies with --redis"},
			{[]string{"--listen", ":0", "--limit", "10/fortnight", "http://x"}, `--limit "10/fortnight": "fortnight" is neither s, m, h, d`},
			{[]string{"--listen", ":0", "--limit", "10/s", "--burst", "-1", "http://x"}, "--burst"},
			{[]string{"--listen", ":0", "--limit", "10/s", "--algorithm", "magic", "http://x"}, "--algorithm"},
			{[]string{"--listen", ":0", "--limit", "10/s", "--algorithm", "fixed-window", "--burst", "5", "http://x"}, "no separate burst"},
			{[]string{"--listen", ":0", "--limit", "10/s", "--key", "cookie", "http://x"}, "--key"},
			{[]string{"--listen", ":0", "--limit", "10/s", "--key", "header:", "http://x"}, "--key"},
			{[]string{"--listen", ":0", "--limit", "10/s", "--trusted-proxy", "10.0.0.0/99", "http://x"}, "--trusted-proxy"},
			{[]string{"--listen", ":0", "--limit", "10/s", "--redis", "nonsense", "http://x"}, "--redis"},
			{[]string{"--listen", ":0", "--limit", "10/s", "--redis", "redis://127.0.0.1:1/0", "--max-keys", "5", "http://x"}, "--max-keys"},
			{[]string{"--listen", "nowhere", "--limit", "10/s", "http://x"}, "--listen"},
			{[]string{"--listen", ":0", "--limit", "10/s", "--bogus", "http://x"}, "ratelimit proxy: flag provided but not defined: -bogus (see ratelimit help proxy)"},
		} {
			_, stderr, code := clitest.Run(t, bin, "", append([]string{"proxy"}, tc.args...)...)
			if code != command.ExitUsage || !strings.Contains(stderr, tc.msg) {
				t.Errorf("%v: status %d, stderr %q; want 2 and %q", tc.args, code, stderr, tc.msg)
			}
			// One line in the CLI's style, as pipe, run and trace.
			if !strings.HasPrefix(stderr, "ratelimit proxy: ") || strings.Count(stderr, "\n") != 1 {
				t.Errorf("%v: message %q not in the CLI's style", tc.args, stderr)
			}
		}
	})

	// Help goes where every command's goes: standard output, status 0.
	t.Run("help", func(t *testing.T) {
		t.Parallel()
		stdout, stderr, code := clitest.Run(t, bin, "", "proxy", "-h")
		if code != command.ExitOK || stderr != "" || !strings.HasPrefix(stdout, "Usage: ratelimit proxy") || !strings.Contains(stdout, "-max-conns-per-client") {
			t.Errorf("proxy -h: status %d, stderr %q, stdout %.80q", code, stderr, stdout)
		}
	})

	// Five clients send 60 requests each, 8 at a time: each gets exactly
	// its 20, whatever the interleaving, and a client that forges
	// X-Forwarded-For still counts as itself.
	for _, alg := range []string{"gcra", "sliding-log", "token-bucket"} {
		t.Run("exact count "+alg, func(t *testing.T) {
			t.Parallel()
			p := startProxy(t, bin, "--limit", "20/d", "--algorithm", alg, "--trusted-proxy", "127.0.0.1",
				"--metrics", "127.0.0.1:0", backend(t).URL)
			const policy = `"default";q=20;w=86400`
			for c, n := range hammer(t, []*proxyProc{p}, 5, 60, policy) {
				if n != 20 {
					t.Errorf("client %d: %d requests admitted, want exactly 20", c, n)
				}
			}
			spoof := get(t, "http://"+p.addr+"/x", "6.6.6.6, 198.51.100.1")
			if spoof.code != 429 {
				t.Errorf("forged X-Forwarded-For: %d, want 429 (the client is 198.51.100.1)", spoof.code)
			}
			m := metricsOf(t, p)
			for _, want := range []string{
				`ratelimit_proxy_requests_total{decision="allowed"} 100`,
				`ratelimit_proxy_requests_total{decision="refused"} 201`,
				`ratelimit_proxy_store_errors_total 0`,
				`# TYPE ratelimit_proxy_requests_total counter`,
			} {
				if !strings.Contains(m, want+"\n") {
					t.Errorf("metrics lack %q:\n%s", want, m)
				}
			}
			page, err := metricstest.Parse([]byte(m))
			if err != nil {
				t.Fatalf("the page does not parse: %v\n%s", err, m)
			}
			for name, typ := range map[string]string{
				"ratelimit_proxy_requests_total": "counter", "ratelimit_proxy_held_total": "counter", "ratelimit_proxy_dry_run_total": "counter",
				"go_goroutines": "gauge", "go_memstats_alloc_bytes": "gauge", "process_resident_memory_bytes": "gauge", "process_cpu_seconds_total": "counter",
			} {
				if got := page.Type(name); got != typ {
					t.Errorf("%s: type %q, want %q", name, got, typ)
				}
			}
			if got := len(page.Series("ratelimit_proxy_")); got != 9 {
				t.Errorf("%d series of the proxy's, want 9:\n%v", got, page.Series("ratelimit_proxy_"))
			}
		})
	}

	// A client that waits what Retry-After says is admitted on its next
	// try. This one runs in real time; waiting longer than told (a slow
	// machine) only leaves more room, so it cannot fail for that.
	t.Run("honouring Retry-After", func(t *testing.T) {
		t.Parallel()
		p := startProxy(t, bin, "--limit", "2/2s", backend(t).URL)
		url := "http://" + p.addr + "/"
		for tries := 0; ; tries++ {
			if tries == 50 {
				t.Fatal("never refused")
			}
			r := get(t, url, "")
			if r.code == 200 {
				continue
			}
			if r.code != 429 {
				t.Fatalf("status %d", r.code)
			}
			checkRefusal(t, r, `"default";q=2;w=2`)
			ra, _ := strconv.Atoi(r.ra)
			time.Sleep(time.Duration(ra) * time.Second) // the client honouring Retry-After
			if r := get(t, url, ""); r.code != 200 {
				t.Fatalf("refused (%d) after waiting Retry-After: %d s", r.code, ra)
			}
			return
		}
	})

	t.Run("graceful shutdown", func(t *testing.T) {
		t.Parallel()
		arrived, release := make(chan struct{}), make(chan struct{})
		slow := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			close(arrived)
			<-release
			fmt.Fprint(w, "finished")
		}))
		defer slow.Close()
		p := startProxy(t, bin, "--limit", "10/s", slow.URL)
		got := make(chan result, 1)
		go func() { got <- get(t, "http://"+p.addr+"/slow", "") }()
		select {
		case <-arrived:
		case <-time.After(lineTimeout):
			t.Fatal("the request never reached the backend")
		}
		if err := p.cmd.Process.Signal(syscall.SIGTERM); err != nil {
			t.Fatal(err)
		}
		p.waitStderr(t, "shutting down")
		close(release)
		if r := <-got; r.code != 200 || r.body != "finished" {
			t.Errorf("request in flight: %d %q", r.code, r.body)
		}
		if code := p.waitExit(t); code != 0 {
			t.Errorf("exit status %d after SIGTERM, want 0", code)
		}
	})

	t.Run("redis shared by two proxies", func(t *testing.T) {
		t.Parallel()
		srv := redistest.Start(t)
		be := backend(t)
		args := []string{"--limit", "20/d", "--trusted-proxy", "127.0.0.1", "--redis", clitest.RedisURL(srv), be.URL}
		a, b := startProxy(t, bin, args...), startProxy(t, bin, args...)
		for c, n := range hammer(t, []*proxyProc{a, b}, 3, 60, `"default";q=20;w=86400`) {
			if n != 20 {
				t.Errorf("client %d: %d admitted through two proxies, want exactly 20 in all", c, n)
			}
		}
	})

	t.Run("redis killed", func(t *testing.T) {
		t.Parallel()
		srv := redistest.Start(t)
		be := backend(t)
		args := []string{"--limit", "20/d", "--redis", clitest.RedisURL(srv), "--metrics", "127.0.0.1:0", be.URL}
		closed := startProxy(t, bin, args...)
		open := startProxy(t, bin, append([]string{"--fail-open"}, args...)...)
		for _, p := range []*proxyProc{closed, open} {
			if r := get(t, "http://"+p.addr+"/", ""); r.code != 200 {
				t.Fatalf("with Redis up: %d", r.code)
			}
		}
		srv.Kill()
		r := get(t, "http://"+closed.addr+"/", "")
		if ra, err := strconv.Atoi(r.ra); r.code != 503 || err != nil || ra < 1 {
			t.Errorf("fail closed with Redis down: %d, Retry-After %q", r.code, r.ra)
		}
		r = get(t, "http://"+open.addr+"/", "")
		if r.code != 200 || r.body != "backend" || r.rateLimit != "" {
			t.Errorf("fail open with Redis down: %d %q, RateLimit %q", r.code, r.body, r.rateLimit)
		}
		closed.waitStderr(t, "outage began")
		for _, p := range []*proxyProc{closed, open} {
			if m := metricsOf(t, p); !strings.Contains(m, "ratelimit_proxy_store_errors_total 1\n") {
				t.Errorf("metrics after one store error:\n%s", m)
			}
		}
		// Back to normal once Redis is: go-redis reconnects on the next
		// call, so a bounded number of tries suffices.
		srv.Restart()
		for tries := 0; ; tries++ {
			if r := get(t, "http://"+closed.addr+"/", ""); r.code == 200 && r.rateLimit != "" {
				break
			}
			if tries == 100 {
				t.Fatal("still failing 100 requests after Redis restarted")
			}
		}
	})

	// A hung Redis (SIGSTOP) must not hold requests for go-redis's 3 s
	// read timeout: the proxy bounds each decision (200 ms) and fails as
	// configured. The client gives up after 2.5 s, far above the bound.
	t.Run("redis hung", func(t *testing.T) {
		t.Parallel()
		srv := redistest.Start(t)
		p := startProxy(t, bin, "--limit", "20/d", "--redis", clitest.RedisURL(srv), backend(t).URL)
		if r := get(t, "http://"+p.addr+"/", ""); r.code != 200 {
			t.Fatalf("with Redis up: %d", r.code)
		}
		srv.Pause()
		defer srv.Resume()
		impatient := &http.Client{Transport: client.Transport, Timeout: 2500 * time.Millisecond}
		resp, err := impatient.Get("http://" + p.addr + "/")
		if err != nil {
			t.Fatalf("the proxy did not answer while Redis hung: %v", err)
		}
		resp.Body.Close()
		if resp.StatusCode != 503 || resp.Header.Get("Retry-After") == "" {
			t.Errorf("Redis hung: %d, Retry-After %q; want 503 with Retry-After", resp.StatusCode, resp.Header.Get("Retry-After"))
		}
	})

	t.Run("redis down at start", func(t *testing.T) {
		t.Parallel()
		srv := redistest.Start(t)
		url := clitest.RedisURL(srv)
		srv.Kill()
		p := startProxy(t, bin, "--limit", "20/d", "--redis", url, backend(t).URL)
		p.waitStderr(t, "does not answer")
		if r := get(t, "http://"+p.addr+"/", ""); r.code != 503 {
			t.Errorf("Redis down: %d, want 503", r.code)
		}
		srv.Restart()
		for tries := 0; ; tries++ {
			if r := get(t, "http://"+p.addr+"/", ""); r.code == 200 {
				break
			}
			if tries == 100 {
				t.Fatal("still failing 100 requests after Redis started")
			}
		}
	})
}

// TestRefusalNamesViolatedPolicies: the refusal's problem body names the
// limits that refused, as RateLimit-Policy names them, with one --limit or
// several (the path of several limits, --queue, --status and --dry-run
// wrote a body without them), with the configured status too.
func TestRefusalNamesViolatedPolicies(t *testing.T) {
	t.Parallel()
	bin := clitest.Binary(t)
	be := backend(t)
	for _, c := range []struct {
		args []string
		want []string
	}{
		{[]string{"--limit", "1/d"}, []string{"default"}},
		{[]string{"--limit", "1/d", "--limit", "5/d"}, []string{"1/d"}},
		{[]string{"--limit", "1/d", "--status", "503"}, []string{"default"}},
	} {
		p := startProxy(t, bin, append(c.args, be.URL)...)
		get(t, "http://"+p.addr+"/", "")
		r := get(t, "http://"+p.addr+"/", "")
		var body struct {
			Violated []string `json:"violated-policies"`
		}
		if err := json.Unmarshal([]byte(r.body), &body); err != nil || r.code < 400 || !slices.Equal(body.Violated, c.want) {
			t.Errorf("%q: %d %s; want violated-policies %q", c.args, r.code, r.body, c.want)
		}
		p.kill()
	}
}
