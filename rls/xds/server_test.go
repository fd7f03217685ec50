package xds

import (
	"crypto/tls"
	"sync"
	"testing"
	"time"

	"github.com/smoothrate/ratelimit/internal/tlsfiles"
	"github.com/smoothrate/ratelimit/internal/tlstest"
	"github.com/smoothrate/ratelimit/internal/xdstest"
)

// This file runs go-control-plane's own xDS server in process, as Envoy
// Gateway runs it for envoyproxy/ratelimit (internal/xdstest).

// nodeID is the node Envoy Gateway keeps the rate limit snapshots for.
const nodeID = xdstest.NodeID

// waitFor bounds every wait for something the server or the client does.
const waitFor = xdstest.WaitFor

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
func (p *pki) serverTLS(t *testing.T) *tls.Config { return xdstest.ServerTLS(t, p.ca, p.leaf) }

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

// xdsServer is Envoy Gateway's management server.
type xdsServer = xdstest.Server

func startServer(t *testing.T, tlsCfg *tls.Config) *xdsServer { return xdstest.Start(t, tlsCfg) }

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
