package xds

import (
	"context"
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	discoverygrpc "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"github.com/envoyproxy/go-control-plane/pkg/client/sotw/v3"
	"github.com/envoyproxy/go-control-plane/pkg/resource/v3"
	rlconfv3 "github.com/envoyproxy/go-control-plane/ratelimit/config/ratelimit/v3"
	"google.golang.org/protobuf/types/known/anypb"

	"github.com/smoothrate/ratelimit/rls"
)

// domain is a RateLimitConfig as Envoy Gateway writes one: name = domain,
// one route whose leaf allows n a minute.
func domain(name string, n uint32) *rlconfv3.RateLimitConfig {
	return &rlconfv3.RateLimitConfig{Name: name, Domain: name, Descriptors: []*rlconfv3.RateLimitDescriptor{{
		Key: "route", Value: "route",
		Descriptors: []*rlconfv3.RateLimitDescriptor{{
			Key:       "remote_address",
			RateLimit: &rlconfv3.RateLimitPolicy{Unit: rlconfv3.RateLimitUnit_MINUTE, RequestsPerUnit: n},
		}},
	}}}
}

// limitOf asks svc for domain's limit: its requests per unit, 0 when the
// domain or rule is not configured.
func limitOf(t *testing.T, svc *rls.Service, domain string) uint32 {
	t.Helper()
	resp, err := svc.ShouldRateLimit(context.Background(), &rlsv3.RateLimitRequest{
		Domain: domain,
		Descriptors: []*ratelimitv3.RateLimitDescriptor{{Entries: []*ratelimitv3.RateLimitDescriptor_Entry{
			{Key: "route", Value: "route"}, {Key: "remote_address", Value: "192.0.2.1"},
		}}},
		HitsAddend: 0,
	})
	if err != nil {
		t.Fatal(err)
	}
	return resp.Statuses[0].GetCurrentLimit().GetRequestsPerUnit()
}

// fastBackoff keeps the tests' reconnections short.
var fastBackoff = Backoff{Initial: 20 * time.Millisecond, Max: 200 * time.Millisecond, Factor: 2, Jitter: true}

