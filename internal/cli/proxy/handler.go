package proxy

import (
	"context"
	"errors"
	"fmt"
	"log"
	"net"
	"net/http"
	"net/http/httputil"
	"net/netip"
	"os"
	"os/signal"
	"strings"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/smoothrate/ratelimit/httplimit"
	"github.com/smoothrate/ratelimit/internal/cli/outage"
	"github.com/smoothrate/ratelimit/internal/cli/redisflag"
	"github.com/smoothrate/ratelimit/internal/cli/serve"
	"github.com/smoothrate/ratelimit/throttle"
)

// This file is the proxy's request path: what it does to a request before
// the limit (a clean path, a bounded body read), the limit step, and the
// forwarding (the headers the backend gets, a bounded wait for it, its
// errors).

// proxy is the proxy's handler and what it keeps between requests.
type proxy struct {
	cfg     *proxyConfig
	limits  throttle.Store
	step    atomic.Pointer[limitStep] // replaced whole by a reload
	forward http.Handler              // the reverse proxy to the target
	metrics proxyMetrics
	store   *outage.Log // the store's outages
	backend *outage.Log // the backend's
	log     *log.Logger
}

// limitStep is the limit in front of the backend, as one configuration
// (limitConfig) describes it; SIGHUP swaps it for a new one atomically, so
// that a request sees either the old limits or the new, never a mix.
type limitStep struct {
	cfg *limitConfig
	h   http.Handler
}

// requestState is what the steps of one request tell each other: the
// limit's hooks only get the request, so it travels in its context.
type requestState struct {
	w              http.ResponseWriter
	closeOnRefusal bool  // the peer is a client, not a trusted proxy carrying many
	storeErr       error // the store failed on this request's decision
	bodyTimedOut   atomic.Bool
}

type requestStateKey struct{}

func stateOf(r *http.Request) *requestState {
	st, _ := r.Context().Value(requestStateKey{}).(*requestState)
	if st == nil {
		st = &requestState{}
	}
	return st
}

func (c *proxyConfig) newProxy(store throttle.Store, storeName string, errLog *log.Logger) (*proxy, error) {
	p := &proxy{cfg: c, limits: store, log: errLog,
		store:   outage.New("store ("+storeName+")", errLog),
		backend: outage.New("backend "+c.target.Redacted(), errLog),
	}
	dialer := &net.Dialer{Timeout: c.upstreamTimeout, KeepAlive: 30 * time.Second}
	transport := &http.Transport{
		Proxy:                 nil, // the target is named: no $HTTP_PROXY detour
		DialContext:           dialer.DialContext,
		ForceAttemptHTTP2:     true,
		MaxIdleConns:          0, // no cap across hosts: there is one
		MaxIdleConnsPerHost:   upstreamIdlePerHost,
		IdleConnTimeout:       90 * time.Second,
		TLSHandshakeTimeout:   10 * time.Second,
		ResponseHeaderTimeout: c.upstreamTimeout,
		ExpectContinueTimeout: time.Second,
	}
	p.forward = &httputil.ReverseProxy{
		Rewrite:   p.rewrite,
		Transport: transport,
		ModifyResponse: func(*http.Response) error {
			p.backend.OK()
			return nil
		},
		ErrorHandler: p.backendFailed,
		ErrorLog:     errLog,
	}
	step, err := p.newLimitStep(c.limits)
	if err != nil {
		return nil, err
	}
	p.step.Store(step)
	return p, nil
}

// ServeHTTP prepares the request (its path cleaned, its body read with a
// deadline) and hands it to the limit step in force.
func (p *proxy) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	cleanPath(r.URL)
	st := &requestState{w: w}
	if peer, ok := peerAddr(r.RemoteAddr); !ok || !p.cfg.trustedAddr(peer) {
		st.closeOnRefusal = true
	}
	if r.Body != nil && r.Body != http.NoBody {
		r.Body = &timedBody{TimedBody: serve.TimedBody{Body: r.Body, RC: http.NewResponseController(w), Timeout: p.cfg.conns.ReadTimeout}, st: st}
	}
	r = r.WithContext(context.WithValue(r.Context(), requestStateKey{}, st))
	p.step.Load().h.ServeHTTP(w, r)
}

