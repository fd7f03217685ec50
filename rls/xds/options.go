package xds

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"maps"
	"strings"
	"time"

	"github.com/smoothrate/ratelimit/rls"
)

// ErrInvalidOption: a nil option, or an option with a bad value. NewClient
// returns it wrapped with the reason; it is rls.ErrInvalidOption.
var ErrInvalidOption = rls.ErrInvalidOption

// Defaults of the reference's settings (src/settings/settings.go).
const (
	// DefaultNodeID is CONFIG_GRPC_XDS_NODE_ID's default; Envoy Gateway
	// sets envoy-ratelimit.
	DefaultNodeID = "default"
	// DefaultConnectRetryInterval is
	// CONFIG_GRPC_XDS_SERVER_CONNECT_RETRY_INTERVAL's default.
	DefaultConnectRetryInterval = 3 * time.Second
)

// DefaultBackoff is the reference's XDS_CLIENT_BACKOFF_* defaults: every
// retry waits 10 s (see Backoff).
var DefaultBackoff = Backoff{Initial: 10 * time.Second, Max: 60 * time.Second, Factor: 0.5, Jitter: true}

// An Option configures a Client. Bad values and nil options are reported
// by NewClient (ErrInvalidOption); nothing panics.
type Option interface{ apply(*clientConfig) }

type optionFunc func(*clientConfig)

func (f optionFunc) apply(c *clientConfig) { f(c) }

// clientConfig holds every Client knob; buildConfig sets the defaults.
type clientConfig struct {
	nodeID        string
	nodeMetadata  map[string]string
	headers       map[string]string
	tls           *tls.Config
	backoff       Backoff
	connectRetry  time.Duration
	maxMsgSize    int
	loadOptions   []rls.LoadOption
	onEvent       func(Event)
	errs          []error
	randomFloat64 func() float64                             // tests fix the jitter
	sleep         func(ctx context.Context, d time.Duration) // tests see and control the waits
}

func buildConfig(opts []Option) (clientConfig, error) {
	c := clientConfig{nodeID: DefaultNodeID, backoff: DefaultBackoff, connectRetry: DefaultConnectRetryInterval}
	for _, o := range opts {
		if o == nil {
			c.errs = append(c.errs, fmt.Errorf("%w: nil option", ErrInvalidOption))
			continue
		}
		o.apply(&c)
	}
	return c, errors.Join(c.errs...)
}

func (c *clientConfig) fail(format string, a ...any) {
	c.errs = append(c.errs, fmt.Errorf("%w: "+format, append([]any{ErrInvalidOption}, a...)...))
}

// WithNodeID sets the node id the client announces
// (CONFIG_GRPC_XDS_NODE_ID; default DefaultNodeID): the server keeps a
// snapshot per node id.
func WithNodeID(id string) Option {
	return optionFunc(func(c *clientConfig) {
		if id == "" {
			c.fail("empty node id")
			return
		}
		c.nodeID = id
	})
}

// WithNodeMetadata sets the node's metadata, string values
// (CONFIG_GRPC_XDS_NODE_METADATA, parsed by ParseNodeMetadata).
func WithNodeMetadata(md map[string]string) Option {
	md = maps.Clone(md)
	return optionFunc(func(c *clientConfig) { c.nodeMetadata = md })
}

// WithHeaders adds gRPC metadata (HTTP/2 headers) to the stream
// (CONFIG_GRPC_XDS_CLIENT_ADDITIONAL_HEADERS, parsed by ParseHeaders), for
// a server or a proxy in front of it that authenticates with them. Names
// are sent in lower case; a name gRPC would refuse on the wire (empty,
// with other characters than letters, digits, '-', '_' and '.', or
// starting with "grpc-") is an error here.
func WithHeaders(h map[string]string) Option {
	h = maps.Clone(h)
	return optionFunc(func(c *clientConfig) {
		for k, v := range h {
			if !validHeaderName(k) {
				c.fail("header name %q", k)
				return
			}
			for _, r := range v {
				if r < 0x20 || r > 0x7e {
					c.fail("header %s: value %q has a character other than printable ASCII", k, v)
					return
				}
			}
		}
		c.headers = h
	})
}

func validHeaderName(k string) bool {
	if k == "" || strings.HasPrefix(strings.ToLower(k), "grpc-") {
		return false
	}
	for _, r := range k {
		if !('a' <= r && r <= 'z' || 'A' <= r && r <= 'Z' || '0' <= r && r <= '9' || r == '-' || r == '_' || r == '.') {
			return false
		}
	}
	return true
}

// WithTLS connects over TLS with cfg (CONFIG_GRPC_XDS_SERVER_USE_TLS; the
// CLI builds cfg from CONFIG_GRPC_XDS_CLIENT_TLS_CERT/_KEY,
// CONFIG_GRPC_XDS_SERVER_TLS_CACERT and, as cfg.ServerName,
// CONFIG_GRPC_XDS_SERVER_TLS_SAN). Without it the connection is plain
// text, as the reference's default.
func WithTLS(cfg *tls.Config) Option {
	return optionFunc(func(c *clientConfig) {
		if cfg == nil {
			c.fail("nil TLS configuration")
			return
		}
		c.tls = cfg
	})
}

// WithBackoff sets the wait between the end of a stream and the next one
// (XDS_CLIENT_BACKOFF_INITIAL_INTERVAL, _MAX_INTERVAL, _RANDOM_FACTOR,
// _JITTER; default DefaultBackoff).
func WithBackoff(b Backoff) Option {
	return optionFunc(func(c *clientConfig) {
		if err := b.check(); err != nil {
			c.fail("%v", err)
			return
		}
		c.backoff = b
	})
}

// WithConnectRetryInterval sets the wait between attempts to connect while
// the server cannot be reached, ±50% at random
// (CONFIG_GRPC_XDS_SERVER_CONNECT_RETRY_INTERVAL; default
// DefaultConnectRetryInterval).
func WithConnectRetryInterval(d time.Duration) Option {
	return optionFunc(func(c *clientConfig) {
		if d <= 0 {
			c.fail("connect retry interval %v must be positive", d)
			return
		}
		c.connectRetry = d
	})
}

// WithMaxMessageSize sets the largest response the client accepts, in
// bytes (XDS_CLIENT_MAX_MSG_SIZE_IN_BYTES; 0, the default: gRPC's 4 MiB).
// A configuration of many routes can exceed the default.
func WithMaxMessageSize(n int) Option {
	return optionFunc(func(c *clientConfig) {
		if n < 0 {
			c.fail("max message size %d must not be negative", n)
			return
		}
		c.maxMsgSize = n
	})
}

// WithLoadOptions passes opts to rls.ParseConfigProtos, such as
// rls.MergeDomains(true) (MERGE_DOMAIN_CONFIG).
func WithLoadOptions(opts ...rls.LoadOption) Option {
	opts = append([]rls.LoadOption(nil), opts...)
	return optionFunc(func(c *clientConfig) { c.loadOptions = append(c.loadOptions, opts...) })
}

// WithEvents calls f with every Event, from the client's goroutine (Run's),
// one at a time, for logging. f must not block for long: the stream waits.
func WithEvents(f func(Event)) Option {
	return optionFunc(func(c *clientConfig) { c.onEvent = f })
}