// setup starts Envoy Gateway's server and a client of it (with opts after
// the defaults below) feeding a new rls.Service, running until the test
// ends.
func setup(t *testing.T, opts ...Option) (*xdsServer, *Client, *rls.Service, *counting, *events) {
	p := newPKI(t)
	srv := startServer(t, p.serverTLS(t))
	svc, err := rls.New(nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	target := &counting{Target: svc}
	ev := newEvents(t)
	c, err := NewClient(srv.Addr, target, append([]Option{
		WithNodeID(nodeID), WithTLS(p.clientTLS(t)), WithEvents(ev.hook),
		WithBackoff(fastBackoff), WithConnectRetryInterval(20 * time.Millisecond),
	}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- c.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; !errors.Is(err, context.Canceled) {
			t.Errorf("Run returned %v", err)
		}
		c.Close()
	})
	return srv, c, svc, target, ev
}

func TestFirstConfig(t *testing.T) {
	srv, c, svc, _, ev := setup(t)
	if svc.Config() != nil {
		t.Fatal("a configuration before the server sent one")
	}
	srv.Set(1, domain("default/eg/http", 5))
	ctx, cancel := context.WithTimeout(context.Background(), waitFor)
	defer cancel()
	cfg, err := c.WaitConfig(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if got := cfg.Domains(); !slices.Equal(got, []string{"default/eg/http"}) {
		t.Errorf("domains %v", got)
	}
	if ev.next(Applied).Config != cfg {
		t.Error("the Applied event is not the configuration WaitConfig returned")
	}
	if got := limitOf(t, svc, "default/eg/http"); got != 5 {
		t.Errorf("the service answers with a limit of %d, want 5", got)
	}
	// The first request: node envoy-ratelimit, a wildcard subscription.
	first := srv.NextRequest(func(*discoverygrpc.DiscoveryRequest) bool { return true })
	if first.GetNode().GetId() != nodeID || first.TypeUrl != resource.RateLimitConfigType || len(first.ResourceNames) != 0 {
		t.Errorf("first request: node %q, type %q, names %q", first.GetNode().GetId(), first.TypeUrl, first.ResourceNames)
	}
	// Then the ACK of version 1.
	ack := srv.NextRequest(func(r *discoverygrpc.DiscoveryRequest) bool { return r.ResponseNonce != "" })
	if ack.VersionInfo != "1" || ack.ErrorDetail != nil {
		t.Errorf("ACK: version %q, error %v", ack.VersionInfo, ack.ErrorDetail)
	}
}

func TestTypeURL(t *testing.T) {
	if TypeURL != resource.RateLimitConfigType {
		t.Errorf("TypeURL %q, go-control-plane's %q", TypeURL, resource.RateLimitConfigType)
	}
}

// Each response is the whole configuration: a domain it lacks is gone.
func TestSnapshotReplacesConfig(t *testing.T) {
	srv, _, svc, _, ev := setup(t)
	srv.Set(1, domain("a", 5), domain("b", 7))
	ev.next(Applied)
	if limitOf(t, svc, "a") != 5 || limitOf(t, svc, "b") != 7 {
		t.Fatal("version 1 not in use")
	}
	srv.Set(2, domain("a", 9))
	cfg := ev.next(Applied).Config
	if got := cfg.Domains(); !slices.Equal(got, []string{"a"}) {
		t.Errorf("domains after version 2: %v", got)
	}
	if got := limitOf(t, svc, "a"); got != 9 {
		t.Errorf("a's limit %d after version 2, want 9", got)
	}
	if got := limitOf(t, svc, "b"); got != 0 {
		t.Errorf("b, removed in version 2, still has a limit of %d", got)
	}
	ack := srv.NextRequest(func(r *discoverygrpc.DiscoveryRequest) bool { return r.VersionInfo == "2" })
	if ack.ErrorDetail != nil {
		t.Errorf("version 2 NACKed: %v", ack.ErrorDetail)
	}
}

// A snapshot that does not load is NACKed with the loader's reason, which
// reaches the server; the last good configuration keeps serving and
// config_load_error is counted; the next good one is applied.
func TestInvalidSnapshotNACKed(t *testing.T) {
	srv, _, svc, target, ev := setup(t)
	srv.Set(1, domain("a", 5))
	good := ev.next(Applied).Config
	bad := domain("b", 1)
	bad.Descriptors[0].Descriptors[0].Key = ""
	srv.Set(2, domain("a", 6), bad)
	const reason = "b: descriptor has empty key"
	if rej := ev.next(Rejected); rej.Err == nil || rej.Err.Error() != reason {
		t.Errorf("Rejected with %v, want %q", rej.Err, reason)
	}
	nack := srv.NextRequest(func(r *discoverygrpc.DiscoveryRequest) bool { return r.ErrorDetail != nil })
	if nack.ErrorDetail.Message != reason || nack.VersionInfo != "1" {
		t.Errorf("NACK: message %q, version %q; want %q, the last version ACKed (1)", nack.ErrorDetail.Message, nack.VersionInfo, reason)
	}
	if svc.Config() != good || limitOf(t, svc, "a") != 5 {
		t.Error("the last good configuration is not in use")
	}
	if target.failures() < 1 {
		t.Error("config_load_error not counted")
	}
	srv.Set(3, domain("a", 8))
	if cfg := ev.next(Applied).Config; !slices.Equal(cfg.Domains(), []string{"a"}) || limitOf(t, svc, "a") != 8 {
		t.Error("version 3 not applied after the NACK")
	}
}

// A resource that is not a RateLimitConfig does not load: it is NACKed.
func TestUndecodableResource(t *testing.T) {
	c := &Client{}
	for _, res := range []*anypb.Any{
		{TypeUrl: TypeURL, Value: []byte{0xff}},
		{TypeUrl: resource.ClusterType},
	} {
		_, err := c.load(&sotw.Response{Resources: []*anypb.Any{res}})
		if err == nil || !strings.HasPrefix(err.Error(), "resource 0: ") {
			t.Errorf("%s: got %v", res.TypeUrl, err)
		}
	}
}

// The server goes away and comes back on the same address: the client
// reconnects after its backoff and takes the new server's snapshot, even
// with the version number the old one had.
func TestReconnect(t *testing.T) {
	srv, _, svc, _, ev := setup(t)
	srv.Set(1, domain("a", 5))
	ev.next(Applied)
	srv.Stop()
	d := ev.next(Disconnected)
	if d.Err == nil || d.Retry < fastBackoff.Initial || d.Retry > fastBackoff.Max {
		t.Errorf("Disconnected: %v, retry in %v; want an error and a retry within the backoff", d.Err, d.Retry)
	}
	// The new server starts with its own count of versions.
	srv.Restart()
	srv.Set(1, domain("a", 6))
	ev.next(Applied)
	if got := limitOf(t, svc, "a"); got != 6 {
		t.Errorf("after the restart, a's limit is %d, want the new server's 6", got)
	}
}

// The node's metadata and the additional headers reach the server.
func TestNodeMetadataAndHeaders(t *testing.T) {
	srv, _, _, _, ev := setup(t,
		WithNodeMetadata(ParseNodeMetadata("cluster=eg,zone=a=b")),
		WithHeaders(map[string]string{"Authorization": "Bearer token", "x-tenant": "t1"}))
	srv.Set(1, domain("a", 5))
	ev.next(Applied)
	md := <-srv.Opened
	if got := md.Get("authorization"); !slices.Equal(got, []string{"Bearer token"}) {
		t.Errorf("authorization header %q", got)
	}
	if got := md.Get("x-tenant"); !slices.Equal(got, []string{"t1"}) {
		t.Errorf("x-tenant header %q", got)
	}
	first := srv.NextRequest(func(r *discoverygrpc.DiscoveryRequest) bool { return r.Node != nil })
	fields := first.Node.GetMetadata().GetFields()
	if len(fields) != 2 || fields["cluster"].GetStringValue() != "eg" || fields["zone"].GetStringValue() != "a=b" {
		t.Errorf("node metadata %v", first.Node.GetMetadata())
	}
}

// Envoy Gateway's server requires a client certificate: without one the
// client never gets a configuration, and says why.
func TestClientCertificateRequired(t *testing.T) {
	p := newPKI(t)
	srv := startServer(t, p.serverTLS(t))
	srv.Set(1, domain("a", 5))
	svc, _ := rls.New(nil, nil)
	noCert := p.clientTLS(t)
	noCert.GetClientCertificate = nil
	ev := newEvents(t)
	c, err := NewClient(srv.Addr, svc, WithNodeID(nodeID), WithTLS(noCert), WithEvents(ev.hook), WithBackoff(fastBackoff))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	go c.Run(context.Background())
	if d := ev.next(Disconnected); d.Err == nil {
		t.Error("Disconnected without an error")
	}
	if svc.Config() != nil {
		t.Error("a configuration arrived without a client certificate")
	}
}

// A response larger than the maximum message size is not received.
func TestMaxMessageSize(t *testing.T) {
	big := domain("a", 5)
	for i := range 200 {
		big.Descriptors = append(big.Descriptors, &rlconfv3.RateLimitDescriptor{Key: "k", Value: strings.Repeat("v", 20) + string(rune('A'+i%26)) + strings.Repeat("w", i)})
	}
	srv, _, svc, _, ev := setup(t, WithMaxMessageSize(1024))
	srv.Set(1, big)
	if d := ev.next(Disconnected); !strings.Contains(d.Err.Error(), "larger than max") {
		t.Errorf("Disconnected with %v, want the message size error", d.Err)
	}
	if svc.Config() != nil {
		t.Error("an oversized response was applied")
	}
}

func TestWaitConfig(t *testing.T) {
	svc, _ := rls.New(nil, nil)
	c, err := NewClient("127.0.0.1:1", svc)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Millisecond)
	defer cancel()
	if _, err := c.WaitConfig(ctx); !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("WaitConfig without a configuration: %v", err)
	}
	c.Close()
	if _, err := c.WaitConfig(context.Background()); !errors.Is(err, ErrClosed) {
		t.Errorf("WaitConfig after Close: %v", err)
	}
	if err := c.Run(context.Background()); !errors.Is(err, ErrClosed) {
		t.Errorf("Run after Close: %v", err)
	}
}

