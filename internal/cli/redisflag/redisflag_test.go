package redisflag

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/smoothrate/ratelimit/internal/redisscript"
	"github.com/smoothrate/ratelimit/internal/redistest"
	"github.com/smoothrate/ratelimit/internal/tlstest"
	"github.com/smoothrate/ratelimit/throttle"
)

// The URL forms reach go-redis as the right client with the right nodes.
func TestParseRedisURL(t *testing.T) {
	for _, c := range []struct {
		url, where string
		cluster    bool
		addrs      []string
		user, pass string
		db         int
		tls        bool
	}{
		{url: "redis://127.0.0.1:6380/2", where: "127.0.0.1:6380", addrs: []string{"127.0.0.1:6380"}, db: 2},
		{url: "rediss://u:p@example.com:6390", where: "example.com:6390", addrs: []string{"example.com:6390"}, user: "u", pass: "p", tls: true},
		{url: "redis+cluster://a:1,b:2,c:3", where: "a:1,b:2,c:3", cluster: true, addrs: []string{"a:1", "b:2", "c:3"}},
		{url: "rediss+cluster://u:p@a:1,b:2/?dial_timeout=2s", where: "a:1,b:2", cluster: true, addrs: []string{"a:1", "b:2"}, user: "u", pass: "p", tls: true},
		// go-redis's own cluster form.
		{url: "redis+cluster://a:1?addr=b:2", where: "a:1,b:2", cluster: true, addrs: []string{"a:1", "b:2"}},
	} {
		newClient, where, err := ParseURL(c.url, "")
		if err != nil {
			t.Errorf("%s: %v", c.url, err)
			continue
		}
		if where != c.where {
			t.Errorf("%s: where %q, want %q", c.url, where, c.where)
		}
		client := newClient()
		var addrs []string
		var user, pass string
		var db int
		var tls, ctxTimeout bool
		switch cl := client.(type) {
		case *redis.Client:
			o := cl.Options()
			addrs, user, pass, db, tls, ctxTimeout = []string{o.Addr}, o.Username, o.Password, o.DB, o.TLSConfig != nil, o.ContextTimeoutEnabled
		case *redis.ClusterClient:
			o := cl.Options()
			addrs, user, pass, tls, ctxTimeout = o.Addrs, o.Username, o.Password, o.TLSConfig != nil, o.ContextTimeoutEnabled
			// A failover must be noticed within a second, not the
			// go-redis default of 60 s.
			if o.ClusterStateReloadInterval <= 0 || o.ClusterStateReloadInterval > time.Second {
				t.Errorf("%s: ClusterStateReloadInterval %v, want (0, 1s]", c.url, o.ClusterStateReloadInterval)
			}
		}
		_ = client.Close()
		_, isCluster := client.(*redis.ClusterClient)
		if isCluster != c.cluster || !slices.Equal(addrs, c.addrs) || user != c.user || pass != c.pass || db != c.db || tls != c.tls || !ctxTimeout {
			t.Errorf("%s: cluster %v, addrs %q, user %q, password %q, db %d, TLS %v, context timeouts %v; want %v %q %q %q %d %v true",
				c.url, isCluster, addrs, user, pass, db, tls, ctxTimeout, c.cluster, c.addrs, c.user, c.pass, c.db, c.tls)
		}
	}
}

