package xds

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	"github.com/envoyproxy/go-control-plane/pkg/client/sotw/v3"
	rlconfv3 "github.com/envoyproxy/go-control-plane/ratelimit/config/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/backoff"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/anypb"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/smoothrate/ratelimit/rls"
)

// TypeURL is the resource type the client subscribes to.
const TypeURL = "type.googleapis.com/ratelimit.config.ratelimit.v3.RateLimitConfig"

// ErrClosed: the Client was closed, or its Run returned.
var ErrClosed = errors.New("xds: client closed")

// A Target takes the configurations the client receives. *rls.Service is
// one: SetConfig counts config_load_success, ConfigLoadFailed
// config_load_error.
type Target interface {
	// SetConfig makes cfg the configuration in use. An error refuses it:
	// the client NACKs it with the error and keeps the previous one.
	SetConfig(cfg *rls.Config) error
	// ConfigLoadFailed counts a configuration that was refused.
	ConfigLoadFailed()
}

// EventKind says what an Event reports.
type EventKind int

const (
	// Applied: a response loaded and was made the configuration in use
	// (Event.Config), then ACKed.
	Applied EventKind = iota + 1
	// Rejected: a response did not load or was refused by the Target
	// (Event.Err, the reason sent in the NACK); the previous configuration
	// stays in use.
	Rejected
	// Disconnected: the stream could not be opened or ended (Event.Err);
	// the next attempt is in Event.Retry.
	Disconnected
)

func (k EventKind) String() string {
	switch k {
	case Applied:
		return "applied"
	case Rejected:
		return "rejected"
	case Disconnected:
		return "disconnected"
	}
	return fmt.Sprintf("EventKind(%d)", int(k))
}

// Event is something the client did, for logs (WithEvents).
type Event struct {
	Kind   EventKind
	Config *rls.Config   // Applied
	Err    error         // Rejected, Disconnected
	Retry  time.Duration // Disconnected: the wait before the next attempt
}

// Client keeps a Target's configuration in step with an xDS management
// server, as envoyproxy/ratelimit does with CONFIG_TYPE=GRPC_XDS_SOTW: one
// Aggregated Discovery Service stream in state-of-the-world mode, a
// wildcard subscription to TypeURL, and every response taken as the whole
// configuration: all its resources are loaded together
// (rls.ParseConfigProtos), so a domain missing from a response is gone. A
// response that loads is given to the Target and ACKed; one that does not
// is NACKed with the loader's reason ("<resource name>: <reason>") and
// the Target keeps the configuration it had. When the stream cannot be
// opened or ends, the client waits (Backoff) and opens another, for as
// long as it runs.
//
// Make one with NewClient, call Run in a goroutine, and WaitConfig to wait
// for the first configuration.
type Client struct {
	conn   *grpc.ClientConn
	target Target
	cfg    clientConfig
	node   *corev3.Node

	running  atomic.Bool
	closed   chan struct{}
	close    sync.Once
	closeErr error
	ran      chan struct{} // closed when Run returns
	first    chan struct{} // closed when a configuration is first applied
	once     sync.Once
	last     atomic.Pointer[rls.Config]

	rejected rejection // Run's goroutine only
}

// NewClient returns a client of the xDS server at serverURL, a gRPC target
// ("host:port", as CONFIG_GRPC_XDS_SERVER_URL; or "dns:///host:port",
// "unix:///path"), that gives target the configurations it receives. It
// does not connect yet: Run does. Bad options are reported here
// (ErrInvalidOption).
func NewClient(serverURL string, target Target, opts ...Option) (*Client, error) {
	cfg, err := buildConfig(opts)
	if err != nil {
		return nil, err
	}
	if serverURL == "" {
		return nil, fmt.Errorf("%w: empty xDS server URL", ErrInvalidOption)
	}
	if target == nil {
		return nil, fmt.Errorf("%w: nil target", ErrInvalidOption)
	}
	if cfg.randomFloat64 == nil {
		cfg.randomFloat64 = rand.Float64
	}
	creds := insecure.NewCredentials()
	if cfg.tls != nil {
		creds = credentials.NewTLS(cfg.tls)
	}
	dial := []grpc.DialOption{
		grpc.WithTransportCredentials(creds),
		// While the server cannot be reached, gRPC tries again every
		// connect retry interval, ±50% (the reference's
		// BackoffLinearWithJitter(interval, 0.5)).
		grpc.WithConnectParams(grpc.ConnectParams{
			Backoff:           backoff.Config{BaseDelay: cfg.connectRetry, Multiplier: 1, Jitter: 0.5, MaxDelay: cfg.connectRetry},
			MinConnectTimeout: 20 * time.Second,
		}),
	}
	if cfg.maxMsgSize > 0 {
		dial = append(dial, grpc.WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(cfg.maxMsgSize)))
	}
	conn, err := grpc.NewClient(serverURL, dial...)
	if err != nil {
		return nil, fmt.Errorf("%w: xDS server URL %q: %v", ErrInvalidOption, serverURL, err)
	}
	md := make(map[string]*structpb.Value, len(cfg.nodeMetadata))
	for k, v := range cfg.nodeMetadata {
		md[k] = structpb.NewStringValue(v)
	}
	return &Client{
		conn:   conn,
		target: target,
		cfg:    cfg,
		node:   &corev3.Node{Id: cfg.nodeID, Metadata: &structpb.Struct{Fields: md}},
		closed: make(chan struct{}),
		ran:    make(chan struct{}),
		first:  make(chan struct{}),
	}, nil
}

