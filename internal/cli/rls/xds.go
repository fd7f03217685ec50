package rls

import (
	"cmp"
	"context"
	"crypto/tls"
	"errors"
	"flag"
	"fmt"
	"log"
	"net"
	"os/signal"
	"strings"
	"sync"
	"syscall"
	"time"

	"google.golang.org/grpc"

	"github.com/smoothrate/ratelimit/internal/cli/command"
	"github.com/smoothrate/ratelimit/internal/cli/serve"
	"github.com/smoothrate/ratelimit/internal/tlsfiles"
	"github.com/smoothrate/ratelimit/rls"
	"github.com/smoothrate/ratelimit/rls/xds"
)

// This file holds the configuration taken from an xDS management server
// (--xds, CONFIG_TYPE=GRPC_XDS_SOTW), as envoyproxy/ratelimit takes it
// under Envoy Gateway: package rls/xds's client, given the reference's
// settings, its events logged.

// defaultXDSServer is CONFIG_GRPC_XDS_SERVER_URL's default, the
// reference's.
const defaultXDSServer = "localhost:18000"

// xdsSettings are the xDS client's settings; url is "" when the
// configuration comes from files.
type xdsSettings struct {
	url          string
	nodeID       string
	nodeMetadata map[string]string
	headers      map[string]string
	useTLS       bool
	tls          tlsfiles.ClientFiles
	backoff      xds.Backoff
	connectRetry time.Duration
	maxMsgSize   int
	forceStart   bool
}

// registerXDSFlags adds the xDS flags to fs.
func registerXDSFlags(fs *flag.FlagSet, x *xdsSettings) {
	fs.StringVar(&x.url, "xds", "", "take the configuration from the xDS management server at `host:port` (as CONFIG_TYPE=GRPC_XDS_SOTW) instead of files")
	fs.StringVar(&x.nodeID, "xds-node-id", xds.DefaultNodeID, "with --xds: the node `id` announced (the server keeps a snapshot per node)")
	fs.BoolVar(&x.useTLS, "xds-tls", false, "with --xds: connect over TLS (implied by the other --xds-tls-* flags)")
	fs.StringVar(&x.tls.CertFile, "xds-tls-cert", "", "with --xds: present this client certificate `file` (PEM), re-read when it changes")
	fs.StringVar(&x.tls.KeyFile, "xds-tls-key", "", "the key `file` of --xds-tls-cert")
	fs.StringVar(&x.tls.CAFile, "xds-tls-ca", "", "with --xds: trust only the CAs of this `file` for the server's certificate (default: the system's)")
	fs.StringVar(&x.tls.ServerName, "xds-tls-san", "", "with --xds: the `name` the server's certificate must be valid for (default: the host of --xds)")
	fs.BoolVar(&x.forceStart, "force-start", false, "with --xds: serve at once, answering calls with an error until the first configuration arrives (default: serve once it has)")
}

// xdsFlags are the flags that apply only with --xds.
var xdsFlags = []string{"xds-node-id", "xds-tls", "xds-tls-cert", "xds-tls-key", "xds-tls-ca", "xds-tls-san", "force-start"}

