package proxy

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/smoothrate/ratelimit/internal/cli/clitest"
)

// The differential test: nginx's limit_req and our proxy with the mapped
// flags, side by side in front of the same kind of backend, get the same
// arrival schedule, request by request, at the same instants; each request
// must be served at once by both, held by both for the same time (within
// 10 ms), or refused by both. nginx decides on its real clock, so the
// schedules are real time: arrivals are sent at instants relative to a
// start, spaced so that a few milliseconds of lateness cannot change a
// decision (the model of nginx's arithmetic checks each schedule's margins
// before it is sent), and a run whose arrivals were measured more unevenly
// late than that is run again on a fresh client address.

// nginxScenario is one location of nginx and one proxy of ours.
type nginxScenario struct {
	name    string
	zones   []string // limit_req_zone rates, e.g. "10r/s"
	limits  []string // limit_req arguments after zone=, per zone
	extra   string   // more directives for the location
	ours    []string // our flags
	model   []*nginxLimit
	at      []int // arrival instants, ms after the start
	status  int   // the refusal's status
	dryRun  bool
	minHeld int // the schedule must hold at least this many
}

// arrivalSlack is the most the arrivals of a run may differ in lateness
// for it to count; the schedules keep their decisions 2×arrivalSlack of
// leak away from every boundary.
const arrivalSlack = 7 * time.Millisecond

// holdTolerance is how far our hold may be from nginx's.
const holdTolerance = 10 * time.Millisecond

func nginxScenarios() []nginxScenario {
	spaced := func(n, from, step int) []int {
		var at []int
		for i := range n {
			at = append(at, from+i*step)
		}
		return at
	}
	cat := func(parts ...[]int) []int {
		var at []int
		for _, p := range parts {
			at = append(at, p...)
		}
		return at
	}
	return []nginxScenario{{
		name: "burst=5 nodelay", zones: []string{"10r/s"}, limits: []string{"burst=5 nodelay"},
		ours:  []string{"--limit", "10/s", "--burst", "6"},
		model: []*nginxLimit{newNginxLimit(10, 5, 5)},
		at:    cat(spaced(8, 0, 12), spaced(3, 400, 30), []int{650}), status: 429,
	}, {
		name: "burst=6 delay=2", zones: []string{"10r/s"}, limits: []string{"burst=6 delay=2"},
		ours:  []string{"--limit", "10/s", "--burst", "3", "--queue", "4"},
		model: []*nginxLimit{newNginxLimit(10, 6, 2)},
		at:    cat(spaced(8, 0, 12), []int{460, 830}), status: 429, minHeld: 4,
	}, {
		name: "burst=4", zones: []string{"10r/s"}, limits: []string{"burst=4"},
		ours:  []string{"--limit", "10/s", "--burst", "1", "--queue", "4"},
		model: []*nginxLimit{newNginxLimit(10, 4, 0)},
		at:    cat(spaced(8, 0, 12), []int{350, 370, 750}), status: 429, minHeld: 4,
	}, {
		name: "no burst, status 503", zones: []string{"10r/s"}, limits: []string{""},
		ours: []string{"--limit", "10/s", "--burst", "1", "--status", "503"}, extra: "limit_req_status 503;",
		model: []*nginxLimit{newNginxLimit(10, 0, 0)},
		at:    []int{0, 30, 60, 150, 230, 270, 400}, status: 503,
	}, {
		name: "two limits", zones: []string{"10r/s", "4r/s"}, limits: []string{"burst=3 delay=1", "burst=2"},
		ours: []string{"--limit", "10/s", "--limit", "4/s", "--burst", "2", "--burst", "1",
			"--queue", "2", "--queue", "2"},
		model: []*nginxLimit{newNginxLimit(10, 3, 1), newNginxLimit(4, 2, 0)},
		at:    cat(spaced(5, 0, 20), []int{520, 540, 1130}), status: 429, minHeld: 2,
	}, {
		name: "dry run", zones: []string{"10r/s"}, limits: []string{"burst=2"},
		ours: []string{"--limit", "10/s", "--burst", "1", "--queue", "2", "--dry-run"}, extra: "limit_req_dry_run on;",
		model: []*nginxLimit{newNginxLimit(10, 2, 0)},
		at:    spaced(6, 0, 15), status: 429, dryRun: true,
	}}
}

// nginxBinary finds nginx; without it the test fails under CI (the test
// script installs nginx-light) and is skipped elsewhere.
func nginxBinary(t *testing.T) string {
	for _, p := range []string{"nginx", "/usr/sbin/nginx"} {
		if bin, err := exec.LookPath(p); err == nil {
			return bin
		}
	}
	if os.Getenv("CI") != "" {
		t.Fatal("nginx is not installed: apt-get install -y nginx-light")
	}
	t.Skip("nginx is not installed (apt-get install -y nginx-light)")
	return ""
}

