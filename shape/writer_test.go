package shape_test

import (
	"bytes"
	"context"
	"crypto/sha256"
	"errors"
	"io"
	"math"
	"math/rand/v2"
	"net"
	"testing"
	"time"

	"github.com/smoothrate/ratelimit"
	"github.com/smoothrate/ratelimit/clocktest"
	"github.com/smoothrate/ratelimit/shape"
)

func newFakeLimiter(t *testing.T, rate float64, opts ...ratelimit.Option) (*ratelimit.Limiter, *clocktest.Fake) {
	t.Helper()
	clk := clocktest.NewFake()
	lim, err := ratelimit.NewBursty(rate, append([]ratelimit.Option{ratelimit.WithClock(clk)}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	return lim, clk
}

func newWriter(t *testing.T, w io.Writer, lim ratelimit.Acquirer, opts ...shape.Option) *shape.Writer {
	t.Helper()
	sw, err := shape.NewWriter(w, lim, opts...)
	if err != nil {
		t.Fatal(err)
	}
	return sw
}

func randomBytes(seed uint64, n int) []byte {
	r := rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(r.Uint32())
	}
	return b
}

func TestChunkSize(t *testing.T) {
	for _, tc := range []struct {
		rate float64
		want int
	}{
		{math.NaN(), shape.MinChunkSize},
		{-1, shape.MinChunkSize},
		{0, shape.MinChunkSize},
		{1000, shape.MinChunkSize},      // 10 B in 10 ms: clamped up
		{102_400, shape.MinChunkSize},   // exactly 1 KiB in 10 ms
		{1e6, 10_000},                   // 10 ms of 1 MB/s
		{5e6, 50_000},                   //
		{6_553_600, shape.MaxChunkSize}, // exactly 64 KiB in 10 ms
		{1e9, shape.MaxChunkSize},       // clamped down
		{math.Inf(1), shape.MaxChunkSize},
	} {
		if got := shape.ChunkSize(tc.rate); got != tc.want {
			t.Errorf("ChunkSize(%v) = %d, want %d", tc.rate, got, tc.want)
		}
	}
}

// At 1 MB/s the default chunk is 10 000 bytes (10 ms). The limiter starts
// empty and is pay-later, so the first chunk leaves at once and each one
// after waits for the one before; the tail of 5 000 bytes is paid like any
// chunk, and the next Write waits only for that half chunk.
func TestWriterSchedule(t *testing.T) {
	lim, clk := newFakeLimiter(t, 1e6)
	rec := &recorder{clk: clk}
	w := newWriter(t, rec, lim)

	data := randomBytes(1, 35_000)
	n, err := w.Write(data)
	if n != len(data) || err != nil {
		t.Fatalf("Write = %d, %v; want %d, nil", n, err, len(data))
	}
	if got, want := rec.schedule(), "0s:10000 10ms:10000 20ms:10000 30ms:5000"; got != want {
		t.Errorf("schedule\n got %s\nwant %s", got, want)
	}
	if got, want := clk.TakeEvents(), "[R0.00, R0.01, R0.01, R0.01]"; got != want {
		t.Errorf("sleeps %s, want %s", got, want)
	}

	rec.ops = nil
	if _, err := w.Write(data[:1]); err != nil {
		t.Fatal(err)
	}
	if got, want := rec.schedule(), "35ms:1"; got != want {
		t.Errorf("after a half chunk: %s, want %s", got, want)
	}
	if !bytes.Equal(rec.data, append(data, data[0])) {
		t.Error("data written differs from data given")
	}
}

// After an idle second a bursty limiter holds maxBurstSeconds of bytes. The
// stored 20 000 bytes (20 ms) go at once, and pay-later lets one more chunk
// through before the stream settles back to 10 ms per chunk.
func TestWriterBurstAfterIdle(t *testing.T) {
	lim, clk := newFakeLimiter(t, 1e6, ratelimit.WithMaxBurstSeconds(0.02))
	rec := &recorder{clk: clk}
	w := newWriter(t, rec, lim)

	if _, err := w.Write(make([]byte, 10_000)); err != nil { // books 10 ms
		t.Fatal(err)
	}
	clk.Advance(time.Second)
	rec.ops = nil
	if _, err := w.Write(make([]byte, 50_000)); err != nil {
		t.Fatal(err)
	}
	want := "1s:10000 1s:10000 1s:10000 1.01s:10000 1.02s:10000"
	if got := rec.schedule(); got != want {
		t.Errorf("schedule\n got %s\nwant %s", got, want)
	}
}

// SetRate while a Write is under way takes effect at the next chunk, and the
// chunk size follows the new rate. The rate doubles right after the second
// chunk went out (booked until 20 ms at the old rate).
func TestWriterSetRateMidStream(t *testing.T) {
	lim, clk := newFakeLimiter(t, 1e6)
	rec := &recorder{clk: clk}
	rec.hook = func(i int) {
		if i == 2 {
			if err := lim.SetRate(2e6); err != nil {
				t.Error(err)
			}
		}
	}
	w := newWriter(t, rec, lim)
	if _, err := w.Write(make([]byte, 80_000)); err != nil {
		t.Fatal(err)
	}
	want := "0s:10000 10ms:10000 20ms:20000 30ms:20000 40ms:20000"
	if got := rec.schedule(); got != want {
		t.Errorf("schedule\n got %s\nwant %s", got, want)
	}
}

func TestWriterFixedChunk(t *testing.T) {
	lim, clk := newFakeLimiter(t, 1e6)
	rec := &recorder{clk: clk}
	w := newWriter(t, rec, lim, shape.WithChunkSize(4000))
	if _, err := w.Write(make([]byte, 10_000)); err != nil {
		t.Fatal(err)
	}
	if got, want := rec.schedule(), "0s:4000 4ms:4000 8ms:2000"; got != want {
		t.Errorf("schedule %s, want %s", got, want)
	}
}

// Two streams with their own 1 MB/s limits share a 1 MB/s total: together
// they get the shared rate, and each chunk waits about the longer of its two
// waits, not their sum.
func TestWriterShared(t *testing.T) {
	clk := clocktest.NewFake()
	mk := func() *ratelimit.Limiter {
		l, err := ratelimit.NewBursty(1e6, ratelimit.WithClock(clk))
		if err != nil {
			t.Fatal(err)
		}
		return l
	}
	shared := mk()
	recA, recB := &recorder{clk: clk}, &recorder{clk: clk}
	a := newWriter(t, recA, mk(), shape.WithShared(shared))
	b := newWriter(t, recB, mk(), shape.WithShared(shared))
	for range 3 {
		if _, err := a.Write(make([]byte, 10_000)); err != nil {
			t.Fatal(err)
		}
		if _, err := b.Write(make([]byte, 10_000)); err != nil {
			t.Fatal(err)
		}
	}
	if got, want := recA.schedule(), "0s:10000 20ms:10000 40ms:10000"; got != want {
		t.Errorf("A: %s, want %s", got, want)
	}
	if got, want := recB.schedule(), "10ms:10000 30ms:10000 50ms:10000"; got != want {
		t.Errorf("B: %s, want %s", got, want)
	}
}

// A +Inf rate (or a nil limiter, untyped or a nil *Limiter, as a variable
// set only when a rate is given is) is a passthrough: one Write, no sleep.
func TestWriterUnlimited(t *testing.T) {
	lim, clk := newFakeLimiter(t, math.Inf(1), ratelimit.WithMaxBurstSeconds(0.01))
	var unset *ratelimit.Limiter
	for _, l := range []ratelimit.Acquirer{lim, nil, unset} {
		rec := &recorder{clk: clk}
		w := newWriter(t, rec, l)
		if n, err := w.Write(make([]byte, 1<<20)); n != 1<<20 || err != nil {
			t.Fatalf("Write = %d, %v", n, err)
		}
		if got, want := rec.schedule(), "0s:1048576"; got != want {
			t.Errorf("%v: schedule %s, want %s", l, got, want)
		}
	}
	if got := clk.TakeEvents(); got != "[]" {
		t.Errorf("slept: %s", got)
	}
	// From +Inf to a finite rate: shaping starts with the next Write. As in
	// Guava, a limiter leaving +Inf starts with a full bucket (here 10 ms).
	if err := lim.SetRate(1e6); err != nil {
		t.Fatal(err)
	}
	rec := &recorder{clk: clk}
	w := newWriter(t, rec, lim)
	if _, err := w.Write(make([]byte, 40_000)); err != nil {
		t.Fatal(err)
	}
	if got, want := rec.schedule(), "0s:10000 0s:10000 10ms:10000 20ms:10000"; got != want {
		t.Errorf("after SetRate: %s, want %s", got, want)
	}
}

func TestWriterOptionErrors(t *testing.T) {
	for _, opt := range []shape.Option{shape.WithChunkSize(0), shape.WithChunkSize(-5)} {
		if _, err := shape.NewWriter(io.Discard, nil, opt); !errors.Is(err, shape.ErrInvalidChunkSize) {
			t.Errorf("err = %v, want ErrInvalidChunkSize", err)
		}
	}
	// Nothing to wrap: an error, not a panic at the first Read or Write.
	for name, mk := range map[string]func() error{
		"NewWriter":   func() error { _, err := shape.NewWriter(nil, nil); return err },
		"NewReader":   func() error { _, err := shape.NewReader(nil, nil); return err },
		"NewConn":     func() error { _, err := shape.NewConn(nil, shape.Limits{}); return err },
		"NewListener": func() error { _, err := shape.NewListener(nil, shape.Limits{}, nil); return err },
	} {
		if err := mk(); !errors.Is(err, shape.ErrInvalidArgument) {
			t.Errorf("%s(nil): err = %v, want ErrInvalidArgument", name, err)
		}
	}
	//lint:ignore SA1012 testing the nil check
	if _, err := shape.NewReader(nil, nil, shape.WithContext(nil)); !errors.Is(err, shape.ErrInvalidOption) { //nolint:staticcheck
		t.Errorf("nil context: err = %v, want ErrInvalidOption", err)
	}
	// The module's one option convention: a nil option, a bad value and an
	// option that does not apply are errors from the constructor.
	var out bytes.Buffer
	c1, c2 := net.Pipe()
	defer c1.Close()
	defer c2.Close()
	for name, mk := range map[string]func() error{
		"nil option": func() error { _, err := shape.NewWriter(&out, nil, nil); return err },
		"nil shared": func() error { _, err := shape.NewWriter(&out, nil, shape.WithShared(nil)); return err },
		"context on a Conn": func() error {
			_, err := shape.NewConn(c1, shape.Limits{}, shape.WithContext(context.Background()))
			return err
		},
		"context on a Listener": func() error {
			_, err := shape.NewListener(fakeListener{}, shape.Limits{}, nil, shape.WithContext(context.Background()))
			return err
		},
		"chunk size wraps both": func() error { _, err := shape.NewWriter(&out, nil, shape.WithChunkSize(0)); return err },
	} {
		if err := mk(); !errors.Is(err, shape.ErrInvalidOption) {
			t.Errorf("%s: err = %v, want ErrInvalidOption", name, err)
		}
	}
}

// fakeListener is a net.Listener that accepts nothing.
type fakeListener struct{ net.Listener }

// The context ends the waits: Write returns what was written and the
// context's error. A deadline the next wait cannot meet fails at once.
func TestWriterContext(t *testing.T) {
	lim, clk := newFakeLimiter(t, 1e6)
	ctx, cancel := context.WithCancel(context.Background())
	rec := &recorder{clk: clk}
	rec.hook = func(i int) {
		if i == 2 {
			cancel()
		}
	}
	w := newWriter(t, rec, lim, shape.WithContext(ctx))
	n, err := w.Write(make([]byte, 50_000))
	if n != 20_000 || !errors.Is(err, context.Canceled) {
		t.Fatalf("Write = %d, %v; want 20000, context.Canceled", n, err)
	}
	if got, want := rec.schedule(), "0s:10000 10ms:10000"; got != want {
		t.Errorf("schedule %s, want %s", got, want)
	}
}

// flaky is a writer that accepts a random prefix of some writes and says
// why it stopped (errFlaky), or stops short without saying (a broken
// writer, which the shaper reports as io.ErrShortWrite).
type flaky struct {
	rnd  *rand.Rand
	out  bytes.Buffer
	mute bool // stop short without an error
}

var errFlaky = errors.New("flaky: try again")

func (f *flaky) Write(p []byte) (int, error) {
	if len(p) > 1 && f.rnd.IntN(4) == 0 {
		n := f.rnd.IntN(len(p))
		f.out.Write(p[:n])
		if f.mute {
			return n, nil
		}
		return n, errFlaky
	}
	return f.out.Write(p)
}

// A caller that resumes after each short write gets the stream through
// exactly: nothing lost, nothing doubled, and every reported count is what
// the wrapped writer accepted.
func TestWriterShortWritesLoseNothing(t *testing.T) {
	for _, mute := range []bool{false, true} {
		lim, _ := newFakeLimiter(t, 3e6) // chunks of 30 000 bytes
		data := randomBytes(7, 1<<20)
		f := &flaky{rnd: rand.New(rand.NewPCG(3, 4)), mute: mute}
		w := newWriter(t, f, lim)
		rest, shorts := data, 0
		for len(rest) > 0 {
			want := f.out.Len()
			size := min(len(rest), 1+f.rnd.IntN(100_000))
			n, err := w.Write(rest[:size])
			if f.out.Len()-want != n {
				t.Fatalf("Write reported %d bytes, writer got %d", n, f.out.Len()-want)
			}
			switch {
			case err == nil && n != size:
				t.Fatalf("Write = %d, nil for %d bytes", n, size)
			case err != nil && mute && !errors.Is(err, io.ErrShortWrite):
				t.Fatalf("mute short write: err = %v, want io.ErrShortWrite", err)
			case err != nil && !mute && !errors.Is(err, errFlaky):
				t.Fatalf("err = %v, want errFlaky", err)
			case err != nil:
				shorts++
			}
			rest = rest[n:]
		}
		if shorts == 0 {
			t.Fatal("the test wrote no short writes")
		}
		if sha256.Sum256(f.out.Bytes()) != sha256.Sum256(data) {
			t.Errorf("mute=%v: output differs from input after %d short writes", mute, shorts)
		}
	}
}

// io.Copy through a Writer, from sources that hand out odd sizes, delivers
// exactly the input.
func TestWriterCopyChecksum(t *testing.T) {
	for _, chunk := range []int{0, 1, 777, 64 << 10} {
		lim, _ := newFakeLimiter(t, 12_345_678)
		var opts []shape.Option
		if chunk > 0 {
			opts = append(opts, shape.WithChunkSize(chunk))
		}
		size := 300_001
		if chunk == 1 {
			size = 20_001 // one Acquire per byte
		}
		data := randomBytes(uint64(chunk), size)
		var out bytes.Buffer
		w := newWriter(t, &out, lim, opts...)
		src := struct{ io.Reader }{bytes.NewReader(data)} // hide WriterTo: io.Copy's own buffer
		n, err := io.Copy(w, src)
		if n != int64(len(data)) || err != nil {
			t.Fatalf("Copy = %d, %v", n, err)
		}
		if sha256.Sum256(out.Bytes()) != sha256.Sum256(data) {
			t.Errorf("chunk %d: output differs from input", chunk)
		}
	}
}

// badCount returns an impossible count; the Writer refuses it.
type badCount struct{ n int }

func (b badCount) Write(p []byte) (int, error) { return b.n, nil }
func (b badCount) Read(p []byte) (int, error)  { return b.n, nil }

func TestWriterInvalidCount(t *testing.T) {
	for _, n := range []int{-1, 1 << 20} {
		w := newWriter(t, badCount{n}, nil)
		got, err := w.Write(make([]byte, 10))
		if got != 0 || !errors.Is(err, shape.ErrInvalidCount) {
			t.Errorf("count %d: Write = %d, %v; want 0, ErrInvalidCount", n, got, err)
		}
		lim, _ := newFakeLimiter(t, 1e6)
		r, err := shape.NewReader(badCount{n}, lim)
		if err != nil {
			t.Fatal(err)
		}
		if got, err := r.Read(make([]byte, 10)); got != 0 || !errors.Is(err, shape.ErrInvalidCount) {
			t.Errorf("count %d: Read = %d, %v; want 0, ErrInvalidCount", n, got, err)
		}
	}
}

// Over a warming-up limiter the chunks start about three times further
// apart and close in to the stable 10 ms as the limiter warms up.
func TestWriterWarmingUp(t *testing.T) {
	clk := clocktest.NewFake()
	lim, err := ratelimit.NewWarmingUp(1e6, 100*time.Millisecond, ratelimit.WithClock(clk))
	if err != nil {
		t.Fatal(err)
	}
	rec := &recorder{clk: clk}
	w := newWriter(t, rec, lim)
	if _, err := w.Write(make([]byte, 300_000)); err != nil {
		t.Fatal(err)
	}
	if len(rec.ops) != 30 {
		t.Fatalf("%d chunks, want 30", len(rec.ops))
	}
	var gaps []time.Duration
	for i := 1; i < len(rec.ops); i++ {
		gaps = append(gaps, rec.ops[i].at-rec.ops[i-1].at)
	}
	if gaps[0] < 25*time.Millisecond {
		t.Errorf("first gap %v, want about 3 × 10 ms (cold)", gaps[0])
	}
	for i := 1; i < len(gaps); i++ {
		if gaps[i] > gaps[i-1] {
			t.Errorf("gap %d (%v) longer than gap %d (%v): not warming up", i, gaps[i], i-1, gaps[i-1])
		}
	}
	if last := gaps[len(gaps)-1]; last != 10*time.Millisecond {
		t.Errorf("last gap %v, want the stable 10ms", last)
	}
}