// resolveSource decides where the configuration comes from: --config
// (files), --xds, or, with neither flag, CONFIG_TYPE (FILE, the default, or
// GRPC_XDS_SOTW), and fills the xDS settings the flags left out from the
// reference's variables.
func (c *rlsConfig) resolveSource(given map[string]bool, lookup lookupFunc) error {
	env := func(name string) string { v, _ := lookup(name); return v }
	x := &c.xds
	switch {
	case given["xds"] && given["config"]:
		return errors.New("--config and --xds: the configuration comes from files or from an xDS server, give one")
	case given["xds"]:
		if x.url == "" {
			return errors.New("--xds needs the xDS server's host:port")
		}
	case given["config"]:
		x.url = ""
	default:
		switch t := strings.TrimSpace(env("CONFIG_TYPE")); {
		case t == "" || strings.EqualFold(t, "FILE"):
			x.url = ""
		case strings.EqualFold(t, "GRPC_XDS_SOTW"):
			x.url = cmp.Or(env("CONFIG_GRPC_XDS_SERVER_URL"), defaultXDSServer)
		default:
			return fmt.Errorf("CONFIG_TYPE=%q: want FILE or GRPC_XDS_SOTW", t)
		}
	}
	if x.url == "" {
		for _, f := range xdsFlags {
			if given[f] {
				return fmt.Errorf("--%s applies with --xds (or CONFIG_TYPE=GRPC_XDS_SOTW)", f)
			}
		}
		return nil
	}
	if c.check {
		return errors.New("--check validates configuration files (--config); from an xDS server each configuration is checked as it arrives, and one that does not load is refused (NACK), logged and counted (config_load_error)")
	}
	if !given["xds-node-id"] {
		x.nodeID = cmp.Or(env("CONFIG_GRPC_XDS_NODE_ID"), xds.DefaultNodeID)
	}
	x.nodeMetadata = xds.ParseNodeMetadata(env("CONFIG_GRPC_XDS_NODE_METADATA"))
	var err error
	if x.headers, err = xds.ParseHeaders(env("CONFIG_GRPC_XDS_CLIENT_ADDITIONAL_HEADERS")); err != nil {
		return fmt.Errorf("CONFIG_GRPC_XDS_CLIENT_ADDITIONAL_HEADERS: %v", err)
	}
	if err := x.resolveTLS(given, lookup); err != nil {
		return err
	}
	x.backoff = xds.DefaultBackoff
	if err := envDuration(lookup, "XDS_CLIENT_BACKOFF_INITIAL_INTERVAL", &x.backoff.Initial); err != nil {
		return err
	}
	if err := envDuration(lookup, "XDS_CLIENT_BACKOFF_MAX_INTERVAL", &x.backoff.Max); err != nil {
		return err
	}
	if err := envFloat(lookup, "XDS_CLIENT_BACKOFF_RANDOM_FACTOR", &x.backoff.Factor); err != nil {
		return err
	}
	if v, ok := lookup("XDS_CLIENT_BACKOFF_JITTER"); ok && v != "" {
		if x.backoff.Jitter, err = envBool(lookup, "XDS_CLIENT_BACKOFF_JITTER"); err != nil {
			return err
		}
	}
	retry := xds.DefaultConnectRetryInterval
	if err := envDuration(lookup, "CONFIG_GRPC_XDS_SERVER_CONNECT_RETRY_INTERVAL", &retry); err != nil {
		return err
	}
	x.connectRetry = retry
	if err := envInt(lookup, "XDS_CLIENT_MAX_MSG_SIZE_IN_BYTES", &x.maxMsgSize); err != nil {
		return err
	}
	if !given["force-start"] {
		if x.forceStart, err = envBool(lookup, "FORCE_START_WITHOUT_INITIAL_CONFIG"); err != nil {
			return err
		}
	}
	// Checked now, so that a bad value is exit status 2 at once.
	client, err := xds.NewClient(x.url, nopTarget{}, x.options(nil)...)
	if err != nil {
		return fmt.Errorf("xDS: %v", err)
	}
	return client.Close()
}

// resolveTLS fills the xDS client's TLS files: each flag wins, its
// variable fills in. TLS is on with --xds-tls or any other --xds-tls-*
// flag, or CONFIG_GRPC_XDS_SERVER_USE_TLS=true; files given while it is
// off are an error, where the reference connects in plain text.
func (x *xdsSettings) resolveTLS(given map[string]bool, lookup lookupFunc) error {
	flagGiven, fromEnv := fillFromEnv(given, lookup,
		flagOrEnv{"xds-tls-cert", "CONFIG_GRPC_XDS_CLIENT_TLS_CERT", &x.tls.CertFile},
		flagOrEnv{"xds-tls-key", "CONFIG_GRPC_XDS_CLIENT_TLS_KEY", &x.tls.KeyFile},
		flagOrEnv{"xds-tls-ca", "CONFIG_GRPC_XDS_SERVER_TLS_CACERT", &x.tls.CAFile},
		flagOrEnv{"xds-tls-san", "CONFIG_GRPC_XDS_SERVER_TLS_SAN", &x.tls.ServerName})
	x.useTLS = x.useTLS || flagGiven
	if !given["xds-tls"] {
		on, err := envBool(lookup, "CONFIG_GRPC_XDS_SERVER_USE_TLS")
		if err != nil {
			return err
		}
		x.useTLS = x.useTLS || on
	}
	if !x.useTLS && fromEnv != "" {
		return fmt.Errorf("%s is set but CONFIG_GRPC_XDS_SERVER_USE_TLS is not true: set it (the reference would connect in plain text, ignoring the file)", fromEnv)
	}
	return nil
}

// options are the xDS client's options; tlsConf is its TLS configuration,
// nil for plain text (and while resolving, where only the other options
// are checked).
func (x *xdsSettings) options(tlsConf *tls.Config) []xds.Option {
	opts := []xds.Option{
		xds.WithNodeID(x.nodeID), xds.WithNodeMetadata(x.nodeMetadata), xds.WithHeaders(x.headers),
		xds.WithBackoff(x.backoff), xds.WithMaxMessageSize(x.maxMsgSize), xds.WithConnectRetryInterval(x.connectRetry),
	}
	if tlsConf != nil {
		opts = append(opts, xds.WithTLS(tlsConf))
	}
	return opts
}

// nopTarget is the Target of the client made only to check the settings.
type nopTarget struct{}

func (nopTarget) SetConfig(*rls.Config) error { return nil }
func (nopTarget) ConfigLoadFailed()           {}