// startNginx runs nginx in the foreground with a config of one location
// per scenario (/s0/, /s1/, …), each proxying to backendURL, on a free
// loopback port, and returns its address once it listens.
func startNginx(t *testing.T, scenarios []nginxScenario, backendURL string) string {
	t.Helper()
	bin := nginxBinary(t)
	dir := t.TempDir()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String() // free now; nginx binds it a moment later
	ln.Close()
	var b strings.Builder
	fmt.Fprintf(&b, `daemon off;
master_process off;
worker_processes 1;
error_log stderr notice;
pid %[1]s/nginx.pid;
events { worker_connections 1024; }
http {
  access_log off;
  client_body_temp_path %[1]s/body;
  proxy_temp_path %[1]s/proxy;
  fastcgi_temp_path %[1]s/fastcgi;
  uwsgi_temp_path %[1]s/uwsgi;
  scgi_temp_path %[1]s/scgi;
  limit_req_status 429;
`, dir)
	for i, s := range scenarios {
		for j, rate := range s.zones {
			fmt.Fprintf(&b, "  limit_req_zone $binary_remote_addr zone=s%dz%d:1m rate=%s;\n", i, j, rate)
		}
	}
	fmt.Fprintf(&b, "  server {\n    listen %s;\n    location / { proxy_pass %s; }\n", addr, backendURL)
	for i, s := range scenarios {
		fmt.Fprintf(&b, "    location /s%d/ {\n", i)
		for j, args := range s.limits {
			fmt.Fprintf(&b, "      limit_req zone=s%dz%d %s;\n", i, j, args)
		}
		fmt.Fprintf(&b, "      %s\n      proxy_pass %s;\n    }\n", s.extra, backendURL)
	}
	b.WriteString("  }\n}\n")
	conf := b.String()
	confPath := filepath.Join(dir, "nginx.conf")
	if err := os.WriteFile(confPath, []byte(conf), 0o644); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(bin, "-e", "stderr", "-p", dir, "-c", confPath)
	stderr, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	var logs strings.Builder
	var logMu sync.Mutex
	done := make(chan struct{})
	ready := make(chan struct{})
	go func() {
		defer close(done)
		sc := bufio.NewScanner(stderr)
		for sc.Scan() {
			logMu.Lock()
			logs.WriteString(sc.Text() + "\n")
			logMu.Unlock()
			// nginx reports its limits after it has opened its
			// listeners: it is listening from then on.
			if strings.Contains(sc.Text(), "getrlimit(RLIMIT_NOFILE)") {
				close(ready)
			}
		}
	}()
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		<-done
		_ = cmd.Wait()
		if t.Failed() {
			logMu.Lock()
			t.Logf("nginx config:\n%s\nnginx log:\n%s", conf, logs.String())
			logMu.Unlock()
		}
	})
	select {
	case <-ready:
	case <-done:
		t.Fatalf("nginx exited at start:\n%s", logs.String())
	case <-time.After(lineTimeout):
		t.Fatalf("nginx did not start within %v", lineTimeout)
	}
	c := &http.Client{Timeout: lineTimeout}
	resp, err := c.Get("http://" + addr + "/")
	if err != nil {
		logMu.Lock()
		defer logMu.Unlock()
		t.Fatalf("nginx does not answer: %v\n%s", err, logs.String())
	}
	resp.Body.Close()
	if resp.StatusCode != 200 {
		t.Fatalf("nginx answered %d to a plain request", resp.StatusCode)
	}
	return addr
}

// seen is what one request saw.
type seen struct {
	code int
	late time.Duration // when it was sent, less when it was due
	took time.Duration // until the response's headers
	err  error
}

// sendSchedule sends a GET to url at each instant of at (ms after start),
// each on its own connection from the local address from.
func sendSchedule(start time.Time, url, from string, at []int) []seen {
	tr := &http.Transport{
		DisableKeepAlives: true,
		DialContext:       (&net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(from)}}).DialContext,
	}
	defer tr.CloseIdleConnections()
	c := &http.Client{Transport: tr, Timeout: lineTimeout}
	out := make([]seen, len(at))
	var wg sync.WaitGroup
	for i, ms := range at {
		due := start.Add(time.Duration(ms) * time.Millisecond)
		wg.Go(func() {
			time.Sleep(time.Until(due)) // an arrival schedule, not a wait for something
			sent := time.Now()
			out[i].late = sent.Sub(due)
			resp, err := c.Get(url)
			if err != nil {
				out[i].err = err
				return
			}
			out[i].took = time.Since(sent)
			out[i].code = resp.StatusCode
			_, _ = io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
		})
	}
	wg.Wait()
	return out
}

