package tlsfiles

import (
	"bytes"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"os"
	"sync"
	"sync/atomic"
	"time"
)

// MaxFileSize bounds every file this package reads: a certificate chain or
// a CA bundle is a few kilobytes, and a path pointed at something else
// (a device, a huge log) must not be read whole every few seconds.
const MaxFileSize = 1 << 20

// KeyPair is a certificate and its key read from two files, re-read by
// Reload when either file changes. GetCertificate and GetClientCertificate
// return the pair in memory: the handshake never touches the files. It is
// safe for concurrent use.
type KeyPair struct {
	certFile, keyFile string
	cur               atomic.Pointer[tls.Certificate]

	mu sync.Mutex // one Reload at a time; guards the fields below
	// certPEM and keyPEM are the contents of the last attempt, loaded or
	// not, so that a bad pair is reported once and not re-parsed until a
	// file changes again.
	certPEM, keyPEM []byte

	betweenReads func() // tests update the files there
}

// LoadKeyPair reads a PEM certificate (chain) and key.
func LoadKeyPair(certFile, keyFile string) (*KeyPair, error) {
	if certFile == "" || keyFile == "" {
		return nil, errors.New("tls: a certificate needs both a certificate file and a key file")
	}
	k := &KeyPair{certFile: certFile, keyFile: keyFile}
	if _, err := k.Reload(); err != nil {
		return nil, err
	}
	return k, nil
}

// Certificate returns the pair in use.
func (k *KeyPair) Certificate() *tls.Certificate { return k.cur.Load() }

// GetCertificate serves the pair in use (tls.Config.GetCertificate).
func (k *KeyPair) GetCertificate(*tls.ClientHelloInfo) (*tls.Certificate, error) {
	return k.cur.Load(), nil
}

// GetClientCertificate presents the pair in use to a server that asks for
// a client certificate (tls.Config.GetClientCertificate).
func (k *KeyPair) GetClientCertificate(*tls.CertificateRequestInfo) (*tls.Certificate, error) {
	return k.cur.Load(), nil
}

// Reload reads both files and, when either differs from the last attempt,
// makes them the pair in use; it reports whether it did. Files are
// followed through symbolic links at each call, so a Kubernetes secret
// update (which swaps a ..data link) is seen like a file rewritten in
// place. When the files cannot be read or do not form a pair (a bad
// certificate, a key that does not match it, a rotation caught half
// written), the pair in use is kept and the error returned; the next
// change is tried again.
func (k *KeyPair) Reload() (changed bool, err error) {
	k.mu.Lock()
	defer k.mu.Unlock()
	certPEM, keyPEM, err := k.read()
	if err != nil {
		return false, err
	}
	if k.cur.Load() != nil && bytes.Equal(certPEM, k.certPEM) && bytes.Equal(keyPEM, k.keyPEM) {
		return false, nil
	}
	pair, err := tls.X509KeyPair(certPEM, keyPEM)
	if err != nil {
		// The two files are read one after the other: an update between
		// the reads (a ..data swap) pairs the old certificate with the
		// new key. Read them again once before calling it an error.
		if c, k2, rerr := k.read(); rerr == nil && (!bytes.Equal(c, certPEM) || !bytes.Equal(k2, keyPEM)) {
			certPEM, keyPEM = c, k2
			pair, err = tls.X509KeyPair(certPEM, keyPEM)
		}
	}
	k.certPEM, k.keyPEM = certPEM, keyPEM
	if err != nil {
		return false, fmt.Errorf("tls: certificate %s with key %s: %w", k.certFile, k.keyFile, err)
	}
	k.cur.Store(&pair)
	return true, nil
}

// read reads the certificate file, then the key file.
func (k *KeyPair) read() (certPEM, keyPEM []byte, err error) {
	if certPEM, err = readFile(k.certFile); err != nil {
		return nil, nil, err
	}
	if k.betweenReads != nil {
		k.betweenReads()
	}
	if keyPEM, err = readFile(k.keyFile); err != nil {
		return nil, nil, err
	}
	return certPEM, keyPEM, nil
}

// DefaultWatchInterval is Watch's interval when it is given none.
const DefaultWatchInterval = 10 * time.Second

// Watch calls Reload every interval (DefaultWatchInterval when interval is
// not positive) until ctx ends, and report after each call that replaced
// the pair (with nil) or failed (with the error; the same error again is
// not reported until another result comes between). Run it in its own
// goroutine.
func (k *KeyPair) Watch(ctx context.Context, interval time.Duration, report func(error)) {
	if interval <= 0 {
		interval = DefaultWatchInterval
	}
	t := time.NewTicker(interval)
	defer t.Stop()
	var last string
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		changed, err := k.Reload()
		switch {
		case err != nil:
			if err.Error() != last && report != nil {
				report(err)
			}
			last = err.Error()
		case changed:
			last = ""
			if report != nil {
				report(nil)
			}
		default:
			last = ""
		}
	}
}

// readFile reads a whole file of at most MaxFileSize bytes.
func readFile(path string) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("tls: %w", err)
	}
	defer f.Close()
	b, err := io.ReadAll(io.LimitReader(f, MaxFileSize+1))
	if err != nil {
		return nil, fmt.Errorf("tls: %s: %w", path, err)
	}
	if len(b) > MaxFileSize {
		return nil, fmt.Errorf("tls: %s: larger than %d bytes", path, MaxFileSize)
	}
	return b, nil
}
