package shape_test

import (
	"testing"

	"github.com/stretchr/testify/assert"

	"github.com/smoothrate/ratelimit"
	"github.com/smoothrate/ratelimit/shape"
)

// TestZeroValues: a shaper declared rather than made by its constructor has
// nothing to wrap. Its I/O methods must return an error wrapping
// ratelimit.ErrNotInitialized, not panic on the nil stream.
func TestZeroValues(t *testing.T) {
	p := []byte("data")

	var w shape.Writer
	n, err := w.Write(p)
	assert.ErrorIs(t, err, ratelimit.ErrNotInitialized, "Writer.Write")
	assert.Zero(t, n)

	var r shape.Reader
	n, err = r.Read(p)
	assert.ErrorIs(t, err, ratelimit.ErrNotInitialized, "Reader.Read")
	assert.Zero(t, n)

	var c shape.Conn
	n, err = c.Write(p)
	assert.ErrorIs(t, err, ratelimit.ErrNotInitialized, "Conn.Write")
	assert.Zero(t, n)
	n, err = c.Read(p)
	assert.ErrorIs(t, err, ratelimit.ErrNotInitialized, "Conn.Read")
	assert.Zero(t, n)

	var l shape.Listener
	conn, err := l.Accept()
	assert.ErrorIs(t, err, ratelimit.ErrNotInitialized, "Listener.Accept")
	assert.Nil(t, conn)
}
