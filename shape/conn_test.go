package shape_test

import (
	"bytes"
	"context"
	"crypto/sha256"
	"errors"
	"io"
	"net"
	"os"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/smoothrate/ratelimit"
	"github.com/smoothrate/ratelimit/shape"
)

// These tests run in synctest bubbles: the limiters use the default clock,
// which is the bubble's fake time, and net.Pipe's deadlines run on it too.

func newLimiter(t *testing.T, rate float64) *ratelimit.Limiter {
	t.Helper()
	lim, err := ratelimit.NewBursty(rate)
	if err != nil {
		t.Fatal(err)
	}
	return lim
}

// drain reads c until it fails and records when each Read returned (since
// start) and how much.
type drain struct {
	mu   sync.Mutex
	ops  []op
	data bytes.Buffer
	done chan struct{}
}

func startDrain(c net.Conn, start time.Time) *drain {
	d := &drain{done: make(chan struct{})}
	go func() {
		defer close(d.done)
		buf := make([]byte, 1<<20)
		for {
			n, err := c.Read(buf)
			d.mu.Lock()
			if n > 0 {
				d.ops = append(d.ops, op{time.Since(start), n})
				d.data.Write(buf[:n])
			}
			d.mu.Unlock()
			if err != nil {
				return
			}
		}
	}()
	return d
}

func (d *drain) schedule() string {
	d.mu.Lock()
	defer d.mu.Unlock()
	return schedule(d.ops)
}

func newConn(t *testing.T, c net.Conn, lim shape.Limits) *shape.Conn {
	t.Helper()
	sc, err := shape.NewConn(c, lim)
	if err != nil {
		t.Fatal(err)
	}
	return sc
}

func TestConnWriteSchedule(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		start := time.Now()
		a, b := net.Pipe()
		sc := newConn(t, a, shape.Limits{Write: newLimiter(t, 1e6)})
		d := startDrain(b, start)
		data := randomBytes(11, 35_000)
		if n, err := sc.Write(data); n != len(data) || err != nil {
			t.Fatalf("Write = %d, %v", n, err)
		}
		sc.Close()
		<-d.done
		if got, want := d.schedule(), "0s:10000 10ms:10000 20ms:10000 30ms:5000"; got != want {
			t.Errorf("schedule\n got %s\nwant %s", got, want)
		}
		if !bytes.Equal(d.data.Bytes(), data) {
			t.Error("data received differs from data sent")
		}
	})
}

func TestConnReadSchedule(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		start := time.Now()
		a, b := net.Pipe()
		sc := newConn(t, a, shape.Limits{Read: newLimiter(t, 1e6)})
		data := randomBytes(12, 25_000)
		go func() {
			b.Write(data) // one Write: the shaped side reads it in chunks
			b.Close()
		}()
		var ops []op
		var got []byte
		buf := make([]byte, 1<<20)
		for {
			n, err := sc.Read(buf)
			if n > 0 {
				ops = append(ops, op{time.Since(start), n})
				got = append(got, buf[:n]...)
			}
			if err == io.EOF {
				break
			}
			if err != nil {
				t.Fatal(err)
			}
		}
		if want := "0s:10000 10ms:10000 20ms:5000"; schedule(ops) != want {
			t.Errorf("schedule\n got %s\nwant %s", schedule(ops), want)
		}
		if !bytes.Equal(got, data) {
			t.Error("data read differs from data sent")
		}
	})
}

func checkDeadlineError(t *testing.T, err error) {
	t.Helper()
	if !errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("err = %v, want os.ErrDeadlineExceeded", err)
	}
	var ne net.Error
	if !errors.As(err, &ne) || !ne.Timeout() {
		t.Errorf("err = %v is not a net.Error with Timeout()", err)
	}
}

