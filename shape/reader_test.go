package shape_test

import (
	"bytes"
	"context"
	"crypto/sha256"
	"errors"
	"io"
	"math"
	"testing"
	"testing/iotest"

	"github.com/smoothrate/ratelimit/shape"
)

// Reads are paid before they reach the source and trimmed to the chunk: a
// 64 KiB buffer still only gets 10 000 bytes per 10 ms at 1 MB/s. The last
// chunk is paid in full but the source has only 5 000 bytes; the unused
// credit lets the final Read see EOF without waiting.
func TestReaderSchedule(t *testing.T) {
	lim, clk := newFakeLimiter(t, 1e6)
	data := randomBytes(2, 35_000)
	src := &timedReader{clk: clk, src: bytes.NewReader(data)}
	r, err := shape.NewReader(src, lim)
	if err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 64<<10)
	var got []byte
	for {
		n, err := r.Read(buf)
		got = append(got, buf[:n]...)
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
	}
	if want := "0s:10000 10ms:10000 20ms:10000 30ms:5000 30ms:0"; schedule(src.ops) != want {
		t.Errorf("schedule\n got %s\nwant %s", schedule(src.ops), want)
	}
	if !bytes.Equal(got, data) {
		t.Error("data read differs from the source")
	}
}

// capped returns at most max bytes per Read, like a socket with little
// data buffered.
type capped struct {
	r   io.Reader
	max int
}

func (c capped) Read(p []byte) (int, error) { return c.r.Read(p[:min(len(p), c.max)]) }

// A Read smaller than a chunk pays only for itself. A source that returns
// less than was paid for leaves credit, spent by the next Reads before
// anything more is paid: a read is never larger than what has been paid for,
// and nothing is paid twice.
func TestReaderCredit(t *testing.T) {
	lim, clk := newFakeLimiter(t, 1e6)
	src := &timedReader{clk: clk, src: bytes.NewReader(make([]byte, 100_000))}
	r, _ := shape.NewReader(src, lim)
	buf := make([]byte, 3000)
	for range 3 {
		if _, err := r.Read(buf); err != nil {
			t.Fatal(err)
		}
	}
	if want := "0s:3000 3ms:3000 6ms:3000"; schedule(src.ops) != want {
		t.Errorf("small reads\n got %s\nwant %s", schedule(src.ops), want)
	}

	lim2, clk2 := newFakeLimiter(t, 1e6)
	src2 := &timedReader{clk: clk2, src: capped{bytes.NewReader(make([]byte, 100_000)), 4000}}
	r2, _ := shape.NewReader(src2, lim2)
	buf = make([]byte, 64<<10)
	for range 5 {
		if _, err := r2.Read(buf); err != nil {
			t.Fatal(err)
		}
	}
	if want := "0s:4000 0s:4000 0s:2000 10ms:4000 10ms:4000"; schedule(src2.ops) != want {
		t.Errorf("short source reads\n got %s\nwant %s", schedule(src2.ops), want)
	}
}

func TestReaderUnlimited(t *testing.T) {
	lim, clk := newFakeLimiter(t, math.Inf(1))
	src := &timedReader{clk: clk, src: bytes.NewReader(make([]byte, 1<<20))}
	r, _ := shape.NewReader(src, lim)
	if n, err := r.Read(make([]byte, 1<<20)); n != 1<<20 || err != nil {
		t.Fatalf("Read = %d, %v", n, err)
	}
	if got := clk.TakeEvents(); got != "[]" {
		t.Errorf("slept: %s", got)
	}
}

// A cancelled context fails the wait before the source is touched.
func TestReaderContext(t *testing.T) {
	lim, clk := newFakeLimiter(t, 1e6)
	ctx, cancel := context.WithCancel(context.Background())
	src := &timedReader{clk: clk, src: bytes.NewReader(make([]byte, 100_000))}
	r, _ := shape.NewReader(src, lim, shape.WithContext(ctx))
	buf := make([]byte, 10_000)
	if _, err := r.Read(buf); err != nil {
		t.Fatal(err)
	}
	cancel()
	if n, err := r.Read(buf); n != 0 || !errors.Is(err, context.Canceled) {
		t.Fatalf("Read = %d, %v; want 0, context.Canceled", n, err)
	}
	if len(src.ops) != 1 {
		t.Errorf("the source was read %d times, want 1", len(src.ops))
	}
}

// io.Copy through a Reader, over sources that return odd sizes and data
// with their errors, delivers exactly the input.
func TestReaderCopyChecksum(t *testing.T) {
	data := randomBytes(9, 250_003)
	for name, wrap := range map[string]func(io.Reader) io.Reader{
		"plain":   func(r io.Reader) io.Reader { return r },
		"half":    iotest.HalfReader,
		"onebyte": func(r io.Reader) io.Reader { return iotest.OneByteReader(io.LimitReader(r, 20_000)) },
		"dataerr": iotest.DataErrReader,
		"timeout": iotest.TimeoutReader,
	} {
		lim, _ := newFakeLimiter(t, 7_654_321)
		in := data
		if name == "onebyte" {
			in = data[:20_000]
		}
		r, _ := shape.NewReader(wrap(bytes.NewReader(data)), lim)
		var out bytes.Buffer
		// Retry the one timeout of iotest.TimeoutReader, as a caller would.
		for {
			_, err := io.Copy(&out, r)
			if errors.Is(err, iotest.ErrTimeout) {
				continue
			}
			if err != nil {
				t.Fatalf("%s: %v", name, err)
			}
			break
		}
		if sha256.Sum256(out.Bytes()) != sha256.Sum256(in) {
			t.Errorf("%s: output (%d bytes) differs from input (%d bytes)", name, out.Len(), len(in))
		}
	}
}

// iotest.TestReader checks the io.Reader contract (including ReadAt-free
// behaviour after EOF) through a shaped reader.
func TestReaderContract(t *testing.T) {
	lim, _ := newFakeLimiter(t, 1e6)
	data := randomBytes(5, 23_456)
	r, _ := shape.NewReader(bytes.NewReader(data), lim)
	if err := iotest.TestReader(r, data); err != nil {
		t.Fatal(err)
	}
}
