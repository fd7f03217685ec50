package redisflag

import (
	"bytes"
	"context"
	"crypto/tls"
	"errors"
	"net"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/smoothrate/ratelimit/internal/redisscript"
)

// tlsCheck is the dial hook of the commands' clients over TLS. It ends a
// call whose connection's TLS handshake is refused on the certificates
// with that refusal, at once, where go-redis alone would retry the call
// until its deadline, which the commands count as an outage (and `proxy
// --fail-open` would pass requests unlimited): a client certificate that
// expired or was replaced by one of another CA while a command runs,
// Redis's certificate renewed by a CA the command does not trust.
//
//   - A refused dial comes back as a redisscript.RefusedHandshake, which
//     go-redis does not retry (it retries any network error).
//   - Under TLS 1.3 the client's side of the handshake ends before Redis
//     has checked the client's certificate: a refusal reaches the client as
//     an alert on its first read, which go-redis takes for a broken
//     connection and retries on a new one. So before go-redis has the
//     connection, the hook sends PING and reads the reply (a PONG, or
//     NOAUTH before the client has authenticated: anything that is a
//     reply): one round trip more per new connection, which the pool
//     keeps.
type tlsCheck struct{}

func (tlsCheck) DialHook(next redis.DialHook) redis.DialHook {
	return func(ctx context.Context, network, addr string) (net.Conn, error) {
		conn, err := next(ctx, network, addr)
		if err == nil {
			if tc, ok := conn.(*tls.Conn); ok && tc.ConnectionState().Version >= tls.VersionTLS13 {
				if err = accepted(ctx, tc); err != nil {
					conn.Close()
					conn = nil
				}
			}
		}
		if err != nil && redisscript.TLSRefused(err) {
			err = &redisscript.RefusedHandshake{Err: err}
		}
		return conn, err
	}
}

func (tlsCheck) ProcessHook(next redis.ProcessHook) redis.ProcessHook { return next }

func (tlsCheck) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}

// ping is PING as a RESP array, which every server that speaks RESP reads.
var ping = []byte("*1\r\n$4\r\nPING\r\n")

// maxProbeReply bounds what accepted reads of the reply to its PING: a
// PONG or an error line.
const maxProbeReply = 512

// errProbeReply: accepted read maxProbeReply bytes and no line's end.
var errProbeReply = errors.New("redis: no reply line to PING on a new TLS connection")

// accepted sends PING on c, a connection whose TLS handshake the client
// has finished, and reads the reply's one line: the server's TLS alert if
// it refused the client's certificate, else a reply. It bounds both by
// ctx's deadline, or the dial's default of 5 s.
func accepted(ctx context.Context, c *tls.Conn) error {
	deadline, ok := ctx.Deadline()
	if !ok {
		deadline = time.Now().Add(5 * time.Second)
	}
	if err := c.SetDeadline(deadline); err != nil {
		return err
	}
	// A server that refused the handshake may have closed the connection
	// with our last handshake message unread, so that the PING meets a
	// reset: its alert, sent before, is read all the same.
	_, werr := c.Write(ping)
	var buf [maxProbeReply]byte
	n := 0
	for n < len(buf) {
		m, err := c.Read(buf[n:])
		n += m
		if werr == nil && bytes.HasSuffix(buf[:n], []byte("\r\n")) {
			return c.SetDeadline(time.Time{})
		}
		if err != nil {
			if werr != nil && !redisscript.TLSRefused(err) {
				return werr
			}
			return err
		}
	}
	if werr != nil {
		return werr
	}
	return errProbeReply
}

// checkTLS adds tlsCheck to client, or to each node a cluster client
// makes, when opt has a TLS configuration.
func checkTLS(client redis.UniversalClient, tlsConf *tls.Config) {
	if tlsConf == nil {
		return
	}
	switch c := client.(type) {
	case *redis.ClusterClient:
		c.OnNewNode(func(node *redis.Client) { node.AddHook(tlsCheck{}) })
	case *redis.Client:
		c.AddHook(tlsCheck{})
	}
}
