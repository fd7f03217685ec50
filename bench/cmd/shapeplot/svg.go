package main

import (
	"fmt"
	"io"
	"strings"
)

// Plot geometry, in SVG user units.
const (
	width, height = 900, 420
	left, right   = 80, 20
	top, bottom   = 50, 110
	yMax          = 700_000 // bytes per bin on the top of the plot, above the event labels' rows
)

func px(t float64) float64 { // t in seconds
	return left + t/streamEnd.Seconds()*(width-left-right)
}

func py(b float64) float64 {
	return height - bottom - b/yMax*(height-top-bottom)
}

// writeSVG draws bytes per 100 ms for every run as a step line, with the
// script's events marked.
func writeSVG(w io.Writer, runs []streamRun) {
	var b strings.Builder
	fmt.Fprintf(&b, `<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" viewBox="0 0 %d %d" font-family="sans-serif" font-size="12">`+"\n", width, height, width, height)
	fmt.Fprintf(&b, `<rect width="%d" height="%d" fill="white"/>`+"\n", width, height)
	fmt.Fprintf(&b, `<text x="%d" y="24" font-size="15" font-weight="bold">Bytes per 100 ms of a shaped stream (256 KiB Writes; 1 MB/s, then 2 MB/s; burst 100 ms)</text>`+"\n", left)

	// Grid and axes.
	for y := 0; y <= yMax; y += 50_000 {
		fmt.Fprintf(&b, `<line x1="%.1f" y1="%.1f" x2="%.1f" y2="%.1f" stroke="#e5e5e5"/>`+"\n", px(0), py(float64(y)), px(streamEnd.Seconds()), py(float64(y)))
		fmt.Fprintf(&b, `<text x="%.1f" y="%.1f" text-anchor="end">%d k</text>`+"\n", px(0)-6, py(float64(y))+4, y/1000)
	}
	for s := 0; s <= int(streamEnd.Seconds()); s++ {
		x := px(float64(s))
		fmt.Fprintf(&b, `<line x1="%.1f" y1="%.1f" x2="%.1f" y2="%.1f" stroke="#e5e5e5"/>`+"\n", x, py(0), x, py(yMax))
		fmt.Fprintf(&b, `<text x="%.1f" y="%.1f" text-anchor="middle">%d s</text>`+"\n", x, py(0)+16, s)
	}
	fmt.Fprintf(&b, `<text x="%.1f" y="%.1f" text-anchor="middle">time (fake clock)</text>`+"\n", px(streamEnd.Seconds()/2), py(0)+34)
	fmt.Fprintf(&b, `<text transform="translate(18 %.1f) rotate(-90)" text-anchor="middle">bytes per 100 ms</text>`+"\n", py(yMax/2))

	// Events, from the first run (both runs follow the same script, but the
	// unchunked one reaches each event at a Write boundary of its own). Each
	// label has a row of its own, right of its line, so that labels of
	// events close in time never overlap.
	r0 := runs[0]
	for i, ev := range []struct {
		at   float64
		text string
	}{
		{r0.rateAt.Seconds(), "SetRate(2 MB/s)"},
		{r0.pausedAt.Seconds(), "producer pauses for 1 s"},
		{r0.resumeAt.Seconds(), "resumes: stored bytes go at once"},
	} {
		x := px(ev.at)
		fmt.Fprintf(&b, `<line x1="%.1f" y1="%.1f" x2="%.1f" y2="%.1f" stroke="#888" stroke-dasharray="4 3"/>`+"\n", x, py(0), x, py(yMax))
		fmt.Fprintf(&b, `<text x="%.1f" y="%.1f" fill="#555" text-anchor="start">%s</text>`+"\n", x+4, py(yMax)+14+14*float64(i), ev.text)
	}

	// The series, as steps: each bin is a horizontal segment.
	for _, r := range runs {
		var pts []string
		for i, v := range r.bins {
			x0, x1 := px(float64(i)*bin.Seconds()), px(float64(i+1)*bin.Seconds())
			y := py(float64(min(v, yMax)))
			pts = append(pts, fmt.Sprintf("%.1f,%.1f %.1f,%.1f", x0, y, x1, y))
		}
		fmt.Fprintf(&b, `<polyline fill="none" stroke="%s" stroke-width="2" points="%s"/>`+"\n", r.color, strings.Join(pts, " "))
	}

	// Legend.
	for i, r := range runs {
		y := float64(height - bottom + 58 + 20*i)
		fmt.Fprintf(&b, `<line x1="%d" y1="%.1f" x2="%d" y2="%.1f" stroke="%s" stroke-width="3"/>`+"\n", left, y-4, left+30, y-4, r.color)
		fmt.Fprintf(&b, `<text x="%d" y="%.1f">%s</text>`+"\n", left+38, y, r.name)
	}
	b.WriteString("</svg>\n")
	io.WriteString(w, b.String())
}
