package throttle

import "unsafe"

// ring is a sliding log's timestamps, oldest first, in a power-of-two
// buffer used as a circular queue, so that dropping expired entries and
// logging new ones allocate nothing once the buffer is large enough.
type ring struct {
	buf      []int64
	start, n int
}

func (r *ring) Len() int       { return r.n }
func (r *ring) At(i int) int64 { return r.buf[(r.start+i)&(len(r.buf)-1)] }

// drop forgets the k oldest entries.
func (r *ring) drop(k int) {
	if k >= r.n {
		r.start, r.n = 0, 0
		return
	}
	r.start = (r.start + k) & (len(r.buf) - 1)
	r.n -= k
}

// push logs ts k times, growing the buffer to the next power of two that
// holds them.
func (r *ring) push(ts int64, k int) {
	if need := r.n + k; need > len(r.buf) {
		size := max(4, len(r.buf))
		for size < need {
			size *= 2
		}
		buf := make([]int64, size)
		for i := range r.n {
			buf[i] = r.At(i)
		}
		r.buf, r.start = buf, 0
	}
	mask := len(r.buf) - 1
	for j := range k {
		r.buf[(r.start+r.n+j)&mask] = ts
	}
	r.n += k
}

// clone returns a copy that shares nothing with r.
func (r *ring) clone() *ring {
	c := &ring{}
	if r != nil && r.n > 0 {
		c.buf = make([]int64, len(r.buf))
		for i := range r.n {
			c.buf[i] = r.At(i)
		}
		c.n = r.n
	}
	return c
}

// bytes is what the log takes, itself and its buffer (0 for a nil log).
func (r *ring) bytes() int {
	if r == nil {
		return 0
	}
	return ringBytes + 8*len(r.buf)
}

// ringBytes is what a ring itself takes (its size class).
var ringBytes = allocSize(int(unsafe.Sizeof(ring{})))