// TestRedisTLSClientCert: over a rediss:// URL to a Redis that requires
// client certificates, the flags' certificate and CA get a PONG; without
// the certificate, with another CA, or with a server certificate for
// another name (unless its name is not verified) the handshake fails. TLS
// files for a URL without TLS are an error, not ignored.
func TestRedisTLSClientCert(t *testing.T) {
	dir := t.TempDir()
	ca := tlstest.NewCA(t, "redis CA")
	caFile := ca.WriteCA(t, dir, "ca.crt")
	srvCert, srvKey := ca.Issue(t, "127.0.0.1").Write(t, dir, "server.crt", "server.key")
	cliCert, cliKey := ca.Issue(t, "ratelimit").Write(t, dir, "client.crt", "client.key")
	other := tlstest.NewCA(t, "another CA")
	otherFile := other.WriteCA(t, dir, "other.crt")
	elsewhereCert, elsewhereKey := ca.Issue(t, "redis.example").Write(t, dir, "elsewhere.crt", "elsewhere.key")

	srv := redistest.StartTLS(t, srvCert, srvKey, caFile)
	misnamed := redistest.StartTLS(t, elsewhereCert, elsewhereKey, caFile)
	ping := func(url string, files TLS) error {
		newClient, _, cert, err := Flags{URL: url, TLS: files}.Open(func(string) string { return "" })
		if err != nil {
			return err
		}
		if (cert != nil) != (files.CertFile != "") {
			t.Errorf("%+v: certificate to watch %v", files, cert)
		}
		c := newClient()
		defer c.Close()
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		return c.Ping(ctx).Err()
	}
	good := TLS{CertFile: cliCert, KeyFile: cliKey, CAFile: caFile}
	if err := ping("rediss://"+srv.TLSAddr()+"/0", good); err != nil {
		t.Fatalf("with the client certificate: %v", err)
	}
	if err := ping("rediss://"+srv.TLSAddr()+"/0", TLS{CAFile: caFile}); err == nil {
		t.Error("without a client certificate: PONG")
	}
	if err := ping("rediss://"+srv.TLSAddr()+"/0", TLS{CertFile: cliCert, KeyFile: cliKey, CAFile: otherFile}); err == nil {
		t.Error("trusting another CA: PONG")
	}
	if err := ping("rediss://"+misnamed.TLSAddr()+"/0", good); err == nil {
		t.Error("a server certificate for another name: PONG")
	}
	skip := good
	skip.SkipHostnameVerification = true
	if err := ping("rediss://"+misnamed.TLSAddr()+"/0", skip); err != nil {
		t.Errorf("another name, not verified: %v", err)
	}
	skip.CAFile = otherFile
	if err := ping("rediss://"+misnamed.TLSAddr()+"/0", skip); err == nil {
		t.Error("name not verified, chain from another CA: PONG")
	}
	if err := ping("redis://"+srv.Addr()+"/0", good); err == nil || !strings.Contains(err.Error(), "rediss://") {
		t.Errorf("TLS files with redis://: %v", err)
	}
	// SetUpWrong finds each refused handshake at once, and passes the
	// good one.
	setUpWrong := func(url string, files TLS) error {
		newClient, _, _, err := Flags{URL: url, TLS: files}.Open(func(string) string { return "" })
		if err != nil {
			t.Fatal(err)
		}
		c := newClient()
		defer c.Close()
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		return SetUpWrong(ctx, c)
	}
	if err := setUpWrong("rediss://"+srv.TLSAddr()+"/0", good); err != nil {
		t.Errorf("SetUpWrong with the client certificate: %v", err)
	}
	// A redis:// URL for the TLS port: the server closes the connection
	// on the first command, which looks like an outage; SetUpWrong finds
	// that the port speaks TLS. The plain port is not taken for one.
	for _, url := range []string{"redis://" + srv.TLSAddr() + "/0", "redis+cluster://" + srv.TLSAddr()} {
		if err := setUpWrong(url, TLS{}); !errors.Is(err, errSpeaksTLS) {
			t.Errorf("SetUpWrong(%s) = %v, want %v", url, err, errSpeaksTLS)
		}
	}
	if err := setUpWrong("redis://"+srv.Addr()+"/0", TLS{}); err != nil {
		t.Errorf("SetUpWrong on the plain port: %v", err)
	}
	// A refused client certificate reaches the client as the server's
	// alert, or, about one time in fifty, as a reset of its first write
	// (the server closed with the client's last handshake message unread):
	// each is tried often enough that the reset comes up.
	for _, c := range []struct {
		url   string
		files TLS
		want  string
		times int
	}{
		{"rediss://" + srv.TLSAddr() + "/0", TLS{CAFile: caFile}, "certificate required", 200},
		{"rediss+cluster://" + srv.TLSAddr(), TLS{CAFile: caFile}, "certificate required", 200},
		{"rediss://" + srv.TLSAddr() + "/0", TLS{CertFile: cliCert, KeyFile: cliKey, CAFile: otherFile}, "unknown authority", 1},
		{"rediss://" + misnamed.TLSAddr() + "/0", good, "127.0.0.1", 1},
	} {
		for range c.times {
			if err := setUpWrong(c.url, c.files); err == nil || !strings.Contains(err.Error(), c.want) {
				t.Errorf("SetUpWrong(%s, %+v) = %v, want an error with %q", c.url, c.files, err, c.want)
				break
			}
		}
	}
	// A cluster URL takes them too.
	newClient, _, _, err := Flags{URL: "rediss+cluster://" + srv.TLSAddr(), TLS: good}.Open(func(string) string { return "" })
	if err != nil {
		t.Fatal(err)
	}
	c := newClient().(*redis.ClusterClient)
	defer c.Close()
	if o := c.Options(); o.TLSConfig == nil || o.TLSConfig.RootCAs == nil || o.TLSConfig.GetClientCertificate == nil {
		t.Errorf("cluster TLS configuration %+v", o.TLSConfig)
	}
}

