package shape_test

import (
	"fmt"
	"io"
	"strings"
	"sync"
	"time"

	"github.com/smoothrate/ratelimit/clocktest"
)

// op is one call that reached the wrapped reader or writer: when (on the fake
// clock, since Epoch) and how many bytes.
type op struct {
	at time.Duration
	n  int
}

func (o op) String() string { return fmt.Sprintf("%v:%d", o.at, o.n) }

func schedule(ops []op) string {
	s := make([]string, len(ops))
	for i, o := range ops {
		s[i] = o.String()
	}
	return strings.Join(s, " ")
}

// recorder is an io.Writer that records when each Write happens on a fake
// clock, and keeps the data. hook, if set, runs after each Write (to change
// the rate at an exact point of the stream).
type recorder struct {
	mu   sync.Mutex
	clk  *clocktest.Fake
	ops  []op
	data []byte
	hook func(i int)
}

func (r *recorder) Write(p []byte) (int, error) {
	r.mu.Lock()
	r.ops = append(r.ops, op{r.clk.Elapsed(), len(p)})
	r.data = append(r.data, p...)
	i := len(r.ops)
	r.mu.Unlock()
	if r.hook != nil {
		r.hook(i)
	}
	return len(p), nil
}

func (r *recorder) schedule() string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return schedule(r.ops)
}

// timedReader records when each Read of src happens on a fake clock and
// what it returned.
type timedReader struct {
	clk *clocktest.Fake
	src io.Reader
	ops []op
}

func (r *timedReader) Read(p []byte) (int, error) {
	n, err := r.src.Read(p)
	r.ops = append(r.ops, op{r.clk.Elapsed(), n})
	return n, err
}
