// Package xdstest runs go-control-plane's own xDS management server in a
// test, as Envoy Gateway runs it for envoyproxy/ratelimit: a snapshot cache
// behind the Aggregated Discovery Service, TLS 1.3 at least with a client
// certificate required and verified, snapshots for the node
// envoy-ratelimit with numeric versions. The tests of package rls/xds and
// of `ratelimit rls` use it; only tests import it.
package xdstest

import (
	"context"
	"crypto/tls"
	"net"
	"strconv"
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

	"github.com/smoothrate/ratelimit/internal/tlstest"
)

// NodeID is the node Envoy Gateway keeps the rate limit snapshots for.
const NodeID = "envoy-ratelimit"

// WaitFor bounds every wait for something the server or a client does.
const WaitFor = 20 * time.Second

// ServerTLS is Envoy Gateway's xDS server TLS: leaf as the server's
// certificate, TLS 1.3 at least, and a client certificate signed by ca
// required.
func ServerTLS(t testing.TB, ca *tlstest.CA, leaf *tlstest.Leaf) *tls.Config {
	t.Helper()
	return &tls.Config{
		MinVersion:   tls.VersionTLS13,
		Certificates: []tls.Certificate{leaf.TLS(t)},
		ClientAuth:   tls.RequireAndVerifyClientCert,
		ClientCAs:    ca.Pool(),
	}
}

// Server is one run of the management server; its snapshot cache
// outlives it (Restart makes another on the same address).
type Server struct {
	// Addr is the address it listens on, host:port.
	Addr string
	// Requests receives every DiscoveryRequest of every stream; Opened,
	// the gRPC metadata (headers) of each stream opened. A test that
	// reads neither still works until 1000 of each arrive.
	Requests chan *discoverygrpc.DiscoveryRequest
	Opened   chan metadata.MD

	t     testing.TB
	cache cache.SnapshotCache
	tls   *tls.Config
	grpc  *grpc.Server
}

// Start serves on a free loopback port, with tlsCfg (nil: plain text),
// until the test ends.
func Start(t testing.TB, tlsCfg *tls.Config) *Server {
	return StartOn(t, "127.0.0.1:0", tlsCfg)
}

// StartOn is Start on addr.
func StartOn(t testing.TB, addr string, tlsCfg *tls.Config) *Server {
	t.Helper()
	s := &Server{
		t:        t,
		cache:    cache.NewSnapshotCache(true, cache.IDHash{}, nil),
		Addr:     addr,
		tls:      tlsCfg,
		Requests: make(chan *discoverygrpc.DiscoveryRequest, 1000),
		Opened:   make(chan metadata.MD, 1000),
	}
	s.Restart()
	return s
}

// Restart serves again on s.Addr, after Stop; the snapshots are kept.
func (s *Server) Restart() {
	t := s.t
	t.Helper()
	ln, err := net.Listen("tcp", s.Addr)
	if err != nil {
		t.Fatal(err)
	}
	s.Addr = ln.Addr().String()
	callbacks := server.CallbackFuncs{
		StreamOpenFunc: func(ctx context.Context, _ int64, _ string) error {
			md, _ := metadata.FromIncomingContext(ctx)
			s.Opened <- md
			return nil
		},
		StreamRequestFunc: func(_ int64, req *discoverygrpc.DiscoveryRequest) error {
			s.Requests <- req
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

// Stop ends the server and every stream.
func (s *Server) Stop() { s.grpc.Stop() }

// Set publishes a snapshot of cfgs, at version, for NodeID.
func (s *Server) Set(version int, cfgs ...*rlconfv3.RateLimitConfig) {
	s.t.Helper()
	res := make([]types.Resource, len(cfgs))
	for i, c := range cfgs {
		res[i] = c
	}
	snap, err := cache.NewSnapshot(strconv.Itoa(version), map[resource.Type][]types.Resource{resource.RateLimitConfigType: res})
	if err != nil {
		s.t.Fatal(err)
	}
	if err := s.cache.SetSnapshot(context.Background(), NodeID, snap); err != nil {
		s.t.Fatal(err)
	}
}

// NextRequest returns the next request the server received that matches
// f, skipping others; it fails the test after WaitFor.
func (s *Server) NextRequest(f func(*discoverygrpc.DiscoveryRequest) bool) *discoverygrpc.DiscoveryRequest {
	s.t.Helper()
	deadline := time.After(WaitFor)
	for {
		select {
		case r := <-s.Requests:
			if f(r) {
				return r
			}
		case <-deadline:
			s.t.Fatal("the server received no such request")
		}
	}
}
