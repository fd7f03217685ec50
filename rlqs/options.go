package rlqs

import (
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"
)

// An Option configures a Server. A nil option and an option with a bad
// value are errors returned by New, wrapping ErrInvalidOption; nothing
// panics.
type Option interface{ apply(*serverConfig) }

type optionFunc func(*serverConfig)

func (f optionFunc) apply(c *serverConfig) { f(c) }

// Defaults of the options.
const (
	// DefaultSettleTime is how long the server assumes an assignment
	// takes to reach its Envoy and be applied (WithSettleTime).
	DefaultSettleTime = 200 * time.Millisecond
	// DefaultAllocationInterval is how often the shares of buckets whose
	// demand changed are computed again (WithAllocationInterval).
	DefaultAllocationInterval = 20 * time.Millisecond
	// DefaultStoreTimeout bounds one call to the store (WithStoreTimeout).
	DefaultStoreTimeout = 100 * time.Millisecond
	// DefaultMaxBucketsPerStream bounds the buckets one stream (one
	// Envoy) holds at once (WithMaxBucketsPerStream).
	DefaultMaxBucketsPerStream = 10000
)

// serverConfig holds every knob; buildConfig is where defaults are set.
type serverConfig struct {
	settle       time.Duration
	interval     time.Duration
	storeTimeout time.Duration
	maxPerStream int
	serverID     string
	storeHook    func(error)
	errs         []error
}

func buildConfig(opts []Option) (serverConfig, error) {
	c := serverConfig{settle: DefaultSettleTime, interval: DefaultAllocationInterval, storeTimeout: DefaultStoreTimeout,
		maxPerStream: DefaultMaxBucketsPerStream}
	for _, o := range opts {
		if o == nil {
			c.errs = append(c.errs, fmt.Errorf("%w: nil option", ErrInvalidOption))
			continue
		}
		o.apply(&c)
	}
	if c.serverID == "" {
		host, _ := os.Hostname()
		host = strings.ReplaceAll(host, " ", "_")
		c.serverID = fmt.Sprintf("%s-%d-%s", host, os.Getpid(), strconv.FormatInt(time.Now().UnixNano(), 36))
	}
	return c, errors.Join(c.errs...)
}

func positive(name string, d time.Duration, c *serverConfig) bool {
	if d <= 0 || d > time.Minute {
		c.errs = append(c.errs, fmt.Errorf("%w: %s %v must be positive and at most a minute", ErrInvalidOption, name, d))
		return false
	}
	return true
}

// WithSettleTime sets how long the server assumes an assignment takes to
// reach its Envoy once sent (default DefaultSettleTime). A rate taken from
// one client is given to another only after it: set it above the one-way
// latency of the slowest Envoy's stream. Longer delays a newcomer in a
// fully used bucket; shorter risks two assignments overlapping.
func WithSettleTime(d time.Duration) Option {
	return optionFunc(func(c *serverConfig) {
		if positive("settle time", d, c) {
			c.settle = d
		}
	})
}

// WithAllocationInterval sets how often the shares of buckets whose
// demand or clients changed are computed again and sent (default
// DefaultAllocationInterval): the longest a report waits for the
// assignment it causes, and, with Redis, the most claims a busy bucket
// makes per second (one per interval).
func WithAllocationInterval(d time.Duration) Option {
	return optionFunc(func(c *serverConfig) {
		if positive("allocation interval", d, c) {
			c.interval = d
		}
	})
}

// WithStoreTimeout bounds one call to the store (default
// DefaultStoreTimeout). A call that takes longer is an outage: the bucket
// keeps the share it last had.
func WithStoreTimeout(d time.Duration) Option {
	return optionFunc(func(c *serverConfig) {
		if positive("store timeout", d, c) {
			c.storeTimeout = d
		}
	})
}

// WithMaxBucketsPerStream bounds the buckets one stream (one Envoy) holds
// at once (default DefaultMaxBucketsPerStream): the server's memory for a
// client is bounded whatever bucket ids it reports. A report of a new bucket
// past it is refused (counted in Stats.InvalidReports) and the Envoy
// applies its no-assignment behaviour to that bucket until one of its
// buckets is abandoned (idle for abandon_after, or no longer reported).
// With bucket ids that carry a per-user value ("*"), set it above the
// users one Envoy sees within abandon_after.
func WithMaxBucketsPerStream(n int) Option {
	return optionFunc(func(c *serverConfig) {
		if n < 1 {
			c.errs = append(c.errs, fmt.Errorf("%w: max buckets per stream %d must be at least 1", ErrInvalidOption, n))
			return
		}
		c.maxPerStream = n
	})
}

// WithServerID names this server among the replicas sharing a Redis
// (default hostname-pid-start time): each replica needs its own.
func WithServerID(id string) Option {
	return optionFunc(func(c *serverConfig) {
		if id == "" || len(id) > 200 || strings.ContainsAny(id, " \t\r\n") {
			c.errs = append(c.errs, fmt.Errorf("%w: server id %q must be 1-200 bytes without spaces", ErrInvalidOption, id))
			return
		}
		c.serverID = id
	})
}

// WithStoreHook makes the server call f after each call to the store, with
// its error (nil when it succeeded), from the goroutine that made it: the
// hook of an outage log. An error wraps ErrUnavailable (an outage: the
// server goes on with the shares it last knew) or ErrMisconfigured (Redis
// set up wrong: no retry helps). f must not block.
func WithStoreHook(f func(err error)) Option {
	return optionFunc(func(c *serverConfig) {
		if f == nil {
			c.errs = append(c.errs, fmt.Errorf("%w: nil store hook", ErrInvalidOption))
			return
		}
		c.storeHook = f
	})
}
