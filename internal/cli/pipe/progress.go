package pipe

import (
	"fmt"
	"io"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/smoothrate/ratelimit/shape"
)

// isTerminal reports whether w is a character device (a terminal), without
// a terminal library: that is enough to decide whether to draw a progress
// line.
func isTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	if !ok {
		return false
	}
	fi, err := f.Stat()
	return err == nil && fi.Mode()&os.ModeCharDevice != 0
}

// progressInterval is how often the progress line is redrawn.
const progressInterval = 250 * time.Millisecond

// startProgress redraws a progress line on w until the returned function is
// called, which draws the last one and ends the line.
func startProgress(w io.Writer, n *atomic.Int64, size int64) (stop func()) {
	start := time.Now()
	p := newProgress(size)
	done := make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() {
		t := time.NewTicker(progressInterval)
		defer t.Stop()
		for {
			select {
			case now := <-t.C:
				fmt.Fprint(w, p.line(now.Sub(start), n.Load()))
			case <-done:
				return
			}
		}
	})
	return func() {
		close(done)
		wg.Wait()
		fmt.Fprint(w, p.line(time.Since(start), n.Load())+"\n")
	}
}

// progress turns byte counts into a progress line. The current rate is
// measured over the last second of samples.
type progress struct {
	size    int64
	samples []sample
	width   int // of the last line drawn, to blank what is left of it
}

// newProgress starts the samples with nothing copied at time 0, so that the
// first line already has a current rate.
func newProgress(size int64) *progress {
	return &progress{size: size, samples: []sample{{0, 0}}}
}

type sample struct {
	at time.Duration
	n  int64
}

// line returns the progress line at elapsed with n bytes copied, starting
// with a carriage return so that it overwrites the previous one.
func (p *progress) line(elapsed time.Duration, n int64) string {
	p.samples = append(p.samples, sample{elapsed, n})
	for len(p.samples) > 2 && elapsed-p.samples[1].at >= time.Second {
		p.samples = p.samples[1:]
	}
	first := p.samples[0]
	current := 0.0
	if dt := elapsed - first.at; dt > 0 {
		current = float64(n-first.n) / dt.Seconds()
	}
	avg := 0.0
	if elapsed > 0 {
		avg = float64(n) / elapsed.Seconds()
	}
	var b strings.Builder
	b.WriteString(shape.FormatSize(n))
	if p.size > 0 {
		fmt.Fprintf(&b, " of %s (%.0f%%)", shape.FormatSize(p.size), 100*float64(n)/float64(p.size))
	}
	fmt.Fprintf(&b, "  %s now  %s avg  %s", shape.FormatRate(current), shape.FormatRate(avg), formatClock(elapsed))
	if p.size > 0 && n < p.size {
		b.WriteString("  ETA ")
		if rate := current; rate > 0 {
			b.WriteString(formatClock(time.Duration(float64(p.size-n) / rate * float64(time.Second))))
		} else {
			b.WriteString("?")
		}
	}
	s := b.String()
	pad := max(p.width-len(s), 0)
	p.width = len(s)
	return "\r" + s + strings.Repeat(" ", pad)
}

// formatClock prints a duration as h:mm:ss or m:ss.
func formatClock(d time.Duration) string {
	if d < 0 || d > 1e6*time.Hour {
		return "?"
	}
	s := int64(d.Round(time.Second) / time.Second)
	if s >= 3600 {
		return fmt.Sprintf("%d:%02d:%02d", s/3600, s/60%60, s%60)
	}
	return fmt.Sprintf("%d:%02d", s/60, s%60)
}