// TestCheckAtStart: the store's check failing as an outage is down (a
// warning), as Redis set up wrong an error naming where; passing, neither.
func TestCheckAtStart(t *testing.T) {
	client := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1", DialerRetries: 1})
	defer client.Close()
	outage := fmt.Errorf("%w: dial tcp: connection refused", throttle.ErrUnavailable)
	wrong := fmt.Errorf("%w: WRONGPASS", throttle.ErrMisconfigured)
	for _, tc := range []struct {
		check     error
		down, err error
	}{{nil, nil, nil}, {outage, outage, nil}, {wrong, nil, wrong}} {
		down, err := CheckAtStart(client, "r:6379", func(context.Context) error { return tc.check })
		if down != tc.down || !errors.Is(err, tc.err) || (err == nil) != (tc.err == nil) {
			t.Errorf("check %v: down %v, err %v", tc.check, down, err)
		}
		if err != nil && !strings.Contains(err.Error(), "redis at r:6379 is set up wrong: ") {
			t.Errorf("err %q does not say where Redis is and what is wrong", err)
		}
	}
}

// TestWatchCert: new certificate files are read and said so; files that do
// not make a pair are said, and the certificate in use kept; a nil
// certificate is watched by nothing.
func TestWatchCert(t *testing.T) {
	dir := t.TempDir()
	ca := tlstest.NewCA(t, "CA")
	certFile, keyFile := ca.Issue(t, "first").Write(t, dir, "tls.crt", "tls.key")
	_, pair, err := TLS{CertFile: certFile, KeyFile: keyFile}.Config()
	if err != nil {
		t.Fatal(err)
	}
	lines := make(chan string, 100)
	stop := WatchCert(pair, certFile, time.Millisecond, func(format string, args ...any) { lines <- fmt.Sprintf(format, args...) })
	defer stop()
	await := func(want string) {
		t.Helper()
		timeout := time.After(10 * time.Second)
		for {
			select {
			case l := <-lines:
				if strings.Contains(l, want) {
					if !strings.Contains(l, certFile) {
						t.Errorf("%q does not name %s", l, certFile)
					}
					return
				}
			case <-timeout:
				t.Fatalf("no line with %q", want)
			}
		}
	}
	ca.Issue(t, "second").Write(t, dir, "tls.crt", "tls.key")
	await("reloaded")
	if err := os.WriteFile(certFile, []byte("not a certificate"), 0o600); err != nil {
		t.Fatal(err)
	}
	await("keeping the one in use")
	stop()
	WatchCert(nil, "", 0, nil)()
}

