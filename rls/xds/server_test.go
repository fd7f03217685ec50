package xds

import (
	"context"
	"crypto/tls"
	"net"
	"strconv"
	"sync"
	"testing"
	"time"

	discoverygrpc "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"github.com/envoyproxy/go-control-plane/pkg/cache/types"
	"github.com/envoyproxy/go-control-plane/pkg/cache/v3"
	"github.com/envoyproxy/go-control-plane/pkg/resource/v3"
	"github.com/envoyproxy/go-control-plane/pkg/server/v3"
	rlconfv3 "github.com/envoyproxy/go-control-plane/ratelimit/config/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/metadata"

	"github.com/smoothrate/ratelimit/internal/tlsfiles"
	"github.com/smoothrate/ratelimit/internal/tlstest"
)

// This file runs go-control-plane's own xDS server in process, as Envoy
// Gateway runs it for envoyproxy/ratelimit: a snapshot cache behind the
// Aggregated Discovery Service, TLS 1.3 at least with a client certificate
// required and verified, snapshots for node envoy-ratelimit with numeric
// versions.

// nodeID is the node Envoy Gateway keeps the rate limit snapshots for.
const nodeID = "envoy-ratelimit"

// waitFor bounds every wait for something the server or the client does.
const waitFor = 20 * time.Second

// pki is the test's CA and the one certificate Envoy Gateway gives both
// sides (server and client usages, for its service name and loopback).
type pki struct {
	ca   *tlstest.CA
	leaf *tlstest.Leaf
}

func newPKI(t *testing.T) *pki {
	ca := tlstest.NewCA(t, "envoy-gateway CA")
	return &pki{ca: ca, leaf: ca.Issue(t, "envoy-gateway", "127.0.0.1")}
}

// serverTLS is Envoy Gateway's xDS server TLS.
func (p *pki) serverTLS(t *testing.T) *tls.Config {
	return &tls.Config{
		MinVersion:   tls.VersionTLS13,
		Certificates: []tls.Certificate{p.leaf.TLS(t)},
		ClientAuth:   tls.RequireAndVerifyClientCert,
		ClientCAs:    p.ca.Pool(),
	}
}

// clientTLS is what the CLI builds from the files Envoy Gateway mounts at
// /certs: CONFIG_GRPC_XDS_CLIENT_TLS_CERT/_KEY=tls.crt/tls.key,
// CONFIG_GRPC_XDS_SERVER_TLS_CACERT=ca.crt, and
// CONFIG_GRPC_XDS_SERVER_TLS_SAN for the name dialled by address.
func (p *pki) clientTLS(t *testing.T) *tls.Config {
	dir := t.TempDir()
	cert, key := p.leaf.Write(t, dir, "tls.crt", "tls.key")
	cfg, _, err := tlsfiles.NewClientConfig(tlsfiles.ClientFiles{
		CertFile: cert, KeyFile: key, CAFile: p.ca.WriteCA(t, dir, "ca.crt"), ServerName: "envoy-gateway",
	})
	if err != nil {
		t.Fatal(err)
	}
	return cfg
}

// xdsServer is one run of the management server; the cache outlives it
// (restart makes another on the same address).
type xdsServer struct {
	t     *testing.T
	cache cache.SnapshotCache
	addr  string
	tls   *tls.Config
	grpc  *grpc.Server

	requests chan *discoverygrpc.DiscoveryRequest
	opened   chan metadata.MD // the headers of each stream
}

func startServer(t *testing.T, tlsCfg *tls.Config) *xdsServer {
	s := &xdsServer{
		t:        t,
		cache:    cache.NewSnapshotCache(true, cache.IDHash{}, nil),
		addr:     "127.0.0.1:0",
		tls:      tlsCfg,
		requests: make(chan *discoverygrpc.DiscoveryRequest, 1000),
		opened:   make(chan metadata.MD, 100),
	}
	s.start()
	return s
}

// start serves on s.addr (a fixed address after the first start).
func (s *xdsServer) start() {
	t := s.t
	ln, err := net.Listen("tcp", s.addr)
	if err != nil {
		t.Fatal(err)
	}
	s.addr = ln.Addr().String()
	callbacks := server.CallbackFuncs{
		StreamOpenFunc: func(ctx context.Context, _ int64, _ string) error {
			md, _ := metadata.FromIncomingContext(ctx)
			s.opened <- md
			return nil
		},
		StreamRequestFunc: func(_ int64, req *discoverygrpc.DiscoveryRequest) error {
			s.requests <- req
			return nil
		},
	}
	var opts []grpc.ServerOption
	if s.tls != nil {
		opts = append(opts, grpc.Creds(credentials.NewTLS(s.tls)))
	}
	s.grpc = grpc.NewServer(opts...)
	discoverygrpc.RegisterAggregatedDiscoveryServiceServer(s.grpc, server.NewServer(context.Background(), s.cache, callbacks))
	go s.grpc.Serve(ln)
	t.Cleanup(s.grpc.Stop)
}

// stop ends the server and every stream.
func (s *xdsServer) stop() { s.grpc.Stop() }

// set publishes a snapshot for nodeID.
func (s *xdsServer) set(version int, cfgs ...*rlconfv3.RateLimitConfig) {
	s.t.Helper()
	res := make([]types.Resource, len(cfgs))
	for i, c := range cfgs {
		res[i] = c
	}
	snap, err := cache.NewSnapshot(strconv.Itoa(version), map[resource.Type][]types.Resource{resource.RateLimitConfigType: res})
	if err != nil {
		s.t.Fatal(err)
	}
	if err := s.cache.SetSnapshot(context.Background(), nodeID, snap); err != nil {
		s.t.Fatal(err)
	}
}

// nextRequest returns the next request the server received that matches
// f, skipping others.
func (s *xdsServer) nextRequest(f func(*discoverygrpc.DiscoveryRequest) bool) *discoverygrpc.DiscoveryRequest {
	s.t.Helper()
	deadline := time.After(waitFor)
	for {
		select {
		case r := <-s.requests:
			if f(r) {
				return r
			}
		case <-deadline:
			s.t.Fatal("the server received no such request")
		}
	}
}

// events collects a client's events.
type events struct {
	t  *testing.T
	ch chan Event
}

func newEvents(t *testing.T) *events { return &events{t: t, ch: make(chan Event, 1000)} }

func (e *events) hook(ev Event) { e.ch <- ev }

// next returns the next event of kind, skipping others.
func (e *events) next(kind EventKind) Event {
	e.t.Helper()
	deadline := time.After(waitFor)
	for {
		select {
		case ev := <-e.ch:
			if ev.Kind == kind {
				return ev
			}
		case <-deadline:
			e.t.Fatalf("no %v event", kind)
		}
	}
}

// counting is an rls.Service-like Target that also counts for the tests.
type counting struct {
	Target
	mu     sync.Mutex
	failed int
}

func (c *counting) ConfigLoadFailed() {
	c.mu.Lock()
	c.failed++
	c.mu.Unlock()
	c.Target.ConfigLoadFailed()
}

func (c *counting) failures() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.failed
}
