package tlsfiles

import (
	"context"
	"crypto/tls"
	"errors"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/smoothrate/ratelimit/internal/tlstest"
)

// handshake connects a client with clientCfg to a server with serverCfg
// over loopback TCP and exchanges a byte, so that an error either side
// finds (a client certificate is checked after the client's handshake
// returns, in TLS 1.3) is returned. On success it returns the serial
// number of the certificate the server presented.
func handshake(t *testing.T, serverCfg, clientCfg *tls.Config) (serial string, err error) {
	t.Helper()
	ln, err := tls.Listen("tcp", "127.0.0.1:0", serverCfg)
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	serverErr := make(chan error, 1)
	go func() {
		c, err := ln.Accept()
		if err != nil {
			serverErr <- err
			return
		}
		defer c.Close()
		c.SetDeadline(time.Now().Add(10 * time.Second))
		if err := c.(*tls.Conn).Handshake(); err != nil {
			serverErr <- err
			return
		}
		_, err = c.Write([]byte{1})
		serverErr <- err
	}()
	clientCfg = clientCfg.Clone()
	if clientCfg.ServerName == "" {
		clientCfg.ServerName = "server.test"
	}
	c, err := tls.Dial("tcp", ln.Addr().String(), clientCfg)
	if err != nil {
		<-serverErr
		return "", err
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(10 * time.Second))
	_, cerr := io.ReadFull(c, make([]byte, 1))
	if err := errors.Join(<-serverErr, cerr); err != nil {
		return "", err
	}
	return c.ConnectionState().PeerCertificates[0].SerialNumber.String(), nil
}

// pki is a CA, a server certificate and a client certificate in dir.
type pki struct {
	dir               string
	ca                *tlstest.CA
	caFile            string
	server            *tlstest.Leaf
	certFile, keyFile string
	client            *tlstest.Leaf
}

func newPKI(t *testing.T) *pki {
	p := &pki{dir: t.TempDir(), ca: tlstest.NewCA(t, "test CA")}
	p.caFile = p.ca.WriteCA(t, p.dir, "ca.crt")
	p.server = p.ca.Issue(t, "server.test")
	p.certFile, p.keyFile = p.server.Write(t, p.dir, "tls.crt", "tls.key")
	p.client = p.ca.Issue(t, "envoy", "127.0.0.1")
	return p
}

// clientWith is a client configuration trusting ca, presenting cert (when
// not nil).
func clientWith(ca *tlstest.CA, cert *tlstest.Leaf, t *testing.T) *tls.Config {
	c := &tls.Config{RootCAs: ca.Pool()}
	if cert != nil {
		c.Certificates = []tls.Certificate{cert.TLS(t)}
	}
	return c
}

func TestServer(t *testing.T) {
	p := newPKI(t)
	cfg, pair, err := NewServerConfig(ServerFiles{CertFile: p.certFile, KeyFile: p.keyFile})
	if err != nil {
		t.Fatal(err)
	}
	if pair.Certificate().Leaf.SerialNumber.Cmp(p.server.Cert.SerialNumber) != 0 {
		t.Error("the pair is not the files' certificate")
	}
	if _, err := handshake(t, cfg, clientWith(p.ca, nil, t)); err != nil {
		t.Errorf("client trusting the CA: %v", err)
	}
	other := tlstest.NewCA(t, "other CA")
	if _, err := handshake(t, cfg, clientWith(other, nil, t)); err == nil {
		t.Error("a client trusting another CA connected")
	}
}

func TestServerClientCA(t *testing.T) {
	p := newPKI(t)
	cfg, _, err := NewServerConfig(ServerFiles{CertFile: p.certFile, KeyFile: p.keyFile, ClientCAFile: p.caFile})
	if err != nil {
		t.Fatal(err)
	}
	if cfg.ClientAuth != tls.RequireAndVerifyClientCert {
		t.Errorf("ClientAuth %v", cfg.ClientAuth)
	}
	if _, err := handshake(t, cfg, clientWith(p.ca, p.client, t)); err != nil {
		t.Errorf("client with a certificate of the CA: %v", err)
	}
	if _, err := handshake(t, cfg, clientWith(p.ca, nil, t)); err == nil {
		t.Error("a client without a certificate connected")
	}
	stranger := tlstest.NewCA(t, "other CA").Issue(t, "envoy")
	if _, err := handshake(t, cfg, clientWith(p.ca, stranger, t)); err == nil {
		t.Error("a client with another CA's certificate connected")
	}
}