// TestTLSRefusedMidRun: a TLS handshake refused while a command runs (its
// client certificate no longer trusted by Redis, or Redis's certificate
// renewed by a CA the command does not trust) ends each call with the
// refusal, Redis set up wrong, after one dial: go-redis alone retries it
// as a network error, and under TLS 1.3 sees Redis's refusal only on its
// first read, so a call bounded by a store's timeout ended in its
// deadline, an outage, on which a proxy with --fail-open passes requests.
func TestTLSRefusedMidRun(t *testing.T) {
	srv, f := redistest.StartTLSClientAuth(t, "client")
	dir := t.TempDir()
	other := tlstest.NewCA(t, "another CA")
	otherCA := other.WriteCA(t, dir, "other.crt")
	otherCert, otherKey := other.Issue(t, "127.0.0.1").Write(t, dir, "redis.crt", "redis.key")
	serverCert := srv.CLI("CONFIG", "GET", "tls-cert-file")
	serverKey := srv.CLI("CONFIG", "GET", "tls-key-file")
	_, serverCert, _ = strings.Cut(strings.TrimSpace(serverCert), "\n")
	_, serverKey, _ = strings.Cut(strings.TrimSpace(serverKey), "\n")
	for _, side := range []struct {
		name      string
		set, back []string
	}{
		{"Redis refuses the client's certificate",
			[]string{"tls-ca-cert-file", otherCA},
			[]string{"tls-ca-cert-file", f.CA}},
		{"the client refuses Redis's certificate",
			[]string{"tls-cert-file", otherCert, "tls-key-file", otherKey},
			[]string{"tls-cert-file", serverCert, "tls-key-file", serverKey}},
	} {
		for _, version := range []uint16{tls.VersionTLS12, tls.VersionTLS13} {
			t.Run(fmt.Sprintf("%s/%s", side.name, tls.VersionName(version)), func(t *testing.T) {
				cfg, _, err := TLS{CertFile: f.ClientCert, KeyFile: f.ClientKey, CAFile: f.CA}.Config()
				if err != nil {
					t.Fatal(err)
				}
				cfg.MaxVersion = version
				opt := &redis.Options{Addr: srv.TLSAddr(), TLSConfig: cfg}
				dial := redis.NewDialer(opt)
				var dials atomic.Int32
				opt.Dialer = func(ctx context.Context, network, addr string) (net.Conn, error) {
					dials.Add(1)
					return dial(ctx, network, addr)
				}
				client := NewClient(opt)()
				defer client.Close()
				call := func() error {
					ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
					defer cancel()
					dials.Store(0)
					return client.Ping(ctx).Err()
				}
				if err := call(); err != nil {
					t.Fatalf("before: %v", err)
				}
				srv.CLI(append([]string{"CONFIG", "SET"}, side.set...)...)
				srv.CLI("CLIENT", "KILL", "TYPE", "normal")
				for i := range 3 {
					err := call()
					if err == nil || !Misconfigured(err) || errors.Is(err, context.DeadlineExceeded) || dials.Load() != 1 {
						t.Errorf("call %d: %v after %d dials; want the refusal, set up wrong, after one", i, err, dials.Load())
					}
				}
				// A cluster client's nodes check their dials too (its
				// first call asks a node for the slots).
				copt := &redis.ClusterOptions{Addrs: []string{srv.TLSAddr()}, TLSConfig: cfg, MaxRedirects: -1}
				cluster := NewClusterClient(copt)()
				defer cluster.Close()
				var refused *redisscript.RefusedHandshake
				if err := cluster.Ping(context.Background()).Err(); !errors.As(err, &refused) {
					t.Errorf("cluster client: %v, want a RefusedHandshake", err)
				}
				srv.CLI(append([]string{"CONFIG", "SET"}, side.back...)...)
				if err := call(); err != nil {
					t.Errorf("after the certificates are right again: %v", err)
				}
			})
		}
	}
}