// A deadline that the next wait cannot meet fails the Write at once, with
// the bytes written so far.
func TestConnWriteDeadline(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		start := time.Now()
		a, b := net.Pipe()
		sc := newConn(t, a, shape.Limits{Write: newLimiter(t, 1e6)})
		d := startDrain(b, start)
		sc.SetWriteDeadline(start.Add(15 * time.Millisecond))
		n, err := sc.Write(make([]byte, 50_000))
		if n != 20_000 {
			t.Errorf("Write wrote %d bytes, want 20000", n)
		}
		checkDeadlineError(t, err)
		if el := time.Since(start); el != 10*time.Millisecond {
			t.Errorf("Write failed after %v, want 10ms (at once, not at the deadline)", el)
		}
		// Past the deadline, a Write fails before paying anything.
		time.Sleep(10 * time.Millisecond)
		if n, err := sc.Write([]byte("x")); n != 0 {
			t.Errorf("Write after the deadline wrote %d bytes", n)
		} else {
			checkDeadlineError(t, err)
		}
		sc.Close()
		<-d.done
	})
}

// Setting a past deadline interrupts a wait under way (the idiom net/http
// uses to abort a blocked Read); a deadline the wait meets lets it go on,
// paying once; one it does not meet ends it then; Close interrupts it with
// net.ErrClosed.
func TestConnDeadlineInterruptsWait(t *testing.T) {
	for _, tc := range []struct {
		name   string
		act    func(c *shape.Conn)
		wantN  int
		check  func(t *testing.T, err error)
		sched  string
		unpaid bool
	}{
		{"past", func(c *shape.Conn) { c.SetWriteDeadline(time.Now().Add(-time.Second)) }, 10_000,
			checkDeadlineError, "0s:10000", true},
		{"both", func(c *shape.Conn) { c.SetDeadline(time.Now()) }, 10_000,
			checkDeadlineError, "0s:10000", true},
		{"extend", func(c *shape.Conn) { c.SetWriteDeadline(time.Now().Add(time.Hour)) }, 30_000,
			func(t *testing.T, err error) {
				if err != nil {
					t.Fatal(err)
				}
			}, "0s:10000 10ms:10000 20ms:10000", false},
		{"missed", func(c *shape.Conn) {
			start := time.Now()
			c.SetWriteDeadline(start.Add(5 * time.Millisecond)) // the wait ends at 10 ms
			time.Sleep(10 * time.Millisecond)
			if el := time.Since(start); el != 10*time.Millisecond {
				panic(el)
			}
		}, 10_000, func(t *testing.T, err error) {
			checkDeadlineError(t, err)
		}, "0s:10000", true},
		{"close", func(c *shape.Conn) { c.Close() }, 10_000,
			func(t *testing.T, err error) {
				if !errors.Is(err, net.ErrClosed) {
					t.Fatalf("err = %v, want net.ErrClosed", err)
				}
			}, "0s:10000", true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				start := time.Now()
				a, b := net.Pipe()
				lim := newLimiter(t, 1e6)
				sc := newConn(t, a, shape.Limits{Write: lim})
				d := startDrain(b, start)
				type result struct {
					n   int
					err error
				}
				res := make(chan result)
				go func() {
					n, err := sc.Write(make([]byte, 30_000))
					res <- result{n, err}
				}()
				synctest.Wait() // the writer sleeps for its second chunk
				tc.act(sc)
				r := <-res
				if r.n != tc.wantN {
					t.Errorf("Write wrote %d bytes, want %d", r.n, tc.wantN)
				}
				tc.check(t, r.err)
				sc.Close()
				<-d.done
				if got := d.schedule(); got != tc.sched {
					t.Errorf("schedule %s, want %s", got, tc.sched)
				}
				// An interrupted wait gives its booking back: the limiter
				// owes only the first chunk (10 ms from the start).
				if tc.unpaid {
					if next := lim.Snapshot().NextFree; next != 10*time.Millisecond-time.Since(start) {
						t.Errorf("limiter NextFree = %v, want the first chunk's 10ms", next)
					}
				}
			})
		})
	}
}