func TestNewClientErrors(t *testing.T) {
	svc, _ := rls.New(nil, nil)
	for _, c := range []struct {
		name   string
		url    string
		target Target
		opts   []Option
	}{
		{"no URL", "", svc, nil},
		{"nil target", "localhost:18000", nil, nil},
		{"nil option", "localhost:18000", svc, []Option{nil}},
		{"empty node id", "localhost:18000", svc, []Option{WithNodeID("")}},
		{"nil TLS", "localhost:18000", svc, []Option{WithTLS(nil)}},
		{"empty header name", "localhost:18000", svc, []Option{WithHeaders(map[string]string{"": "v"})}},
		{"header name with a space", "localhost:18000", svc, []Option{WithHeaders(map[string]string{"x token": "v"})}},
		{"reserved header name", "localhost:18000", svc, []Option{WithHeaders(map[string]string{"grpc-timeout": "1S"})}},
		{"header value with a newline", "localhost:18000", svc, []Option{WithHeaders(map[string]string{"x": "a\nb"})}},
		{"zero retry interval", "localhost:18000", svc, []Option{WithConnectRetryInterval(0)}},
		{"negative message size", "localhost:18000", svc, []Option{WithMaxMessageSize(-1)}},
		{"zero backoff", "localhost:18000", svc, []Option{WithBackoff(Backoff{})}},
		{"max below initial", "localhost:18000", svc, []Option{WithBackoff(Backoff{Initial: time.Second, Max: time.Millisecond, Factor: 2})}},
		{"zero factor", "localhost:18000", svc, []Option{WithBackoff(Backoff{Initial: time.Second, Max: time.Second})}},
		{"bad URL", "%", svc, nil},
	} {
		if _, err := NewClient(c.url, c.target, c.opts...); !errors.Is(err, ErrInvalidOption) {
			t.Errorf("%s: %v", c.name, err)
		}
	}
}

