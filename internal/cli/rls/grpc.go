package rls

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log"
	"net"
	"strings"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/keepalive"

	"github.com/smoothrate/ratelimit/internal/cli/serve"
	"github.com/smoothrate/ratelimit/internal/tlsfiles"
)

// This file holds how the gRPC server is reached: its address (TCP or a
// Unix socket), TLS (the certificate re-read when it changes, client
// certificates when asked for) and the age of its connections, from the
// flags or the reference's variables.

// rlsStreamWorkers is how many goroutines serve ShouldRateLimit calls and
// stay for the next: more than the calls in flight under load (a worker
// blocked on the store counts), so that few calls pay for a new goroutine
// and the growth of its stack; the calls beyond them get one, as without
// workers.
const rlsStreamWorkers = 64

// The reference's defaults for GRPC_MAX_CONNECTION_AGE and _GRACE: a
// client reconnects at least daily, so that connections spread over new
// instances.
const (
	defaultMaxConnectionAge      = 24 * time.Hour
	defaultMaxConnectionAgeGrace = time.Hour
)

// grpcSettings are the gRPC server's TLS, connection ages and streams; its
// address is rlsConfig.grpcAddr.
type grpcSettings struct {
	useTLS      bool
	tls         tlsfiles.ServerFiles
	maxAge      time.Duration
	maxAgeGrace time.Duration
	maxStreams  int
}

// registerGRPCFlags adds the gRPC server's TLS and age flags to fs.
func registerGRPCFlags(fs *flag.FlagSet, g *grpcSettings) {
	fs.StringVar(&g.tls.CertFile, "grpc-tls-cert", "", "serve gRPC over TLS with this certificate `file` (PEM), re-read when it changes")
	fs.StringVar(&g.tls.KeyFile, "grpc-tls-key", "", "the key `file` of --grpc-tls-cert")
	fs.StringVar(&g.tls.ClientCAFile, "grpc-tls-client-ca", "", "with --grpc-tls-cert: require a client certificate signed by a CA of this `file`")
	fs.StringVar(&g.tls.ClientSAN, "grpc-tls-client-san", "", "with --grpc-tls-client-ca: require the client certificate to be valid for this `name`")
	fs.DurationVar(&g.maxAge, "grpc-max-connection-age", defaultMaxConnectionAge, "close a gRPC connection this old (GOAWAY), so that clients spread over new instances (0: never)")
	fs.DurationVar(&g.maxAgeGrace, "grpc-max-connection-age-grace", defaultMaxConnectionAgeGrace, "let the calls of a connection closed for its age finish within this long (0: no bound)")
	serve.RegisterMaxStreams(fs, &g.maxStreams)
}

