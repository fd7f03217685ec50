package redisflag

import (
	"context"
	"crypto/tls"
	"errors"
	"flag"
	"sync"
	"time"

	"github.com/smoothrate/ratelimit/internal/tlsfiles"
)

// TLS are the files of a Redis client over TLS, as envoyproxy/ratelimit's
// REDIS_TLS_* settings name them: a client certificate and key, presented
// when the server asks for one (Redis's tls-auth-clients), the CAs that
// sign the server's certificate (the system's roots without them), and
// whether to verify the server's chain but not its name. TLS itself is
// turned on by the URL (rediss://) or by REDIS_TLS=true.
type TLS struct {
	CertFile, KeyFile, CAFile string
	SkipHostnameVerification  bool
}

// Register adds --redis-tls-cert, --redis-tls-key, --redis-tls-ca and
// --redis-tls-skip-hostname-verification to fs.
func (t *TLS) Register(fs *flag.FlagSet) {
	fs.StringVar(&t.CertFile, "redis-tls-cert", "", "with a rediss:// URL: present this client certificate `file` (PEM) to Redis, re-read when it changes")
	fs.StringVar(&t.KeyFile, "redis-tls-key", "", "the key `file` of --redis-tls-cert")
	fs.StringVar(&t.CAFile, "redis-tls-ca", "", "with a rediss:// URL: trust only the CAs of this `file` (PEM) for Redis's certificate (default: the system's)")
	fs.BoolVar(&t.SkipHostnameVerification, "redis-tls-skip-hostname-verification", false, "with a rediss:// URL: verify Redis's certificate chain but not the name it is for")
}

// Given reports whether any file or option is set.
func (t TLS) Given() bool { return t != TLS{} }

// Config returns the client's TLS configuration and its certificate (nil
// without one), for the caller to keep fresh (KeyPair.Watch). The server's
// name is left to the address dialled, so that each node of a Cluster is
// verified for its own name.
func (t TLS) Config() (*tls.Config, *tlsfiles.KeyPair, error) {
	cfg, pair, err := tlsfiles.NewClientConfig(tlsfiles.ClientFiles{
		CertFile: t.CertFile, KeyFile: t.KeyFile, CAFile: t.CAFile, SkipHostnameVerification: t.SkipHostnameVerification,
	})
	if err != nil {
		return nil, nil, err
	}
	cfg.MinVersion = tls.VersionTLS12
	return cfg, pair, nil
}

// errTLSWithoutTLS: TLS files for a URL that does not ask for TLS.
var errTLSWithoutTLS = errors.New("the --redis-tls-* flags need a rediss:// or rediss+cluster:// URL")

// WatchCert keeps cert, the client certificate of file (--redis-tls-cert),
// fresh until the returned stop: it reads the files again every interval
// (0: tlsfiles' default) and says each reload, and each failed one (the
// certificate in use is kept), with logf. With a nil cert it does nothing.
func WatchCert(cert *tlsfiles.KeyPair, file string, interval time.Duration, logf func(format string, args ...any)) (stop func()) {
	if cert == nil {
		return func() {}
	}
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Go(func() {
		cert.Watch(ctx, interval, func(err error) {
			if err != nil {
				logf("Redis client certificate %s: %v; keeping the one in use", file, err)
			} else {
				logf("Redis client certificate %s reloaded", file)
			}
		})
	})
	return func() {
		cancel()
		wg.Wait()
	}
}