func TestConnReadDeadlineInterruptsWait(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		a, b := net.Pipe()
		sc := newConn(t, a, shape.Limits{Read: newLimiter(t, 1e6)})
		go func() {
			b.Write(make([]byte, 30_000))
		}()
		buf := make([]byte, 1<<20)
		if n, err := sc.Read(buf); n != 10_000 || err != nil {
			t.Fatalf("Read = %d, %v", n, err)
		}
		res := make(chan error)
		go func() {
			_, err := sc.Read(buf)
			res <- err
		}()
		synctest.Wait()
		sc.SetReadDeadline(time.Unix(1, 0))
		checkDeadlineError(t, <-res)
		sc.Close()
		b.Close()
	})
}

// pipeListener is a net.Listener over net.Pipe, so that listener tests run
// in a synctest bubble.
type pipeListener struct {
	conns  chan net.Conn
	closed chan struct{}
}

func newPipeListener() *pipeListener {
	return &pipeListener{conns: make(chan net.Conn), closed: make(chan struct{})}
}

func (l *pipeListener) Accept() (net.Conn, error) {
	select {
	case c := <-l.conns:
		return c, nil
	case <-l.closed:
		return nil, net.ErrClosed
	}
}
func (l *pipeListener) Close() error   { close(l.closed); return nil }
func (l *pipeListener) Addr() net.Addr { return &net.UnixAddr{Name: "pipe", Net: "unix"} }
func (l *pipeListener) dial() net.Conn {
	a, b := net.Pipe()
	l.conns <- b
	return a
}

// Every accepted connection gets its own limiter from perConn, and all of
// them share the total: two connections each sending 30 000 bytes with their
// own 1 MB/s need 30 ms alone, but with a shared 1 MB/s cap the six chunks
// are spread over 50 ms.
func TestListener(t *testing.T) {
	for _, tc := range []struct {
		name   string
		shared bool
		last   time.Duration
	}{
		{"per-conn", false, 20 * time.Millisecond},
		{"shared", true, 50 * time.Millisecond},
	} {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				start := time.Now()
				pl := newPipeListener()
				var shared shape.Limits
				if tc.shared {
					shared.Write = newLimiter(t, 1e6)
				}
				made := 0
				ln, err := shape.NewListener(pl, shared, func(net.Conn) shape.Limits {
					made++
					return shape.Limits{Write: newLimiter(t, 1e6)}
				})
				if err != nil {
					t.Fatal(err)
				}
				var wg sync.WaitGroup
				var drains []*drain
				for range 2 {
					dialed := make(chan net.Conn, 1)
					go func() { dialed <- pl.dial() }()
					c, err := ln.Accept()
					if err != nil {
						t.Fatal(err)
					}
					drains = append(drains, startDrain(<-dialed, start))
					if _, ok := c.(*shape.Conn); !ok {
						t.Fatalf("Accept returned %T, want *shape.Conn", c)
					}
					wg.Go(func() {
						if _, err := c.Write(make([]byte, 30_000)); err != nil {
							t.Error(err)
						}
						c.Close()
					})
				}
				wg.Wait()
				ln.Close()
				var last time.Duration
				for _, d := range drains {
					<-d.done
					for i, o := range d.ops {
						last = max(last, o.at)
						if i > 0 && o.at-d.ops[i-1].at < 10*time.Millisecond {
							t.Errorf("chunks %v closer than the per-connection 10 ms", d.ops)
						}
					}
					if d.data.Len() != 30_000 {
						t.Errorf("received %d bytes, want 30000", d.data.Len())
					}
				}
				if last != tc.last {
					t.Errorf("last chunk at %v, want %v", last, tc.last)
				}
				if made != 2 {
					t.Errorf("perConn called %d times, want 2", made)
				}
				if _, err := ln.Accept(); !errors.Is(err, net.ErrClosed) {
					t.Errorf("Accept after Close: %v", err)
				}
			})
		})
	}
}

