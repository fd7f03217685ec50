package rlsbench

import (
	"crypto/tls"
	"os"
	"path/filepath"

	"github.com/smoothrate/ratelimit/internal/tlstest"
)

// Certs are Envoy Gateway's secret envoy-rate-limit as it is mounted at
// /certs: one CA (ca.crt) and one certificate it signed (tls.crt,
// tls.key), which the rate limit service presents as its gRPC server
// certificate and as its client certificate to the xDS server. Made
// afresh for each run, valid for 127.0.0.1, where every server here
// listens.
type Certs struct {
	Dir  string
	CA   *tlstest.CA
	Leaf *tlstest.Leaf
}

// MakeCerts makes a CA and the certificate and writes them into dir.
func MakeCerts(dir string) (*Certs, error) {
	ca, err := tlstest.MakeCA("rlsbench CA")
	if err != nil {
		return nil, err
	}
	leaf, err := ca.MakeLeaf("envoy-ratelimit", "envoy-gateway", "127.0.0.1")
	if err != nil {
		return nil, err
	}
	c := &Certs{Dir: dir, CA: ca, Leaf: leaf}
	for name, b := range map[string][]byte{"ca.crt": ca.PEM, "tls.crt": leaf.CertPEM, "tls.key": leaf.KeyPEM} {
		if err := os.WriteFile(c.File(name), b, 0o600); err != nil {
			return nil, err
		}
	}
	return c, nil
}

// File is the path of ca.crt, tls.crt or tls.key.
func (c *Certs) File(name string) string { return filepath.Join(c.Dir, name) }

// ClientTLS is what a client of the rate limit service (Envoy) uses: it
// trusts the CA and presents no certificate, as the reference under Envoy
// Gateway asks for none.
func (c *Certs) ClientTLS() *tls.Config {
	return &tls.Config{RootCAs: c.CA.Pool(), MinVersion: tls.VersionTLS12}
}
