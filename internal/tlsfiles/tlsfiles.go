// Package tlsfiles builds the TLS configurations of the command's servers
// and clients from certificate files, as envoyproxy/ratelimit's settings
// name them: the rls and rlqs gRPC servers (GRPC_SERVER_TLS_CERT/_KEY,
// GRPC_CLIENT_TLS_CACERT, GRPC_CLIENT_TLS_SAN), the xDS client
// (CONFIG_GRPC_XDS_CLIENT_TLS_CERT/_KEY, CONFIG_GRPC_XDS_SERVER_TLS_CACERT,
// CONFIG_GRPC_XDS_SERVER_TLS_SAN) and Redis (REDIS_TLS_CLIENT_CERT/_KEY,
// REDIS_TLS_CACERT).
//
// A certificate and key are a KeyPair, kept in memory and re-read when the
// files change (KeyPair.Watch), so that a rotated certificate, such as a
// Kubernetes secret updated by cert-manager, is served without a restart;
// a bad new file keeps the old pair. CA files are read once.
//
// Where it differs from the reference on purpose:
//
//   - A CA file is the only trust anchor of what it verifies; the
//     reference adds it to the system's roots, so that its client
//     verification (GRPC_CLIENT_TLS_CACERT) also accepts a client
//     certificate from any public CA.
//   - GRPC_CLIENT_TLS_SAN without GRPC_CLIENT_TLS_CACERT, and a certificate
//     without its key, are errors; the reference ignores them (so accepts
//     every client, or presents no certificate).
//   - The client certificate of the xDS and Redis clients is reloaded too.
package tlsfiles

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
)

// ServerFiles are the files of a TLS server.
type ServerFiles struct {
	// CertFile and KeyFile are the server's certificate (chain) and key
	// (GRPC_SERVER_TLS_CERT, GRPC_SERVER_TLS_KEY). Both are required.
	CertFile, KeyFile string
	// ClientCAFile, when set, requires every client to present a
	// certificate signed by one of its CAs (GRPC_CLIENT_TLS_CACERT).
	ClientCAFile string
	// ClientSAN, when set, also requires the client certificate to be
	// valid for this name (GRPC_CLIENT_TLS_SAN): a DNS name matched
	// against its DNS names (wildcards included), or an IP address
	// against its IP addresses, as x509.Certificate.VerifyHostname
	// matches them; the reference checks the same with
	// x509.VerifyOptions.DNSName. Needs ClientCAFile.
	ClientSAN string
}

// NewServerConfig returns the server's TLS configuration and the KeyPair
// it serves, for the caller to Watch.
func NewServerConfig(f ServerFiles) (*tls.Config, *KeyPair, error) {
	if f.ClientSAN != "" && f.ClientCAFile == "" {
		return nil, nil, errors.New("tls: a client SAN to verify needs a client CA file")
	}
	pair, err := LoadKeyPair(f.CertFile, f.KeyFile)
	if err != nil {
		return nil, nil, err
	}
	cfg := &tls.Config{GetCertificate: pair.GetCertificate}
	if f.ClientCAFile != "" {
		pool, err := loadPool(f.ClientCAFile)
		if err != nil {
			return nil, nil, err
		}
		cfg.ClientCAs = pool
		cfg.ClientAuth = tls.RequireAndVerifyClientCert
	}
	if san := f.ClientSAN; san != "" {
		// VerifyConnection, unlike VerifyPeerCertificate, also runs on
		// resumed sessions.
		cfg.VerifyConnection = func(cs tls.ConnectionState) error {
			if len(cs.PeerCertificates) == 0 {
				return errors.New("tls: no client certificate")
			}
			if err := cs.PeerCertificates[0].VerifyHostname(san); err != nil {
				return fmt.Errorf("tls: client certificate: %w", err)
			}
			return nil
		}
	}
	return cfg, pair, nil
}

// ClientFiles are the files of a TLS client.
type ClientFiles struct {
	// CertFile and KeyFile are the client's certificate and key, presented
	// when the server asks for one (CONFIG_GRPC_XDS_CLIENT_TLS_CERT/_KEY,
	// REDIS_TLS_CLIENT_CERT/_KEY). Both or neither.
	CertFile, KeyFile string
	// CAFile holds the CAs that sign the server's certificate
	// (CONFIG_GRPC_XDS_SERVER_TLS_CACERT, REDIS_TLS_CACERT); empty: the
	// system's roots.
	CAFile string
	// ServerName is the name the server's certificate must be valid for
	// (CONFIG_GRPC_XDS_SERVER_TLS_SAN); empty: the host of the address
	// dialled.
	ServerName string
	// SkipHostnameVerification verifies the server's chain but not its
	// name (REDIS_TLS_SKIP_HOSTNAME_VERIFICATION).
	SkipHostnameVerification bool
}

// NewClientConfig returns the client's TLS configuration and its KeyPair
// (nil without a client certificate), for the caller to Watch.
func NewClientConfig(f ClientFiles) (*tls.Config, *KeyPair, error) {
	cfg := &tls.Config{ServerName: f.ServerName}
	var pair *KeyPair
	if f.CertFile != "" || f.KeyFile != "" {
		var err error
		if pair, err = LoadKeyPair(f.CertFile, f.KeyFile); err != nil {
			return nil, nil, err
		}
		cfg.GetClientCertificate = pair.GetClientCertificate
	}
	if f.CAFile != "" {
		pool, err := loadPool(f.CAFile)
		if err != nil {
			return nil, nil, err
		}
		cfg.RootCAs = pool
	}
	if f.SkipHostnameVerification {
		// Go verifies the name with the chain; to keep the chain, skip
		// both and verify the chain here.
		cfg.InsecureSkipVerify = true
		roots := cfg.RootCAs
		cfg.VerifyConnection = func(cs tls.ConnectionState) error {
			if len(cs.PeerCertificates) == 0 {
				return errors.New("tls: no server certificate")
			}
			opts := x509.VerifyOptions{Roots: roots, Intermediates: x509.NewCertPool()}
			for _, c := range cs.PeerCertificates[1:] {
				opts.Intermediates.AddCert(c)
			}
			_, err := cs.PeerCertificates[0].Verify(opts)
			return err
		}
	}
	return cfg, pair, nil
}

// loadPool reads a PEM file of CA certificates.
func loadPool(path string) (*x509.CertPool, error) {
	b, err := readFile(path)
	if err != nil {
		return nil, err
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(b) {
		return nil, fmt.Errorf("tls: %s: no PEM certificate", path)
	}
	return pool, nil
}