// expectation is the model's answer for one request, and how far its
// excess was from the burst (thousandths of a request).
type expectation struct {
	refused bool
	hold    time.Duration
	margin  int64
}

// expect runs the model of nginx over a schedule.
func (s nginxScenario) expect() []expectation {
	var ls []*nginxLimit
	for _, l := range s.model {
		c := *l
		ls = append(ls, &c)
	}
	var out []expectation
	for _, ms := range s.at {
		now := int64(ms) + 1_000_000 // nginx's clock is far from 0
		margin := int64(1 << 62)
		for _, l := range ls {
			if !l.exists {
				continue
			}
			// Before the clamp at 0: an excess of 0 reached from
			// below −100 is as far from the burst as that.
			ms := max(0, now-l.last)
			raw := l.excess - l.rate*ms/1000 + 1000
			margin = min(margin, max(raw-l.burst, l.burst-raw))
		}
		refused, delay := nginxDecide(ls, now)
		out = append(out, expectation{refused: refused, hold: time.Duration(delay) * time.Millisecond, margin: margin})
	}
	return out
}

func TestProxyHoldsAsNginx(t *testing.T) {
	if testing.Short() && os.Getenv("CI") == "" {
		t.Skip("real-time schedules against nginx (-short)")
	}
	scenarios := nginxScenarios()
	be := backend(t)
	nginxAddr := startNginx(t, scenarios, be.URL)
	bin := clitest.Binary(t)
	for i, s := range scenarios {
		t.Run(s.name, func(t *testing.T) {
			want := s.expect()
			held, refused := 0, 0
			for j, w := range want {
				// Each millisecond of lateness moves an excess by the
				// rate's thousandths; two arrivals can be late.
				for _, l := range s.model {
					if need := 2 * arrivalSlack.Milliseconds() * l.rate / 1000; w.margin <= need {
						t.Fatalf("schedule too close to a boundary at request %d (%d ms): margin %d, need > %d", j, s.at[j], w.margin, need)
					}
				}
				switch {
				case w.refused:
					refused++
				case w.hold > 0:
					held++
				}
			}
			if held < s.minHeld || (refused == 0 && !s.dryRun) {
				t.Fatalf("schedule too tame: %d held, %d refused", held, refused)
			}
			ours := startProxy(t, bin, append(s.ours, be.URL)...)
			path := fmt.Sprintf("/s%d/", i)
			oursOff := 0
			for attempt := 0; ; attempt++ {
				from := fmt.Sprintf("127.0.%d.%d", 10+i, 2+attempt) // a fresh key on both sides
				start := time.Now().Add(50 * time.Millisecond)
				var nginxSeen, oursSeen []seen
				var wg sync.WaitGroup
				wg.Go(func() { nginxSeen = sendSchedule(start, "http://"+nginxAddr+path, from, s.at) })
				wg.Go(func() { oursSeen = sendSchedule(start, "http://"+ours.addr+path, from, s.at) })
				wg.Wait()
				noise, wrong := s.compare(t, want, nginxSeen, oursSeen)
				if wrong != "" {
					t.Fatal(wrong)
				}
				if noise == "" {
					break
				}
				if strings.HasPrefix(noise, "ours") {
					oursOff++
				}
				if attempt == 11 {
					t.Fatalf("every run was disturbed, %d of them by our holds differing from nginx's; the last by %s", oursOff, noise)
				}
				t.Logf("run %d disturbed (%s): running again", attempt, noise)
			}
		})
	}
}

