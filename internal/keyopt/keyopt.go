// Package keyopt holds what the options of httplimit and grpclimit share:
// the list of limits (each a name, a throttle.Limiter and the parts its
// key is made of), the store-failure policy (fail open or closed, the
// store timeout), the checks New makes on them, the bound on the size of
// a key part, and the IETF RateLimit-Policy and RateLimit fields that both
// write (fields.go). Each package keeps its own Option type, KeyPart and
// documentation; the bookkeeping behind them is here, once, so that the
// two middlewares cannot drift apart.
package keyopt

import (
	"context"
	"crypto/sha256"
	"encoding/base64"
	"errors"
	"fmt"
	"time"

	"github.com/smoothrate/ratelimit/internal/redisscript"
	"github.com/smoothrate/ratelimit/throttle"
)

// A Limit is one limit checked on every request or call.
type Limit[P any] struct {
	Name  string // in the RateLimit fields or metadata, and the start of its store keys
	Lim   *throttle.Limiter
	Parts []P // what the key is made of
}

// Config is the part of a middleware's configuration that both packages
// have. Options set it through its methods, which record a bad value as an
// error; Check reports them all at the end.
type Config[P any] struct {
	Limits       []Limit[P] // [0] is the limiter given to New
	FailOpen     bool
	SetClosed    bool // WithFailClosed was given
	ClosedRetry  time.Duration
	StoreTimeout time.Duration
	storeBound   redisscript.Bound

	invalid error // the package's ErrInvalidOption, wrapped by every error
	defPart P     // the key of a limit added without parts
	errs    []error
}

// New starts the configuration of New(lim, ...): one limit named name and
// keyed by def, failing closed with a retry after one second. invalid is
// the package's ErrInvalidOption.
func New[P any](invalid error, lim *throttle.Limiter, name string, def P) Config[P] {
	c := Config[P]{
		Limits:      []Limit[P]{{Name: name, Lim: lim, Parts: []P{def}}},
		ClosedRetry: time.Second,
		invalid:     invalid,
		defPart:     def,
	}
	if lim == nil {
		c.Errorf("nil limiter")
	}
	return c
}

// Errorf records an invalid option.
func (c *Config[P]) Errorf(format string, args ...any) {
	c.errs = append(c.errs, fmt.Errorf("%w: %s", c.invalid, fmt.Sprintf(format, args...)))
}

// Apply applies each option with apply, in order; a nil one is an error.
func Apply[P, O any](c *Config[P], opts []O, apply func(O)) {
	for _, o := range opts {
		if any(o) == nil {
			c.Errorf("nil option")
			continue
		}
		apply(o)
	}
}

// SetName names the limit given to New.
func (c *Config[P]) SetName(name string) { c.Limits[0].Name = name }

// SetKey sets the parts of the key of the limit given to New.
func (c *Config[P]) SetKey(parts []P) {
	if len(parts) == 0 {
		c.Errorf("WithKey needs at least one part")
		return
	}
	c.Limits[0].Parts = parts
}

// AddLimit adds a limit checked with New's; without parts it is keyed as
// New's is by default.
func (c *Config[P]) AddLimit(name string, lim *throttle.Limiter, parts []P) {
	if lim == nil {
		c.Errorf("nil limiter for limit %q", name)
		return
	}
	if len(parts) == 0 {
		parts = []P{c.defPart}
	}
	c.Limits = append(c.Limits, Limit[P]{Name: name, Lim: lim, Parts: parts})
}

// SetFailClosed fails closed with a retry after retry; what names the
// retry in the error ("Retry-After", "retry delay").
func (c *Config[P]) SetFailClosed(retry time.Duration, what string) {
	if retry <= 0 {
		c.Errorf("fail-closed %s %v must be positive", what, retry)
		return
	}
	c.SetClosed, c.ClosedRetry = true, retry
}

