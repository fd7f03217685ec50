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

// progress turns byte counts into a progress line: the bytes copied, the
// rate now (over the last second), the average since the start and, when
// the size is known, the time left at the recent rate (over the last 30
// seconds, pv's default --average-rate-window).
type progress struct {
	size  int64
	now   rateMeter
	eta   rateMeter
	width int // of the last line drawn, to blank what is left of it
}

// The windows of the two rates. The time left comes from the longer one,
// as pv's does: a rate over one second is jumpy, the average since the
// start never forgets a fast beginning, and an ETA from either can be off
// by hours on a long transfer.
const (
	nowWindow = time.Second
	etaWindow = 30 * time.Second
)

func newProgress(size int64) *progress {
	return &progress{size: size, now: newRateMeter(nowWindow), eta: newRateMeter(etaWindow)}
}

// line returns the progress line at elapsed with n bytes copied, starting
// with a carriage return so that it overwrites the previous one.
func (p *progress) line(elapsed time.Duration, n int64) string {
	current, _ := p.now.rate(elapsed, n)
	recent, pending := p.eta.rate(elapsed, n)
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
		if recent > 0 && p.eta.growths >= 2 {
			left := time.Duration(float64(p.size-n) / recent * float64(time.Second))
			b.WriteString(formatClock(max(left-pending, 0)))
		} else {
			b.WriteString("?")
		}
	}
	s := b.String()
	pad := max(p.width-len(s), 0)
	p.width = len(s)
	return "\r" + s + strings.Repeat(" ", pad)
}

// rateMeter measures a transfer's rate over a window of recent time from
// its byte count, read at known moments (the progress line's).
//
// The count grows in bursts: a shaped stream writes one chunk at a time,
// and a slow one (10 B/s, whose smallest default chunk is 1 KiB) writes one
// every 102 s. Counting only what arrived within the window sees 1 KiB in
// the last second or nothing, 1 KiB in the last 30 s or nothing: an ETA of
// 47 min or 24 h for 3 MB at 10 B/s (83 h). So each growth of the count is
// spread over the time since the one before (the chunk paid for that
// wait), and the silence since the last growth counts only once it lasts
// longer than that last gap: a stream between two chunks keeps its rate, a
// stream that stalled drops to 0 a window later.
type rateMeter struct {
	window time.Duration
	// marks are the moments the count grew, oldest first, from the
	// transfer's start {0, 0}; the oldest one is kept only as the start
	// of the next one's gap.
	marks []sample
	// growths counts the marks after the start, up to 2. The first growth
	// alone says little: a limiter lets its first chunk go at once (the
	// next one pays), so 1 KiB in the first 250 ms of a 10 B/s stream reads
	// 4 kB/s; the time left needs a second one.
	growths int
}

type sample struct {
	at time.Duration
	n  int64
}

func newRateMeter(window time.Duration) rateMeter {
	return rateMeter{window: window, marks: []sample{{0, 0}}}
}

// rate records the count n at elapsed (not before the last reading) and
// returns the rate over the window, in bytes per second, and the time since
// the last growth that it takes as paying for the next one: between two
// chunks, the time left counts down by it.
func (m *rateMeter) rate(elapsed time.Duration, n int64) (bytesPerSecond float64, pending time.Duration) {
	last := m.marks[len(m.marks)-1]
	switch {
	case n > last.n && elapsed > last.at:
		m.marks = append(m.marks, sample{elapsed, n})
		m.growths = min(m.growths+1, 2)
	case n > last.n && len(m.marks) > 1:
		m.marks[len(m.marks)-1].n = n // a second reading at the same moment
	}
	last = m.marks[len(m.marks)-1]
	gap := time.Duration(0)
	if len(m.marks) > 1 {
		gap = last.at - m.marks[len(m.marks)-2].at
	}
	end := elapsed - min(max(elapsed-last.at, 0), gap)
	start := max(end-m.window, 0)
	// Marks whose gap ended before the window starts count no more; keep
	// the last two, whose gap is the one silence is measured against.
	for len(m.marks) > 2 && m.marks[1].at <= start {
		m.marks = m.marks[1:]
	}
	if end <= start {
		return 0, 0
	}
	var bytes float64
	for i := 1; i < len(m.marks); i++ {
		a, b := m.marks[i-1], m.marks[i]
		if lo, hi := max(a.at, start), min(b.at, end); hi > lo {
			bytes += float64(b.n-a.n) * float64(hi-lo) / float64(b.at-a.at)
		}
	}
	return bytes / (end - start).Seconds(), elapsed - end
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