// withSleep replaces the client's waits (backoffs) by f.
func withSleep(f func(ctx context.Context, d time.Duration)) Option {
	return optionFunc(func(c *clientConfig) { c.sleep = f })
}

// go-control-plane's snapshot cache sends a NACKed snapshot again at once:
// the client refuses it again without loading, counting or reporting it,
// and only after the backoff, so the two do not loop; the next snapshot
// is applied.
func TestInvalidSnapshotNotLooped(t *testing.T) {
	waits := make(chan time.Duration, 100)
	release := make(chan struct{})
	steady := Backoff{Initial: time.Hour, Max: time.Hour, Factor: 0.5}
	srv, _, svc, target, ev := setup(t, WithBackoff(steady), withSleep(func(ctx context.Context, d time.Duration) {
		waits <- d
		select {
		case <-release:
		case <-ctx.Done():
		}
	}))
	srv.Set(1, domain("a", 5))
	ev.next(Applied)
	bad := domain("b", 1)
	bad.Descriptors[0].Descriptors[0].Key = ""
	srv.Set(2, bad)
	ev.next(Rejected)
	// The server sends version 2 again; the client waits before its NACK.
	select {
	case d := <-waits:
		if d != time.Hour {
			t.Errorf("waited %v before the repeated NACK, want the backoff's hour", d)
		}
	case <-time.After(waitFor):
		t.Fatal("the repeated response was NACKed without waiting")
	}
	if n := target.failures(); n != 1 {
		t.Errorf("config_load_error counted %d times for one snapshot", n)
	}
	srv.Set(3, domain("a", 7))
	close(release)
	ev.next(Applied)
	if got := limitOf(t, svc, "a"); got != 7 {
		t.Errorf("a's limit %d after version 3, want 7", got)
	}
	for {
		select {
		case e := <-ev.ch:
			if e.Kind == Rejected {
				t.Errorf("the repeated snapshot was reported again: %v", e.Err)
			}
		default:
			return
		}
	}
}

// The wait grows while the server stays away, and starts again from the
// initial one once a stream has delivered a response.
func TestBackoffResetsAfterResponse(t *testing.T) {
	waits := make(chan time.Duration)
	proceed := make(chan struct{})
	srv, _, _, _, ev := setup(t, WithBackoff(Backoff{Initial: time.Second, Max: time.Hour, Factor: 2}),
		withSleep(func(ctx context.Context, d time.Duration) {
			select {
			case waits <- d:
			case <-ctx.Done():
				return
			}
			select {
			case <-proceed:
			case <-ctx.Done():
			}
		}))
	nextWait := func() time.Duration {
		t.Helper()
		select {
		case d := <-waits:
			return d
		case <-time.After(waitFor):
			t.Fatal("no retry")
		}
		return 0
	}
	srv.Set(1, domain("a", 5))
	ev.next(Applied)
	for round := range 2 {
		srv.Stop()
		if d := nextWait(); d != time.Second {
			t.Fatalf("round %d: first wait %v, want the initial 1s", round, d)
		}
		proceed <- struct{}{}
		if d := nextWait(); d != 2*time.Second {
			t.Fatalf("round %d: second wait %v, want 2s", round, d)
		}
		srv.Restart()
		srv.Set(round+2, domain("a", 6))
		// Let the retries go on until the client is back.
		proceed <- struct{}{}
		for back := false; !back; {
			select {
			case <-waits:
				proceed <- struct{}{}
			case e := <-ev.ch:
				back = e.Kind == Applied
			case <-time.After(waitFor):
				t.Fatal("the client did not come back")
			}
		}
	}
}
