package main

import (
	"fmt"
	"html"
	"io"
	"math"
	"strconv"
	"strings"
)

// A chart is a line chart with linear axes, written as a standalone SVG
// file. It draws only what the plots of docs/design.md need: lines,
// markers, shaded areas, vertical guides, text notes and a legend.
type chart struct {
	title          string
	xLabel, yLabel string
	xMin, xMax     float64
	yMin, yMax     float64
	xTicks, yTicks []float64
	series         []series
	areas          []area
	guides         []guide
	notes          []note
}

type series struct {
	name    string
	color   string
	dash    string // stroke-dasharray; "" for a solid line
	points  [][2]float64
	markers bool // circles at the points instead of a line
	steps   bool // a step line: each value holds until the next point
}

type area struct {
	color   string
	polygon [][2]float64
}

// guide is a vertical dashed line at x with a label at its top.
type guide struct {
	x     float64
	label string
}

// note is text placed at data coordinates.
type note struct {
	x, y   float64
	text   string
	anchor string // start, middle or end
}

const (
	width                               = 760
	marginLeft, marginRight             = 78, 24
	marginTop, marginBottom             = 48, 62
	plotW                               = width - marginLeft - marginRight
	plotH                               = 360
	fontFamily                          = "DejaVu Sans, Helvetica, Arial, sans-serif"
	axisColor, gridColor, textColor     = "#444", "#e3e3e3", "#222"
	legendRowHeight, legendSwatchLength = 20, 28
	legendPadding                       = 10
)

func (c *chart) px(x float64) float64 {
	return marginLeft + (x-c.xMin)/(c.xMax-c.xMin)*plotW
}

func (c *chart) py(y float64) float64 {
	return marginTop + plotH - (y-c.yMin)/(c.yMax-c.yMin)*plotH
}

func num(v float64) string { return strconv.FormatFloat(v, 'f', 1, 64) }

// tickLabel prints a tick value without needless decimals.
func tickLabel(v float64) string {
	if v == math.Trunc(v) {
		return strconv.FormatFloat(v, 'f', 0, 64)
	}
	return strconv.FormatFloat(v, 'f', -1, 64)
}

// height is the height of the whole picture: the plot, its axis labels and
// the legend below them (below, so that it never hides a line).
func (c *chart) height() int {
	return marginTop + plotH + marginBottom + legendPadding*2 + legendRowHeight*len(c.series) + 8
}

