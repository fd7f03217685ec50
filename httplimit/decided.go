package httplimit

import (
	"net/http"
	"slices"

	"github.com/smoothrate/ratelimit/throttle"
)

// A DecisionHandler answers a request once its limits are decided, in place
// of the middleware's own answer (pass on if allowed, refuse otherwise). It
// gets the request's key for each limit and the decisions, one per limit in
// the order of the limits (New's first, then each WithLimit's), and either
// passes the request on with next.ServeHTTP or answers it itself. The
// RateLimit headers (and Retry-After, for a refusal) are already set.
//
// It is for what the middleware does not do itself: hold an admitted
// request for a while before passing it on, as nginx's limit_req does with
// its burst; let a refused one through while only watching (a dry run);
// refuse with another status. The slices are its own to keep.
type DecisionHandler func(w http.ResponseWriter, r *http.Request, next http.Handler, keys []string, ds []throttle.Decision)

// WithDecisionHandler makes f answer every request whose limits were
// decided (see DecisionHandler). The refusal hook and the deny handler are
// then not called: f sees every decision. Store errors and bad costs are
// handled as without it. f must be safe for concurrent use.
func WithDecisionHandler(f DecisionHandler) Option {
	return optionFunc(func(c *config) {
		if f == nil {
			c.Errorf("nil decision handler")
			return
		}
		c.decided = f
	})
}

// handOver calls the decision handler with the request's keys and a copy of
// its decisions (ds lives on serve's stack; copying keeps it there).
func (m *middleware) handOver(w http.ResponseWriter, r *http.Request, next http.Handler, ds []throttle.Decision) {
	keys := make([]string, len(m.Limits))
	for i := range m.Limits {
		keys[i] = m.key(&m.Limits[i], r)
	}
	m.decided(w, r, next, keys, slices.Clone(ds))
}