// compare checks one run request by request. noise says why the run does
// not count (an arrival too late, a response read late on either side:
// the machine was busy); wrong, a difference that no delay explains: a
// status that differs from nginx's on a run whose arrivals were on time
// and whose nginx answered as the model says.
func (s nginxScenario) compare(t *testing.T, want []expectation, nginxSeen, oursSeen []seen) (noise, wrong string) {
	t.Helper()
	var report strings.Builder
	for j := range s.at {
		if n, o := nginxSeen[j], oursSeen[j]; n.err != nil || o.err != nil {
			return "", fmt.Sprintf("request %d: nginx %v, ours %v", j, n.err, o.err)
		}
	}
	// Decisions and holds depend on the gaps between arrivals, not on
	// when the schedule began: what counts is how unevenly late they were.
	for _, side := range []struct {
		name string
		seen []seen
	}{{"nginx", nginxSeen}, {"ours", oursSeen}} {
		least, most := side.seen[0].late, side.seen[0].late
		for _, x := range side.seen {
			least, most = min(least, x.late), max(most, x.late)
		}
		if most-least > arrivalSlack && noise == "" {
			noise = fmt.Sprintf("arrivals to %s were sent from %v to %v late", side.name, least, most)
		}
	}
	for j, w := range want {
		n, o := nginxSeen[j], oursSeen[j]
		wantCode, wantHold := 200, w.hold
		if w.refused && !s.dryRun {
			wantCode = s.status
		}
		if s.dryRun {
			wantHold = 0
		}
		fmt.Fprintf(&report, "request %d at %4d ms: model %d held %v; nginx %d after %v; ours %d after %v\n",
			j, s.at[j], wantCode, wantHold, n.code, n.took.Round(time.Millisecond), o.code, o.took.Round(time.Millisecond))
		switch {
		case noise != "":
		case n.code != wantCode:
			noise = fmt.Sprintf("nginx answered request %d with %d, the model with %d", j, n.code, wantCode)
		case n.code == 200 && (n.took-wantHold).Abs() > holdTolerance:
			noise = fmt.Sprintf("nginx answered request %d after %v, the model holds it %v", j, n.took, wantHold)
		case o.code != n.code && wrong == "":
			wrong = fmt.Sprintf("request %d at %d ms: nginx answered %d, ours %d", j, s.at[j], n.code, o.code)
		case n.code == 200 && (o.took-n.took).Abs() > holdTolerance:
			noise = fmt.Sprintf("ours took %v for request %d, nginx %v", o.took, j, n.took)
		}
	}
	if wrong != "" {
		wrong += "\n" + report.String()
	} else if noise == "" {
		t.Logf("the run:\n%s", report.String())
	} else {
		t.Logf("a disturbed run:\n%s", report.String())
	}
	return noise, wrong
}

// TestProxyQueueClientGone drives the built binary: at 5/s with --burst 1
// --queue 1, the second request is held until 200 ms and its client gives
// up at 50 ms; a third at 100 ms, which the limit alone would refuse, takes
// the freed place and is served at 200 ms; a fourth at 120 ms is refused.
// The backend sees two requests, and the metrics say so.
func TestProxyQueueClientGone(t *testing.T) {
	bin := clitest.Binary(t)
	var reached atomic.Int64
	be := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { reached.Add(1) }))
	t.Cleanup(be.Close)
	p := startProxy(t, bin, "--limit", "5/s", "--burst", "1", "--queue", "1", "--metrics", "127.0.0.1:0", be.URL)
	url := "http://" + p.addr + "/"
	tr := &http.Transport{DisableKeepAlives: true}
	defer tr.CloseIdleConnections()
	c := &http.Client{Transport: tr, Timeout: lineTimeout}
	do := func(ctx context.Context) (int, time.Duration, error) {
		req, _ := http.NewRequestWithContext(ctx, "GET", url, nil)
		start := time.Now()
		resp, err := c.Do(req)
		if err != nil {
			return 0, 0, err
		}
		resp.Body.Close()
		return resp.StatusCode, time.Since(start), nil
	}
	start := time.Now()
	if code, took, err := do(context.Background()); err != nil || code != 200 || took > 50*time.Millisecond {
		t.Fatalf("first request: %d after %v (%v)", code, took, err)
	}
	impatient, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	if _, _, err := do(impatient); err == nil {
		t.Fatal("the held request was answered within 50 ms")
	}
	time.Sleep(time.Until(start.Add(100 * time.Millisecond))) // the schedule
	third := make(chan [2]int64, 1)
	go func() {
		code, took, err := do(context.Background())
		if err != nil {
			t.Error(err)
		}
		third <- [2]int64{int64(code), int64(took)}
	}()
	time.Sleep(time.Until(start.Add(120 * time.Millisecond)))
	if code, _, err := do(context.Background()); err != nil || code != 429 {
		t.Errorf("fourth request: %d (%v), want 429", code, err)
	}
	r := <-third
	if r[0] != 200 || time.Duration(r[1]) < 50*time.Millisecond {
		t.Errorf("third request: %d after %v, want 200 after about 100 ms", r[0], time.Duration(r[1]))
	}
	if n := reached.Load(); n != 2 {
		t.Errorf("the backend saw %d requests, want 2", n)
	}
	m := metricsOf(t, p)
	for _, want := range []string{`ratelimit_proxy_held_total{outcome="client_gone"} 1`, `ratelimit_proxy_held_total{outcome="forwarded"} 1`} {
		if !strings.Contains(m, want) {
			t.Errorf("metrics lack %s:\n%s", want, m)
		}
	}
}