// Run keeps the subscription until ctx ends or the client is closed, and
// returns ctx's error or ErrClosed; every other failure is retried. Run
// once per Client.
func (c *Client) Run(ctx context.Context) error {
	if ctx == nil {
		return fmt.Errorf("xds: %w", rls.ErrNilContext)
	}
	if !c.running.CompareAndSwap(false, true) {
		return errors.New("xds: Run called twice")
	}
	defer close(c.ran)
	runCtx, cancel := context.WithCancel(ctx)
	defer cancel()
	go func() {
		select {
		case <-c.closed:
			cancel()
		case <-runCtx.Done():
		}
	}()
	ctx = metadata.NewOutgoingContext(runCtx, metadata.New(c.cfg.headers))
	// One ADS client for every stream, as the reference: a new stream
	// announces the version last ACKed.
	ads := sotw.NewADSClient(ctx, c.node, TypeURL)
	retries := 0
	for {
		got, err := c.stream(ctx, ads)
		if ctx.Err() != nil {
			select {
			case <-c.closed:
				return ErrClosed
			default:
				return context.Cause(ctx)
			}
		}
		if got {
			retries = 0
		}
		wait := c.cfg.backoff.Wait(retries, c.cfg.randomFloat64)
		retries++
		c.event(Event{Kind: Disconnected, Err: err, Retry: wait})
		c.sleep(ctx, wait)
	}
}

// stream opens one stream and handles its responses until it fails; got
// reports whether it delivered any.
func (c *Client) stream(ctx context.Context, ads sotw.ADSClient) (got bool, err error) {
	if err := ads.InitConnect(c.conn); err != nil {
		return false, err
	}
	for {
		resp, err := ads.Fetch()
		if err != nil {
			return got, err
		}
		got = true
		if err := c.handle(ctx, ads, resp); err != nil {
			return got, err
		}
	}
}

// handle loads one response and ACKs or NACKs it; the error is the
// stream's, when the ACK or NACK could not be sent.
//
// go-control-plane's snapshot cache answers a NACK by sending the same
// snapshot again at once (the NACK names the last version ACKed, not the
// current one). So a response equal to the one just refused is not loaded,
// counted or reported again, and its NACK waits for the backoff: without
// that the two sides would exchange it as fast as they can until the
// server's snapshot changes, which the next NACK then receives.
func (c *Client) handle(ctx context.Context, ads sotw.ADSClient, resp *sotw.Response) error {
	if r := &c.rejected; r.err != nil && slices.EqualFunc(resp.Resources, r.resources, sameResource) {
		c.sleep(ctx, c.cfg.backoff.Wait(r.repeats, c.cfg.randomFloat64))
		r.repeats++
		return ads.Nack(r.err.Error())
	}
	cfg, err := c.load(resp)
	if err == nil {
		err = c.target.SetConfig(cfg)
	}
	if err != nil {
		c.rejected = rejection{resources: resp.Resources, err: err}
		c.target.ConfigLoadFailed()
		c.event(Event{Kind: Rejected, Err: err})
		return ads.Nack(err.Error())
	}
	c.rejected = rejection{}
	c.last.Store(cfg)
	c.once.Do(func() { close(c.first) })
	c.event(Event{Kind: Applied, Config: cfg})
	return ads.Ack()
}

// rejection is the last response refused, until one is applied.
type rejection struct {
	resources []*anypb.Any
	err       error
	repeats   int // NACKs sent again for the same response
}

func sameResource(a, b *anypb.Any) bool {
	return a.GetTypeUrl() == b.GetTypeUrl() && bytes.Equal(a.GetValue(), b.GetValue())
}

// sleep waits d, or until ctx ends.
func (c *Client) sleep(ctx context.Context, d time.Duration) {
	if c.cfg.sleep != nil {
		c.cfg.sleep(ctx, d)
		return
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
	case <-t.C:
	}
}

// load decodes a response's resources and loads them as one configuration.
func (c *Client) load(resp *sotw.Response) (*rls.Config, error) {
	cfgs := make([]*rlconfv3.RateLimitConfig, len(resp.Resources))
	for i, res := range resp.Resources {
		cfgs[i] = new(rlconfv3.RateLimitConfig)
		if err := anypb.UnmarshalTo(res, cfgs[i], proto.UnmarshalOptions{}); err != nil {
			return nil, fmt.Errorf("resource %d: %w", i, err)
		}
	}
	return rls.ParseConfigProtos(cfgs, c.cfg.loadOptions...)
}

func (c *Client) event(e Event) {
	if c.cfg.onEvent != nil {
		c.cfg.onEvent(e)
	}
}

// WaitConfig waits until a configuration has been applied, and returns the
// last one applied; it returns early with ctx's error, or ErrClosed when
// the client is closed or its Run has returned.
func (c *Client) WaitConfig(ctx context.Context) (*rls.Config, error) {
	if ctx == nil {
		return nil, fmt.Errorf("xds: %w", rls.ErrNilContext)
	}
	select {
	case <-c.first:
	case <-c.closed:
	case <-c.ran:
	case <-ctx.Done():
		return nil, context.Cause(ctx)
	}
	select {
	case <-c.first:
		return c.last.Load(), nil
	default:
		return nil, ErrClosed
	}
}

// Close stops Run, waits for it to return (so the Target is not called
// after Close returns) and closes the connection. The Target keeps its
// configuration. Do not call it from an event hook (WithEvents).
func (c *Client) Close() error {
	c.close.Do(func() {
		close(c.closed)
		if c.running.Load() {
			<-c.ran
		}
		c.closeErr = c.conn.Close()
	})
	return c.closeErr
}