func TestServerClientSAN(t *testing.T) {
	p := newPKI(t)
	for _, c := range []struct {
		san  string
		want bool
	}{
		{"envoy", true},
		{"127.0.0.1", true},
		{"gateway", false},
		{"127.0.0.2", false},
	} {
		cfg, _, err := NewServerConfig(ServerFiles{CertFile: p.certFile, KeyFile: p.keyFile, ClientCAFile: p.caFile, ClientSAN: c.san})
		if err != nil {
			t.Fatal(err)
		}
		_, err = handshake(t, cfg, clientWith(p.ca, p.client, t))
		if (err == nil) != c.want {
			t.Errorf("SAN %q: handshake error %v, want success %v", c.san, err, c.want)
		}
	}
	wild := p.ca.Issue(t, "*.ratelimit.test")
	cfg, _, err := NewServerConfig(ServerFiles{CertFile: p.certFile, KeyFile: p.keyFile, ClientCAFile: p.caFile, ClientSAN: "a.ratelimit.test"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := handshake(t, cfg, clientWith(p.ca, wild, t)); err != nil {
		t.Errorf("wildcard certificate: %v", err)
	}
}

func TestClient(t *testing.T) {
	p := newPKI(t)
	serverCfg, _, err := NewServerConfig(ServerFiles{CertFile: p.certFile, KeyFile: p.keyFile, ClientCAFile: p.caFile})
	if err != nil {
		t.Fatal(err)
	}
	clientCert, clientKey := p.client.Write(t, p.dir, "client.crt", "client.key")
	cfg, pair, err := NewClientConfig(ClientFiles{CertFile: clientCert, KeyFile: clientKey, CAFile: p.caFile, ServerName: "server.test"})
	if err != nil {
		t.Fatal(err)
	}
	if pair == nil {
		t.Fatal("no key pair")
	}
	if _, err := handshake(t, serverCfg, cfg); err != nil {
		t.Errorf("mutual TLS: %v", err)
	}
	wrongName := cfg.Clone()
	wrongName.ServerName = "gateway.test"
	if _, err := handshake(t, serverCfg, wrongName); err == nil {
		t.Error("connected to a server whose certificate is for another name")
	}
	// Without a client certificate, the server refuses.
	noCert, pair, err := NewClientConfig(ClientFiles{CAFile: p.caFile, ServerName: "server.test"})
	if err != nil || pair != nil {
		t.Fatal(err, pair)
	}
	if _, err := handshake(t, serverCfg, noCert); err == nil {
		t.Error("connected without a client certificate")
	}
}

func TestClientSkipHostnameVerification(t *testing.T) {
	p := newPKI(t)
	serverCfg, _, err := NewServerConfig(ServerFiles{CertFile: p.certFile, KeyFile: p.keyFile})
	if err != nil {
		t.Fatal(err)
	}
	cfg, _, err := NewClientConfig(ClientFiles{CAFile: p.caFile, ServerName: "redis.test", SkipHostnameVerification: true})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := handshake(t, serverCfg, cfg); err != nil {
		t.Errorf("a certificate for another name, names not verified: %v", err)
	}
	otherCA := tlstest.NewCA(t, "other CA").WriteCA(t, p.dir, "other.crt")
	cfg, _, err = NewClientConfig(ClientFiles{CAFile: otherCA, SkipHostnameVerification: true})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := handshake(t, serverCfg, cfg); err == nil {
		t.Error("names not verified, and the chain was not verified either")
	}
}

func TestBadFiles(t *testing.T) {
	p := newPKI(t)
	garbage := filepath.Join(p.dir, "garbage")
	if err := os.WriteFile(garbage, []byte("not PEM"), 0o600); err != nil {
		t.Fatal(err)
	}
	big := filepath.Join(p.dir, "big")
	if err := os.WriteFile(big, make([]byte, MaxFileSize+1), 0o600); err != nil {
		t.Fatal(err)
	}
	missing := filepath.Join(p.dir, "missing")
	_, otherKey := p.client.Write(t, p.dir, "c.crt", "c.key")
	for _, c := range []struct {
		name string
		err  error
		want string
	}{
		{"no key", second(NewServerConfig(ServerFiles{CertFile: p.certFile})), "both a certificate file and a key file"},
		{"missing cert", second(NewServerConfig(ServerFiles{CertFile: missing, KeyFile: p.keyFile})), "no such file"},
		{"key of another cert", second(NewServerConfig(ServerFiles{CertFile: p.certFile, KeyFile: otherKey})), "does not match"},
		{"SAN without CA", second(NewServerConfig(ServerFiles{CertFile: p.certFile, KeyFile: p.keyFile, ClientSAN: "envoy"})), "needs a client CA"},
		{"CA not PEM", second(NewServerConfig(ServerFiles{CertFile: p.certFile, KeyFile: p.keyFile, ClientCAFile: garbage})), "no PEM certificate"},
		{"CA too large", second(NewClientConfig(ClientFiles{CAFile: big})), "larger than"},
		{"client cert without key", second(NewClientConfig(ClientFiles{CertFile: p.certFile})), "both a certificate file and a key file"},
	} {
		if c.err == nil || !strings.Contains(c.err.Error(), c.want) {
			t.Errorf("%s: got %v, want an error with %q", c.name, c.err, c.want)
		}
	}
}

// second is the error of a constructor's three results.
func second[A, B any](_ A, _ B, err error) error { return err }

// A certificate rotated in place is served after Reload, without a new
// configuration; Reload reports no change when nothing changed.
func TestReloadRotated(t *testing.T) {
	p := newPKI(t)
	cfg, pair, err := NewServerConfig(ServerFiles{CertFile: p.certFile, KeyFile: p.keyFile})
	if err != nil {
		t.Fatal(err)
	}
	client := clientWith(p.ca, nil, t)
	if got, err := handshake(t, cfg, client); err != nil || got != p.server.Cert.SerialNumber.String() {
		t.Fatalf("before: serial %s, %v", got, err)
	}
	if changed, err := pair.Reload(); changed || err != nil {
		t.Errorf("Reload with no change: %v, %v", changed, err)
	}
	next := p.ca.Issue(t, "server.test")
	next.Write(t, p.dir, "tls.crt", "tls.key")
	if got, _ := handshake(t, cfg, client); got != p.server.Cert.SerialNumber.String() {
		t.Error("the files were read during a handshake")
	}
	if changed, err := pair.Reload(); !changed || err != nil {
		t.Fatalf("Reload after rotation: %v, %v", changed, err)
	}
	if got, err := handshake(t, cfg, client); err != nil || got != next.Cert.SerialNumber.String() {
		t.Errorf("after: serial %s, %v; want the new certificate %s", got, err, next.Cert.SerialNumber)
	}
}

// A Kubernetes secret volume: tls.crt and tls.key are links into ..data,
// itself a link to a timestamped directory that an update replaces by
// swapping ..data.
func TestReloadKubernetesSecretSwap(t *testing.T) {
	ca := tlstest.NewCA(t, "test CA")
	dir := t.TempDir()
	first := ca.Issue(t, "server.test")
	first.Write(t, dir, "..2026_01_01_00_00_00.1/tls.crt", "..2026_01_01_00_00_00.1/tls.key")
	for _, l := range [][2]string{
		{"..2026_01_01_00_00_00.1", "..data"},
		{"..data/tls.crt", "tls.crt"},
		{"..data/tls.key", "tls.key"},
	} {
		if err := os.Symlink(l[0], filepath.Join(dir, l[1])); err != nil {
			t.Fatal(err)
		}
	}
	cfg, pair, err := NewServerConfig(ServerFiles{CertFile: filepath.Join(dir, "tls.crt"), KeyFile: filepath.Join(dir, "tls.key")})
	if err != nil {
		t.Fatal(err)
	}
	next := ca.Issue(t, "server.test")
	next.Write(t, dir, "..2026_02_01_00_00_00.2/tls.crt", "..2026_02_01_00_00_00.2/tls.key")
	if err := os.Symlink("..2026_02_01_00_00_00.2", filepath.Join(dir, "..data_tmp")); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(filepath.Join(dir, "..data_tmp"), filepath.Join(dir, "..data")); err != nil {
		t.Fatal(err)
	}
	if err := os.RemoveAll(filepath.Join(dir, "..2026_01_01_00_00_00.1")); err != nil {
		t.Fatal(err)
	}
	if changed, err := pair.Reload(); !changed || err != nil {
		t.Fatalf("Reload after the swap: %v, %v", changed, err)
	}
	if got, err := handshake(t, cfg, clientWith(ca, nil, t)); err != nil || got != next.Cert.SerialNumber.String() {
		t.Errorf("after the swap: serial %s, %v; want %s", got, err, next.Cert.SerialNumber)
	}
}

// A bad new file keeps the pair in use and reports the error once; the
// next good file is loaded.
func TestReloadBadFileKeepsPair(t *testing.T) {
	p := newPKI(t)
	cfg, pair, err := NewServerConfig(ServerFiles{CertFile: p.certFile, KeyFile: p.keyFile})
	if err != nil {
		t.Fatal(err)
	}
	client := clientWith(p.ca, nil, t)
	for _, bad := range []struct {
		name    string
		prepare func()
	}{
		{"garbage", func() { os.WriteFile(p.certFile, []byte("-----BEGIN CERTIFICATE-----\nnot base64\n"), 0o600) }},
		{"half-written rotation", func() {
			next := p.ca.Issue(t, "server.test")
			os.WriteFile(p.certFile, next.CertPEM, 0o600) // the key is still the old one
		}},
		{"missing", func() { os.Remove(p.certFile) }},
	} {
		bad.prepare()
		if changed, err := pair.Reload(); changed || err == nil {
			t.Errorf("%s: Reload = %v, %v; want an error", bad.name, changed, err)
		}
		if got, err := handshake(t, cfg, client); err != nil || got != p.server.Cert.SerialNumber.String() {
			t.Errorf("%s: serial %s, %v; want the old certificate", bad.name, got, err)
		}
		p.server.Write(t, p.dir, "tls.crt", "tls.key")
		if _, err := pair.Reload(); err != nil {
			t.Fatalf("%s: restoring: %v", bad.name, err)
		}
	}
	// A bad pair is reported once, not at every Reload.
	os.WriteFile(p.keyFile, []byte("junk"), 0o600)
	if _, err := pair.Reload(); err == nil {
		t.Fatal("a junk key loaded")
	}
	if changed, err := pair.Reload(); changed || err != nil {
		t.Errorf("the same junk again: %v, %v; want no change and no error", changed, err)
	}
}

// Watch reloads every interval and reports a reload and a failure once
// each.
func TestWatch(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p := newPKI(t)
		pair, err := LoadKeyPair(p.certFile, p.keyFile)
		if err != nil {
			t.Fatal(err)
		}
		reports := make(chan error, 10)
		ctx, cancel := context.WithCancel(t.Context())
		done := make(chan struct{})
		go func() {
			pair.Watch(ctx, time.Second, func(err error) { reports <- err })
			close(done)
		}()
		next := p.ca.Issue(t, "server.test")
		next.Write(t, p.dir, "tls.crt", "tls.key")
		time.Sleep(time.Second)
		synctest.Wait()
		if got := drain(reports); len(got) != 1 || got[0] != nil {
			t.Fatalf("after a rotation: reports %v, want one nil", got)
		}
		if pair.Certificate().Leaf.SerialNumber.Cmp(next.Cert.SerialNumber) != 0 {
			t.Error("the rotated certificate is not in use")
		}
		os.Remove(p.certFile)
		time.Sleep(3 * time.Second)
		synctest.Wait()
		if got := drain(reports); len(got) != 1 || got[0] == nil {
			t.Fatalf("after three checks of a missing file: reports %v, want one error", got)
		}
		cancel()
		<-done
	})
}