func (c *chart) writeSVG(w io.Writer) error {
	var b strings.Builder
	height := c.height()
	fmt.Fprintf(&b, `<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" viewBox="0 0 %d %d" font-family="%s" font-size="13" fill="%s">`+"\n",
		width, height, width, height, fontFamily, textColor)
	fmt.Fprintf(&b, `<rect width="%d" height="%d" fill="white"/>`+"\n", width, height)
	fmt.Fprintf(&b, `<text x="%d" y="28" font-size="16" font-weight="bold" text-anchor="middle">%s</text>`+"\n",
		width/2, html.EscapeString(c.title))

	// Grid and tick labels.
	for _, x := range c.xTicks {
		X := num(c.px(x))
		fmt.Fprintf(&b, `<line x1="%s" y1="%d" x2="%s" y2="%d" stroke="%s"/>`+"\n", X, marginTop, X, marginTop+plotH, gridColor)
		fmt.Fprintf(&b, `<text x="%s" y="%d" text-anchor="middle">%s</text>`+"\n", X, marginTop+plotH+18, tickLabel(x))
	}
	for _, y := range c.yTicks {
		Y := num(c.py(y))
		fmt.Fprintf(&b, `<line x1="%d" y1="%s" x2="%d" y2="%s" stroke="%s"/>`+"\n", marginLeft, Y, marginLeft+plotW, Y, gridColor)
		fmt.Fprintf(&b, `<text x="%d" y="%s" text-anchor="end" dominant-baseline="middle">%s</text>`+"\n", marginLeft-8, Y, tickLabel(y))
	}

	// Shaded areas go under everything else.
	for _, a := range c.areas {
		fmt.Fprintf(&b, `<polygon points="%s" fill="%s" stroke="none"/>`+"\n", c.points(a.polygon), a.color)
	}

	// Axes.
	fmt.Fprintf(&b, `<rect x="%d" y="%d" width="%d" height="%d" fill="none" stroke="%s"/>`+"\n", marginLeft, marginTop, plotW, plotH, axisColor)
	fmt.Fprintf(&b, `<text x="%d" y="%d" text-anchor="middle">%s</text>`+"\n", marginLeft+plotW/2, marginTop+plotH+42, html.EscapeString(c.xLabel))
	fmt.Fprintf(&b, `<text transform="translate(20 %d) rotate(-90)" text-anchor="middle">%s</text>`+"\n", marginTop+plotH/2, html.EscapeString(c.yLabel))

	for _, g := range c.guides {
		X := num(c.px(g.x))
		fmt.Fprintf(&b, `<line x1="%s" y1="%d" x2="%s" y2="%d" stroke="#888" stroke-dasharray="5 4"/>`+"\n", X, marginTop, X, marginTop+plotH)
		fmt.Fprintf(&b, `<text x="%s" y="%d" text-anchor="middle" fill="#555">%s</text>`+"\n", X, marginTop-6, html.EscapeString(g.label))
	}

	for _, s := range c.series {
		if s.markers {
			for _, p := range s.points {
				fmt.Fprintf(&b, `<circle cx="%s" cy="%s" r="4" fill="white" stroke="%s" stroke-width="2"/>`+"\n", num(c.px(p[0])), num(c.py(p[1])), s.color)
			}
			continue
		}
		pts := s.points
		if s.steps {
			pts = stepPoints(pts)
		}
		dash := ""
		if s.dash != "" {
			dash = fmt.Sprintf(` stroke-dasharray="%s"`, s.dash)
		}
		fmt.Fprintf(&b, `<polyline points="%s" fill="none" stroke="%s" stroke-width="2.2" stroke-linejoin="round"%s/>`+"\n", c.points(pts), s.color, dash)
	}

	for _, n := range c.notes {
		anchor := n.anchor
		if anchor == "" {
			anchor = "start"
		}
		fmt.Fprintf(&b, `<text x="%s" y="%s" text-anchor="%s">%s</text>`+"\n", num(c.px(n.x)), num(c.py(n.y)), anchor, html.EscapeString(n.text))
	}

	c.legend(&b)
	b.WriteString("</svg>\n")
	_, err := io.WriteString(w, b.String())
	return err
}

// legend draws a box under the plot with one row per series.
func (c *chart) legend(b *strings.Builder) {
	longest := 0
	for _, s := range c.series {
		longest = max(longest, len([]rune(s.name)))
	}
	boxW := legendPadding*3 + legendSwatchLength + int(float64(longest)*7.4)
	boxH := legendPadding*2 + legendRowHeight*len(c.series) - 4
	x0, y0 := marginLeft, marginTop+plotH+marginBottom-4
	fmt.Fprintf(b, `<rect x="%d" y="%d" width="%d" height="%d" fill="white" fill-opacity="0.92" stroke="#bbb"/>`+"\n", x0, y0, boxW, boxH)
	for i, s := range c.series {
		y := y0 + legendPadding + legendRowHeight*i + 8
		sx := x0 + legendPadding
		if s.markers {
			fmt.Fprintf(b, `<circle cx="%d" cy="%d" r="4" fill="white" stroke="%s" stroke-width="2"/>`+"\n", sx+legendSwatchLength/2, y, s.color)
		} else {
			dash := ""
			if s.dash != "" {
				dash = fmt.Sprintf(` stroke-dasharray="%s"`, s.dash)
			}
			fmt.Fprintf(b, `<line x1="%d" y1="%d" x2="%d" y2="%d" stroke="%s" stroke-width="2.2"%s/>`+"\n", sx, y, sx+legendSwatchLength, y, s.color, dash)
		}
		fmt.Fprintf(b, `<text x="%d" y="%d" dominant-baseline="middle">%s</text>`+"\n", sx+legendSwatchLength+legendPadding, y, html.EscapeString(s.name))
	}
}

func (c *chart) points(ps [][2]float64) string {
	parts := make([]string, len(ps))
	for i, p := range ps {
		parts[i] = num(c.px(p[0])) + "," + num(c.py(p[1]))
	}
	return strings.Join(parts, " ")
}

// stepPoints turns (x_i, y_i) into a staircase where y_i holds on
// [x_i, x_{i+1}).
func stepPoints(ps [][2]float64) [][2]float64 {
	var out [][2]float64
	for i, p := range ps {
		if i > 0 {
			out = append(out, [2]float64{p[0], ps[i-1][1]})
		}
		out = append(out, p)
	}
	return out
}