// newLimitStep builds the decision made on every request under lc: the
// limit (httplimit over throttle, on the proxy's one store) in front of
// p.admitted, which forwards. Every outcome of a decision passes through
// here: allowed (admitted), refused (the refusal hook, then 429), the
// store failed (the error hook, then 503 or admitted failing open).
func (p *proxy) newLimitStep(lc *limitConfig) (*limitStep, error) {
	lim, opts, err := lc.limiters(p.limits, &p.metrics, p.refused)
	if err != nil {
		return nil, err
	}
	opts = append(opts,
		httplimit.WithRefusalHook(p.refused),
		httplimit.WithErrorHook(p.storeFailed),
	)
	if len(p.cfg.trusted) > 0 {
		opts = append(opts, httplimit.WithTrustedProxies(p.cfg.trusted...))
	}
	if p.cfg.failOpen {
		opts = append(opts, httplimit.WithFailOpen())
	}
	if p.cfg.newRedis != nil {
		opts = append(opts, httplimit.WithStoreTimeout(redisflag.CallTimeout))
	}
	mw, err := httplimit.New(lim, opts...)
	if err != nil {
		return nil, err
	}
	return &limitStep{cfg: lc, h: mw(http.HandlerFunc(p.admitted))}, nil
}

// admitted forwards a request the limit let through: allowed, or failing
// open on a store outage (httplimit never fails open on a store set up
// wrong).
func (p *proxy) admitted(w http.ResponseWriter, r *http.Request) {
	st := stateOf(r)
	if st.storeErr == nil {
		p.store.OK()
	}
	p.metrics.allowed.Add(1)
	p.forward.ServeHTTP(w, r)
}

// refused counts a refusal and, for a client that is not a trusted proxy,
// closes its connection after the answer: a refused client must not hold
// the proxy's connections (the refused client's keep-alive connections
// were how one client exhausted its file descriptors).
func (p *proxy) refused(r *http.Request, _ throttle.Decision) {
	p.metrics.refused.Add(1)
	p.store.OK()
	if st := stateOf(r); st.closeOnRefusal && st.w != nil {
		st.w.Header().Set("Connection", "close")
	}
}

// storeFailed records a store error; httplimit then answers 503 or, failing
// open, calls admitted.
func (p *proxy) storeFailed(r *http.Request, err error) {
	stateOf(r).storeErr = err
	p.metrics.storeErrors.Add(1)
	switch {
	case storeMisconfigured(err):
		p.store.Fail(err, "answered 503 (Redis set up wrong: never fails open)")
	case p.cfg.failOpen && errors.Is(err, throttle.ErrUnavailable):
		p.store.Fail(err, "failed open")
	default:
		p.store.Fail(err, "failed closed (503)")
	}
}

// backendFailed answers a request the backend did not: 504 after
// --upstream-timeout, 502 otherwise; 408 (and the connection closed) when
// it was the client that stopped sending its body.
func (p *proxy) backendFailed(w http.ResponseWriter, r *http.Request, err error) {
	st := stateOf(r)
	switch {
	case st.bodyTimedOut.Load():
		w.Header().Set("Connection", "close")
		writeProblem(w, http.StatusRequestTimeout, "the request body stalled for longer than the proxy's read timeout")
		return
	case r.Context().Err() != nil:
		// The client went away: nothing to answer, nobody to blame.
		w.WriteHeader(http.StatusBadGateway)
		return
	}
	var ne net.Error
	if errors.As(err, &ne) && ne.Timeout() || errors.Is(err, context.DeadlineExceeded) {
		p.metrics.backendErrors.Add(1)
		p.backend.Fail(err, "answered 504")
		writeProblem(w, http.StatusGatewayTimeout, "the backend did not answer in time")
		return
	}
	p.metrics.backendErrors.Add(1)
	p.backend.Fail(err, "answered 502")
	writeProblem(w, http.StatusBadGateway, "the backend could not be reached")
}

// writeProblem writes an RFC 9457 problem answer.
func writeProblem(w http.ResponseWriter, status int, detail string) {
	h := w.Header()
	h.Set("Content-Type", "application/problem+json")
	h.Set("Cache-Control", "no-store")
	if status == http.StatusServiceUnavailable {
		h.Set("Retry-After", "1")
	}
	w.WriteHeader(status)
	fmt.Fprintf(w, `{"type":"about:blank","title":%q,"status":%d,"detail":%q}`+"\n", http.StatusText(status), status, detail)
}

// timedBody is serve.TimedBody noting in the request's state that the
// client stalled, so that the answer is 408 rather than the backend's 502.
type timedBody struct {
	serve.TimedBody
	st *requestState
}

func (b *timedBody) Read(buf []byte) (int, error) {
	n, err := b.TimedBody.Read(buf)
	if err != nil && serve.BodyTimedOut(err) {
		b.st.bodyTimedOut.Store(true)
	}
	return n, err
}