func drain(c chan error) []error {
	var out []error
	for {
		select {
		case err := <-c:
			out = append(out, err)
		default:
			return out
		}
	}
}

// The handshakes themselves are not slowed by the files: GetCertificate
// returns the pair in memory even when the files are gone.
func TestGetCertificateDoesNotReadFiles(t *testing.T) {
	p := newPKI(t)
	pair, err := LoadKeyPair(p.certFile, p.keyFile)
	if err != nil {
		t.Fatal(err)
	}
	os.Remove(p.certFile)
	os.Remove(p.keyFile)
	c, err := pair.GetCertificate(&tls.ClientHelloInfo{})
	if err != nil || c == nil {
		t.Errorf("GetCertificate with the files gone: %v, %v", c, err)
	}
	c, err = pair.GetClientCertificate(&tls.CertificateRequestInfo{})
	if err != nil || c == nil {
		t.Errorf("GetClientCertificate with the files gone: %v, %v", c, err)
	}
}

// An update that lands between the reads of the two files (the old
// certificate read, then the new key) is read again, not reported.
func TestReloadUpdateBetweenReads(t *testing.T) {
	p := newPKI(t)
	pair, err := LoadKeyPair(p.certFile, p.keyFile)
	if err != nil {
		t.Fatal(err)
	}
	next := p.ca.Issue(t, "server.test")
	pair.betweenReads = func() {
		pair.betweenReads = nil
		next.Write(t, p.dir, "tls.crt", "tls.key")
	}
	if changed, err := pair.Reload(); err != nil || !changed {
		t.Fatalf("Reload across an update: %v, %v", changed, err)
	}
	if pair.Certificate().Leaf.SerialNumber.Cmp(next.Cert.SerialNumber) != 0 {
		t.Error("the new pair is not in use")
	}
}