// resolveGRPC fills the gRPC server's settings the flags left out from the
// reference's variables and checks them. GRPC_UDS replaces
// GRPC_HOST:GRPC_PORT, as it does for the reference. TLS is on with any
// --grpc-tls-* flag or GRPC_SERVER_USE_TLS=true; a variable naming a file
// while it is off is an error, where the reference serves plain text.
// GRPC_SERVER_TLS_CA_CERT, which Envoy Gateway sets and the reference does
// not read, is ignored as the reference ignores it: client certificates
// are asked for only with GRPC_CLIENT_TLS_CACERT.
func (c *rlsConfig) resolveGRPC(given map[string]bool, lookup lookupFunc) error {
	g := &c.grpc
	if !given["grpc"] {
		if uds, _ := lookup("GRPC_UDS"); uds != "" {
			c.grpcAddr = serve.UnixPrefix + uds
		} else {
			var err error
			if c.grpcAddr, err = envAddr(lookup, "GRPC_HOST", "GRPC_PORT", c.grpcAddr); err != nil {
				return err
			}
		}
	}
	if path, ok := strings.CutPrefix(c.grpcAddr, serve.UnixPrefix); ok {
		if path == "" {
			return errors.New("--grpc unix: needs the socket's path, e.g. unix:/run/ratelimit/rls.sock")
		}
	} else if _, _, err := net.SplitHostPort(c.grpcAddr); err != nil {
		return fmt.Errorf("--grpc %q: want host:port, :port or unix:PATH", c.grpcAddr)
	}

	flagGiven, fromEnv := fillFromEnv(given, lookup,
		flagOrEnv{"grpc-tls-cert", "GRPC_SERVER_TLS_CERT", &g.tls.CertFile},
		flagOrEnv{"grpc-tls-key", "GRPC_SERVER_TLS_KEY", &g.tls.KeyFile},
		flagOrEnv{"grpc-tls-client-ca", "GRPC_CLIENT_TLS_CACERT", &g.tls.ClientCAFile},
		flagOrEnv{"grpc-tls-client-san", "GRPC_CLIENT_TLS_SAN", &g.tls.ClientSAN})
	on, err := envBool(lookup, "GRPC_SERVER_USE_TLS")
	if err != nil {
		return err
	}
	g.useTLS = flagGiven || on
	switch {
	case !g.useTLS && fromEnv != "":
		return fmt.Errorf("%s is set but GRPC_SERVER_USE_TLS is not true: set it (the reference would serve plain text, ignoring the file)", fromEnv)
	case g.useTLS && (g.tls.CertFile == "" || g.tls.KeyFile == ""):
		return errors.New("gRPC over TLS needs a certificate and its key: --grpc-tls-cert and --grpc-tls-key (GRPC_SERVER_TLS_CERT, GRPC_SERVER_TLS_KEY)")
	case g.tls.ClientSAN != "" && g.tls.ClientCAFile == "":
		return errors.New("--grpc-tls-client-san (GRPC_CLIENT_TLS_SAN) needs --grpc-tls-client-ca (GRPC_CLIENT_TLS_CACERT): without a CA no client certificate is asked for")
	}

	if !given["grpc-max-connection-age"] {
		if err := envDuration(lookup, "GRPC_MAX_CONNECTION_AGE", &g.maxAge); err != nil {
			return err
		}
	}
	if !given["grpc-max-connection-age-grace"] {
		if err := envDuration(lookup, "GRPC_MAX_CONNECTION_AGE_GRACE", &g.maxAgeGrace); err != nil {
			return err
		}
	}
	if g.maxAge < 0 || g.maxAgeGrace < 0 {
		return errors.New("--grpc-max-connection-age and -grace: want a duration of 0 or more")
	}
	return serve.CheckMaxStreams(g.maxStreams)
}

// listenGRPC listens on the gRPC address, TCP or a Unix socket.
func (c *rlsConfig) listenGRPC(ls *serve.Listeners) (net.Listener, error) {
	if path, ok := strings.CutPrefix(c.grpcAddr, serve.UnixPrefix); ok {
		return ls.ListenUnix("--grpc", path)
	}
	return ls.Listen("--grpc", c.grpcAddr)
}

// grpcAddrString names the address listened on, for the banner: a Unix
// socket as unix:PATH, as --grpc takes it.
func grpcAddrString(ln net.Listener) string {
	if ln.Addr().Network() == "unix" {
		return serve.UnixPrefix + ln.Addr().String()
	}
	return ln.Addr().String()
}

// grpcServerOptions are the gRPC server's options, and the certificate it
// serves (nil without TLS) for the caller to keep fresh (watchPair).
func (c *rlsConfig) grpcServerOptions() ([]grpc.ServerOption, *tlsfiles.KeyPair, error) {
	opts := append(serve.GRPCOptions(c.grpc.maxStreams),
		grpc.NumStreamWorkers(rlsStreamWorkers),
		grpc.KeepaliveParams(keepalive.ServerParameters{MaxConnectionAge: c.grpc.maxAge, MaxConnectionAgeGrace: c.grpc.maxAgeGrace}),
	)
	if !c.grpc.useTLS {
		return opts, nil, nil
	}
	cfg, pair, err := tlsfiles.NewServerConfig(c.grpc.tls)
	if err != nil {
		return nil, nil, fmt.Errorf("gRPC TLS: %w", err)
	}
	return append(opts, grpc.Creds(credentials.NewTLS(cfg))), pair, nil
}

// watchPair re-reads a certificate and its key every interval until ctx
// ends, logging each change and each failure (the pair in use is kept).
func watchPair(ctx context.Context, pair *tlsfiles.KeyPair, certFile string, interval time.Duration, l *log.Logger) {
	pair.Watch(ctx, interval, func(err error) {
		if err != nil {
			l.Printf("TLS certificate %s: %v; keeping the one in use", certFile, err)
			return
		}
		l.Printf("TLS certificate %s reloaded", certFile)
	})
}