// describeDomains names a configuration's domains, for messages.
func describeDomains(cfg *rls.Config) string {
	d := cfg.Domains()
	return fmt.Sprintf("%d domain%s %s", len(d), command.Plural(int64(len(d)), "", "s"), strings.Join(d, ", "))
}

// startXDS makes and runs the xDS client feeding svc until ctx ends, its
// events logged on l and the first configuration reported to health
// when waited for. stop closes it.
func (c *rlsConfig) startXDS(ctx context.Context, svc *rls.Service, l *log.Logger, onApplied func(*rls.Config)) (client *xds.Client, stop func(), err error) {
	x := &c.xds
	var tlsConf *tls.Config
	var pair *tlsfiles.KeyPair
	if x.useTLS {
		if tlsConf, pair, err = tlsfiles.NewClientConfig(x.tls); err != nil {
			return nil, nil, fmt.Errorf("xDS TLS: %w", err)
		}
	}
	events := func(e xds.Event) {
		switch e.Kind {
		case xds.Applied:
			l.Printf("configuration from xDS server %s applied: %s", x.url, describeDomains(e.Config))
			if onApplied != nil {
				onApplied(e.Config)
			}
		case xds.Rejected:
			l.Printf("configuration from xDS server %s rejected (NACK), keeping the previous one: %v", x.url, e.Err)
		case xds.Disconnected:
			l.Printf("xDS server %s: %v; trying again in %v", x.url, e.Err, e.Retry.Round(time.Millisecond))
		}
	}
	client, err = xds.NewClient(x.url, svc, append(x.options(tlsConf), xds.WithLoadOptions(rls.MergeDomains(c.mergeDomains)), xds.WithEvents(events))...)
	if err != nil {
		return nil, nil, fmt.Errorf("xDS: %w", err)
	}
	runCtx, cancel := context.WithCancel(ctx)
	var wg sync.WaitGroup
	wg.Go(func() { _ = client.Run(runCtx) })
	if pair != nil {
		wg.Go(func() { watchPair(runCtx, pair, x.tls.CertFile, c.reloadInterval, l) })
	}
	return client, func() {
		cancel()
		client.Close()
		wg.Wait()
	}, nil
}

// serveXDS takes svc's configuration from the xDS server until ctx ends
// (stop ends it sooner): the health waits for the first configuration,
// and so does gs, returned gated, unless --force-start; with
// HEALTHY_WITH_AT_LEAST_ONE_CONFIG_LOADED the health follows whether the
// configuration has a domain. SIGHUP, which reloads the files, is
// ignored: from xDS there is nothing to reload, and it must not stop the
// command. source describes it all for the banner.
func (c *rlsConfig) serveXDS(ctx context.Context, svc *rls.Service, gs *grpc.Server, hl *serve.Health, l *log.Logger) (grpcServer serve.GRPCServer, source string, stop func(), err error) {
	first := make(chan struct{})
	var once sync.Once
	applied := func(cfg *rls.Config) {
		once.Do(func() { close(first) })
		hl.Set(healthConfig, !c.healthWithConfig || len(cfg.Domains()) > 0)
	}
	grpcServer = gs
	source = fmt.Sprintf("configuration from xDS server %s (node %s)", c.xds.url, c.xds.nodeID)
	if c.xds.forceStart {
		source += ", answering errors until the first arrives"
	} else {
		source += ", gRPC served once the first arrives"
		grpcServer = newGatedGRPC(gs, first)
	}
	if !c.xds.forceStart || c.healthWithConfig {
		hl.Set(healthConfig, false)
	}
	if _, stop, err = c.startXDS(ctx, svc, l, applied); err != nil {
		return nil, "", nil, err
	}
	signal.Ignore(syscall.SIGHUP)
	return grpcServer, source, stop, nil
}

// gatedGRPC is the gRPC server of xDS mode without --force-start: it
// starts serving once open is closed (the first configuration applied),
// or never if it is stopped before.
type gatedGRPC struct {
	*grpc.Server
	open    <-chan struct{}
	stopped chan struct{}
	once    sync.Once
}

func newGatedGRPC(s *grpc.Server, open <-chan struct{}) *gatedGRPC {
	return &gatedGRPC{Server: s, open: open, stopped: make(chan struct{})}
}

func (g *gatedGRPC) Serve(ln net.Listener) error {
	select {
	case <-g.open:
		return g.Server.Serve(ln)
	case <-g.stopped:
		return ln.Close()
	}
}

func (g *gatedGRPC) GracefulStop() {
	g.once.Do(func() { close(g.stopped) })
	g.Server.GracefulStop()
}

func (g *gatedGRPC) Stop() {
	g.once.Do(func() { close(g.stopped) })
	g.Server.Stop()
}

var _ serve.GRPCServer = (*gatedGRPC)(nil)