// TestEvictions: a Redis with a maxmemory that may evict keys gets a
// warning; one without a maxmemory, or with noeviction, none.
func TestEvictions(t *testing.T) {
	ctx := context.Background()
	for _, c := range []struct {
		args []string
		want string
	}{
		{nil, ""},
		{[]string{"--maxmemory", "100mb", "--maxmemory-policy", "noeviction"}, ""},
		{[]string{"--maxmemory", "100mb", "--maxmemory-policy", "allkeys-lru"}, "maxmemory 100.00M, maxmemory-policy allkeys-lru"},
		{[]string{"--maxmemory", "100mb", "--maxmemory-policy", "volatile-ttl"}, "maxmemory-policy volatile-ttl"},
	} {
		srv := redistest.Start(t, c.args...)
		client := redis.NewClient(&redis.Options{Addr: srv.Addr()})
		got := Evictions(ctx, client)
		client.Close()
		if c.want == "" && got != "" || c.want != "" && !strings.Contains(got, c.want) {
			t.Errorf("%v: %q, want %q", c.args, got, c.want)
		}
	}
	// In a Cluster, any primary that may evict.
	cl := redistest.StartCluster(t, 3)
	client := redis.NewClusterClient(&redis.ClusterOptions{Addrs: cl.Addrs()})
	defer client.Close()
	if got := Evictions(ctx, client); got != "" {
		t.Errorf("cluster without maxmemory: %q", got)
	}
	cl.Servers[1].CLI("CONFIG", "SET", "maxmemory", "1gb")
	cl.Servers[1].CLI("CONFIG", "SET", "maxmemory-policy", "allkeys-random")
	if got := Evictions(ctx, client); !strings.Contains(got, "allkeys-random") {
		t.Errorf("cluster with an evicting primary: %q", got)
	}
}

// TestSetUpWrongNotRedis: a URL for a port where another server answers
// (HTTP, an SSH greeting) is set up wrong, not an outage to wait out: the
// server answers, in another protocol.
func TestSetUpWrongNotRedis(t *testing.T) {
	web := httptest.NewServer(http.NotFoundHandler())
	defer web.Close()
	ssh, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ssh.Close()
	go func() {
		for {
			c, err := ssh.Accept()
			if err != nil {
				return
			}
			c.Write([]byte("SSH-2.0-OpenSSH_9.2\r\n"))
			c.Close()
		}
	}()
	for _, addr := range []string{web.Listener.Addr().String(), ssh.Addr().String()} {
		for _, c := range []redis.UniversalClient{NewClient(&redis.Options{Addr: addr})(), NewClusterClient(&redis.ClusterOptions{Addrs: []string{addr}})()} {
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			if err := SetUpWrong(ctx, c); !errors.Is(err, errNotRedis) {
				t.Errorf("%s, %T: %v, want %v", addr, c, err, errNotRedis)
			}
			cancel()
			c.Close()
		}
	}
}

// TestSetUpWrongReplica: a single-server URL naming a replica is set up
// wrong (every write would get READONLY, an outage forever); its primary
// is not.
func TestSetUpWrongReplica(t *testing.T) {
	primary := redistest.Start(t)
	replica := redistest.StartReplica(t, primary)
	for _, c := range []struct {
		addr string
		want error
	}{{primary.Addr(), nil}, {replica.Addr(), errReplica}} {
		client := NewClient(&redis.Options{Addr: c.addr})()
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		if err := SetUpWrong(ctx, client); !errors.Is(err, c.want) || (err == nil) != (c.want == nil) {
			t.Errorf("%s: %v, want %v", c.addr, err, c.want)
		}
		cancel()
		client.Close()
	}
}
