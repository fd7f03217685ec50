package main

import (
	"fmt"
	"io"
	"strings"
)

// Plot geometry, in SVG user units: one panel per algorithm, stacked.
const (
	width        = 900
	left, right  = 150, 20
	top          = 50
	panel, gap   = 70, 14
	yMax         = 20 // requests per bin at the top of a panel
	bottomMargin = 50
)

func px(binIndex float64) float64 {
	return left + binIndex/float64(nBins)*(width-left-right)
}

// writeSVG draws, for each algorithm, the requests admitted per 100 ms as
// bars over the offered requests (grey), with the windows' edges at whole
// seconds marked.
func writeSVG(w io.Writer, offered []int, runs []algRun) {
	height := top + len(runs)*(panel+gap) + bottomMargin
	var b strings.Builder
	fmt.Fprintf(&b, `<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" viewBox="0 0 %d %d" font-family="sans-serif" font-size="12">`+"\n", width, height, width, height)
	fmt.Fprintf(&b, `<rect width="%d" height="%d" fill="white"/>`+"\n", width, height)
	fmt.Fprintf(&b, `<text x="%d" y="24" font-size="15" font-weight="bold">Requests admitted per 100 ms, limit %v, one bursty client (grey: offered)</text>`+"\n", 20, limit)
	for i, r := range runs {
		y0 := float64(top + i*(panel+gap)) // top of the panel
		py := func(v int) float64 { return y0 + panel - float64(min(v, yMax))/yMax*panel }
		// The row's name ends well left of the tick labels (px(0)-4, right-aligned).
		fmt.Fprintf(&b, `<text x="%d" y="%.1f" text-anchor="end" font-weight="bold">%v</text>`+"\n", left-30, y0+panel/2+4, r.alg)
		for _, v := range []int{0, 10, 20} {
			fmt.Fprintf(&b, `<line x1="%.1f" y1="%.1f" x2="%.1f" y2="%.1f" stroke="#e5e5e5"/>`+"\n", px(0), py(v), px(float64(nBins)), py(v))
			fmt.Fprintf(&b, `<text x="%.1f" y="%.1f" text-anchor="end" font-size="10">%d</text>`+"\n", px(0)-4, py(v)+3, v)
		}
		for s := 0; s*10 <= nBins; s++ {
			x := px(float64(s * 10))
			fmt.Fprintf(&b, `<line x1="%.1f" y1="%.1f" x2="%.1f" y2="%.1f" stroke="#bbb" stroke-dasharray="3 3"/>`+"\n", x, y0, x, y0+panel)
		}
		for k := range nBins {
			x0, x1 := px(float64(k))+1, px(float64(k+1))-1
			if offered[k] > 0 {
				fmt.Fprintf(&b, `<rect x="%.1f" y="%.1f" width="%.1f" height="%.1f" fill="#ddd"/>`+"\n", x0, py(offered[k]), x1-x0, y0+panel-py(offered[k]))
			}
			if v := r.bins[k]; v > 0 {
				fmt.Fprintf(&b, `<rect x="%.1f" y="%.1f" width="%.1f" height="%.1f" fill="#1f77b4"/>`+"\n", x0+2, py(v), x1-x0-4, y0+panel-py(v))
				fmt.Fprintf(&b, `<text x="%.1f" y="%.1f" text-anchor="middle" font-size="9">%d</text>`+"\n", (x0+x1)/2, py(v)-2, v)
			}
		}
	}
	yAxis := float64(top + len(runs)*(panel+gap))
	for s := 0; s*10 <= nBins; s++ {
		fmt.Fprintf(&b, `<text x="%.1f" y="%.1f" text-anchor="middle">%d s</text>`+"\n", px(float64(s*10)), yAxis+4, s)
	}
	fmt.Fprintf(&b, `<text x="%.1f" y="%.1f" text-anchor="middle">time (fake clock); dashed: window edges (multiples of the period since the Unix epoch)</text>`+"\n", px(float64(nBins)/2), yAxis+24)
	b.WriteString("</svg>\n")
	io.WriteString(w, b.String())
}