// rewrite sets what the backend gets: the target's URL with the cleaned
// path, and forwarding headers that say what the proxy knows, not what the
// client wrote. httputil.ReverseProxy has already removed X-Forwarded-For,
// -Host and -Proto; the client's X-Real-IP, Forwarded and other
// X-Forwarded-* go too.
func (p *proxy) rewrite(pr *httputil.ProxyRequest) {
	pr.SetURL(p.cfg.target)
	in, h := pr.In, pr.Out.Header
	for name := range h {
		if name == "Forwarded" || name == "X-Real-Ip" || strings.HasPrefix(name, "X-Forwarded-") {
			delete(h, name)
		}
	}
	chain, peerTrusted := p.forwardedChain(in)
	host, proto := in.Host, "http"
	if in.TLS != nil {
		proto = "https"
	}
	if peerTrusted {
		// The load balancer saw the client's request: its word on
		// the host and scheme is the one to pass on.
		if v := in.Header.Get("X-Forwarded-Host"); v != "" {
			host = v
		}
		if v := in.Header.Get("X-Forwarded-Proto"); v == "http" || v == "https" {
			proto = v
		}
	}
	strs := make([]string, len(chain))
	fwd := make([]string, len(chain))
	for i, a := range chain {
		strs[i] = a.String()
		if a.Is6() {
			fwd[i] = `for="[` + strs[i] + `]"`
		} else {
			fwd[i] = "for=" + strs[i]
		}
	}
	fwd[0] += ";host=" + quoteForwarded(host) + ";proto=" + proto
	h["X-Forwarded-For"] = []string{strings.Join(strs, ", ")}
	h["X-Real-Ip"] = []string{strs[0]}
	h["X-Forwarded-Host"] = []string{host}
	h["X-Forwarded-Proto"] = []string{proto}
	h["Forwarded"] = []string{strings.Join(fwd, ", ")}
}

// quoteForwarded quotes a Forwarded value unless it is a token.
func quoteForwarded(s string) string {
	if s != "" && validHeaderName(s) {
		return s
	}
	return `"` + strings.NewReplacer(`\`, `\\`, `"`, `\"`).Replace(s) + `"`
}

// forwardedChain is the client and the proxies its request passed, as far
// as the proxy can vouch for them, client first and the peer last: the
// peer; if it is a trusted proxy, the X-Forwarded-For entries it added,
// read from the right, up to and including the first address that is not
// a trusted proxy (the client: what is left of it the client wrote
// itself). This is how httplimit finds the client it keys by.
func (p *proxy) forwardedChain(r *http.Request) (chain []netip.Addr, peerTrusted bool) {
	peer, ok := peerAddr(r.RemoteAddr)
	if !ok {
		return []netip.Addr{netip.IPv4Unspecified()}, false
	}
	rev := []netip.Addr{peer}
	if !p.cfg.trustedAddr(peer) {
		return rev, false
	}
	values := r.Header["X-Forwarded-For"]
walk:
	for i := len(values) - 1; i >= 0; i-- {
		entries := strings.Split(values[i], ",")
		for j := len(entries) - 1; j >= 0; j-- {
			e := strings.TrimSpace(entries[j])
			if e == "" {
				continue
			}
			a, ok := peerAddr(e)
			if !ok {
				break walk
			}
			rev = append(rev, a)
			if !p.cfg.trustedAddr(a) {
				break walk
			}
		}
	}
	for i, j := 0, len(rev)-1; i < j; i, j = i+1, j-1 {
		rev[i], rev[j] = rev[j], rev[i]
	}
	return rev, true
}

// peerAddr reads "1.2.3.4:5", "[::1]:5" or a bare address, unmapped and
// without zone.
func peerAddr(s string) (netip.Addr, bool) {
	if ap, err := netip.ParseAddrPort(s); err == nil {
		return ap.Addr().Unmap().WithZone(""), true
	}
	a, err := netip.ParseAddr(strings.TrimSuffix(strings.TrimPrefix(s, "["), "]"))
	if err != nil {
		return netip.Addr{}, false
	}
	return a.Unmap().WithZone(""), true
}

// reloadOnHangup makes SIGHUP re-read the --config file and swap the limit
// step, while requests go on being served. It returns the function that
// stops listening for SIGHUP.
func (p *proxy) reloadOnHangup(file string) (stop func()) {
	ch := make(chan os.Signal, 1)
	signal.Notify(ch, syscall.SIGHUP)
	done := make(chan struct{})
	go func() {
		for {
			select {
			case <-ch:
				p.reload(file)
			case <-done:
				return
			}
		}
	}()
	return func() {
		signal.Stop(ch)
		close(done)
	}
}

// reload re-reads file; a file that cannot be read or holds a bad value
// leaves the limits in force, and says why.
func (p *proxy) reload(file string) {
	old := p.step.Load().cfg
	if file == "" {
		p.log.Printf("SIGHUP: no --config file to re-read; keeping %s", old)
		return
	}
	lc, err := readLimitFile(file)
	var step *limitStep
	if err == nil {
		step, err = p.newLimitStep(lc)
	}
	if err != nil {
		p.log.Printf("SIGHUP: not reloaded: %v; keeping %s", err, old)
		return
	}
	p.step.Store(step)
	p.log.Printf("SIGHUP: reloaded %s: %s", file, lc)
}