// SetStoreTimeout bounds each decision of the store to d.
func (c *Config[P]) SetStoreTimeout(d time.Duration) {
	if d <= 0 {
		c.Errorf("store timeout %v must be positive", d)
		return
	}
	c.StoreTimeout, c.storeBound = d, redisscript.NewBound(d)
}

// Bound is ctx bounded by StoreTimeout (unchanged without one), and its
// cancel function. Its end is the store's outage, not the caller's
// deadline: a RedisStore's call under it fails with ErrUnavailable.
func (c *Config[P]) Bound(ctx context.Context) (context.Context, context.CancelFunc) {
	return c.storeBound.Within(ctx)
}

// StoreError is err, a failed decision's, with the end of StoreTimeout's
// bound made an outage (throttle.ErrUnavailable), as a Redis timeout is:
// the store saw only a context deadline, which it cannot tell from the
// caller's own. ctx is the caller's context, without the bound.
func (c *Config[P]) StoreError(ctx context.Context, err error) error {
	if c.StoreTimeout > 0 && ctx.Err() == nil && errors.Is(err, context.DeadlineExceeded) &&
		!errors.Is(err, throttle.ErrUnavailable) {
		return fmt.Errorf("%w: no answer within the store timeout of %v: %w", throttle.ErrUnavailable, c.StoreTimeout, err)
	}
	return err
}

// Check ends the building: it adds the errors that only the options
// together show (fail open and closed, a bad or repeated name, a bad key
// part) to those recorded, and returns them all joined, or nil. noun is
// what the package calls a limit's name ("policy name", "limit name");
// check says what is wrong with a key part ("" if nothing).
func (c *Config[P]) Check(noun string, check func(P) string) error {
	if c.FailOpen && c.SetClosed {
		c.Errorf("WithFailOpen and WithFailClosed contradict each other")
	}
	seen := map[string]bool{}
	for _, l := range c.Limits {
		if !ValidName(l.Name) {
			c.Errorf("%s %q must be 1 to 64 printable ASCII characters without '\"', '\\\\' or ':'", noun, l.Name)
		}
		if seen[l.Name] {
			c.Errorf("two limits named %q: each needs its own name (it also keeps their keys apart)", l.Name)
		}
		seen[l.Name] = true
		if l.Lim != nil && c.Limits[0].Lim != nil && l.Lim.Store() != c.Limits[0].Lim.Store() {
			// Decided together (throttle.AllowAll), every request would
			// fail with throttle.ErrMixedStores.
			c.Errorf("limit %q uses another store than the first limit's: all must share one", l.Name)
		}
		for _, kp := range l.Parts {
			if err := check(kp); err != "" {
				c.Errorf("limit %q: %s", l.Name, err)
			}
		}
	}
	return errors.Join(c.errs...)
}

// ValidName: a limit's name travels as a structured-field string in the
// RateLimit fields (headers or metadata), as a JSON string in httplimit's
// problem body, and starts the store key; plain printable ASCII keeps all
// three simple.
func ValidName(s string) bool {
	if s == "" || len(s) > 64 {
		return false
	}
	for i := 0; i < len(s); i++ {
		if b := s[i]; b < 0x20 || b > 0x7e || b == '"' || b == '\\' || b == ':' {
			return false
		}
	}
	return true
}

// MaxPart is the longest key part kept as it is. Longer ones (a header, a
// path, a metadata value: the client chooses them, up to the server's
// header limit) are replaced by their SHA-256, so that a flood of long
// made-up values cannot make each stored key large: the store bounds the
// number of keys, and this bounds their size.
const MaxPart = 64

// AppendBounded appends v, or "sha256:" and its SHA-256 in unpadded
// base64url when v is longer than MaxPart.
func AppendBounded(b []byte, v string) []byte {
	if len(v) <= MaxPart {
		return append(b, v...)
	}
	sum := sha256.Sum256([]byte(v))
	b = append(b, "sha256:"...)
	return base64.RawURLEncoding.AppendEncode(b, sum[:])
}