// Over real TCP at a high rate: io.Copy in both directions through shaped
// connections delivers exactly the bytes sent.
func TestConnTCPChecksum(t *testing.T) {
	tl, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ln, err := shape.NewListener(tl, shape.Limits{Read: newLimiter(t, 2e9)}, func(net.Conn) shape.Limits {
		return shape.Limits{Read: newLimiter(t, 1e9), Write: newLimiter(t, 1e9)}
	})
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	data := randomBytes(13, 3<<20)
	echoed := make(chan error, 1)
	go func() {
		c, err := ln.Accept()
		if err != nil {
			echoed <- err
			return
		}
		defer c.Close()
		_, err = io.Copy(c, c) // echo through both shaped directions
		echoed <- err
	}()
	raw, err := net.Dial("tcp", tl.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	c := newConn(t, raw, shape.Limits{Write: newLimiter(t, 1e9)})
	go func() {
		c.Write(data)
		raw.(*net.TCPConn).CloseWrite()
	}()
	got, err := io.ReadAll(c)
	if err != nil {
		t.Fatal(err)
	}
	if err := <-echoed; err != nil {
		t.Fatal(err)
	}
	if sha256.Sum256(got) != sha256.Sum256(data) {
		t.Errorf("echo differs: %d bytes back of %d", len(got), len(data))
	}
}

// A Writer's context deadline that the next wait cannot meet fails the
// Write at once, like a connection's deadline.
func TestWriterContextDeadline(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		start := time.Now()
		ctx, cancel := context.WithDeadline(context.Background(), start.Add(15*time.Millisecond))
		defer cancel()
		var out bytes.Buffer
		w, err := shape.NewWriter(&out, newLimiter(t, 1e6), shape.WithContext(ctx))
		if err != nil {
			t.Fatal(err)
		}
		n, err := w.Write(make([]byte, 50_000))
		if n != 20_000 || out.Len() != 20_000 {
			t.Errorf("Write = %d (%d written), want 20000", n, out.Len())
		}
		checkDeadlineError(t, err)
		if !errors.Is(err, context.DeadlineExceeded) {
			t.Errorf("err = %v does not match context.DeadlineExceeded", err)
		}
		if el := time.Since(start); el != 10*time.Millisecond {
			t.Errorf("Write failed after %v, want 10ms", el)
		}
	})
}

// TestConnDeadlineChangePaysOnce: a deadline set while a Write waits for
// its chunk on a limiter that another stream has booked since (a shared
// limiter) neither interrupts the wait nor books the chunk again: the chunk
// goes at its time, and the limiter holds the bytes written, once.
func TestConnDeadlineChangePaysOnce(t *testing.T) {
	for name, deadline := range map[string]func() time.Time{
		"none":  func() time.Time { return time.Time{} },
		"later": func() time.Time { return time.Now().Add(time.Hour) },
		"met":   func() time.Time { return time.Now().Add(2 * time.Second) },
	} {
		t.Run(name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				shared, err := ratelimit.NewBursty(1000, ratelimit.WithMaxBurstSeconds(0))
				if err != nil {
					t.Fatal(err)
				}
				a, b := net.Pipe()
				defer b.Close()
				go io.Copy(io.Discard, b)
				sc, err := shape.NewConn(a, shape.Limits{Write: shared}, shape.WithChunkSize(1000))
				if err != nil {
					t.Fatal(err)
				}
				defer sc.Close()
				other, err := shape.NewWriter(io.Discard, shared, shape.WithChunkSize(1000))
				if err != nil {
					t.Fatal(err)
				}
				start := time.Now()
				done := make(chan time.Duration)
				go func() {
					// The first chunk at 0 s, the second booked for 1 s
					// (the limiter's next free moment then 2 s).
					if _, err := sc.Write(make([]byte, 2000)); err != nil {
						t.Errorf("Write: %v", err)
					}
					done <- time.Since(start)
				}()
				time.Sleep(100 * time.Millisecond)
				otherDone := make(chan struct{})
				go func() {
					defer close(otherDone)
					other.Write(make([]byte, 1000)) // waits until 2 s, books until 3 s
				}()
				time.Sleep(100 * time.Millisecond)
				synctest.Wait()
				sc.SetWriteDeadline(deadline())
				if took := <-done; took != time.Second {
					t.Errorf("the second chunk went at %v, want 1s", took)
				}
				if next := shared.Snapshot().NextFree + time.Since(start); next != 3*time.Second {
					t.Errorf("the shared limiter is booked until %v, want 3s for 3000 bytes", next)
				}
				<-otherDone
			})
		})
	}
}
