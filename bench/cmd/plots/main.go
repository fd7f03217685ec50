// Command plots draws the figures of docs/design.md from the code itself:
// every number on them comes from the smooth engine or from a real Limiter
// driven by a fake clock, so the pictures cannot drift from the behaviour.
//
// Run it from the root of the module:
//
//	cd bench && go run ./cmd/plots    # writes docs/warmup-curve.svg and docs/cold-start.svg
//	cd bench && go run ./cmd/plots -dir /tmp  # somewhere else
//
// It writes SVG by hand with the standard library. Before drawing the
// warm-up curve it checks the closed form of the curve against the prices
// the engine actually charges, and fails if they disagree.
package main

import (
	"bytes"
	"context"
	"flag"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"time"

	"github.com/smoothrate/ratelimit"
	"github.com/smoothrate/ratelimit/clocktest"
	"github.com/smoothrate/ratelimit/smooth"
)

func main() {
	dir := flag.String("dir", "../docs", "directory to write the SVG files into")
	flag.Parse()
	if err := writeAll(*dir); err != nil {
		fmt.Fprintln(os.Stderr, "plots:", err)
		os.Exit(1)
	}
}

// writeAll renders every plot into dir.
func writeAll(dir string) error {
	plots := []struct {
		file string
		make func() (*chart, error)
	}{
		{"warmup-curve.svg", warmupCurve},
		{"cold-start.svg", coldStart},
	}
	for _, p := range plots {
		c, err := p.make()
		if err != nil {
			return fmt.Errorf("%s: %w", p.file, err)
		}
		var buf bytes.Buffer
		if err := c.writeSVG(&buf); err != nil {
			return err
		}
		path := filepath.Join(dir, p.file)
		if err := os.WriteFile(path, buf.Bytes(), 0o644); err != nil {
			return err
		}
		fmt.Println("wrote", path)
	}
	return nil
}

var palette = []string{"#1f77b4", "#d62728", "#2ca02c"}

// The warm-up curve's limiter: the numbers of the classic walk-through
// (4 permits per second, 2 s warm-up).
const (
	curveQPS    = 4.0
	curveWarmup = 2 * time.Second
)

// throttling is the closed form of the warm-up curve, in seconds per permit
// at s stored permits, from the engine's own parameters.
func throttling(e *smooth.Engine, s float64) float64 {
	return (e.StableInterval() + math.Max(0, s-e.ThresholdPermits())*e.Slope()) / e.TicksPerSecond()
}

// throttlingArea is the integral of throttling over [a, b]: what taking the
// permits between a and b should cost, in seconds.
func throttlingArea(e *smooth.Engine, a, b float64) float64 {
	above := func(s float64) float64 { return math.Max(0, s-e.ThresholdPermits()) }
	ticks := e.StableInterval()*(b-a) + e.Slope()*(above(b)*above(b)-above(a)*above(a))/2
	return ticks / e.TicksPerSecond()
}

// warmupCurve plots the throttling interval against the stored permits for
// two cold factors: the closed form as a line, and the price the engine
// really charges for each whole permit taken from a full (cold) store, as
// markers at the middle of each permit.
func warmupCurve() (*chart, error) {
	c := &chart{
		title:  "Warm-up curve: the price of a stored permit (4 permits/s, 2 s warm-up)",
		xLabel: "stored permits",
		yLabel: "throttling interval: seconds per permit",
		xMin:   0, xMax: 8.6,
		yMin: 0, yMax: 2.75,
		xTicks: []float64{0, 1, 2, 3, 4, 5, 6, 7, 8},
		yTicks: []float64{0, 0.25, 0.5, 0.75, 1, 1.25, 1.5, 1.75, 2, 2.25, 2.5},
	}
	for i, cold := range []float64{3, 10} {
		e := smooth.NewWarmingUp(smooth.Nanosecond, int64(curveWarmup), cold, curveQPS, 0)
		th, mx := e.ThresholdPermits(), e.MaxPermits()
		color := palette[i]
		c.series = append(c.series, series{
			name:   fmt.Sprintf("cold factor %g: stable %gs up to the threshold, then up to %gs at max = %.2f", cold, throttling(&e, 0), throttling(&e, mx), mx),
			color:  color,
			points: [][2]float64{{0, throttling(&e, 0)}, {th, throttling(&e, th)}, {mx, throttling(&e, mx)}},
		})
		if i == 0 {
			// Shade the two areas that define the shape.
			c.areas = append(c.areas,
				area{color: "#dbe9f6", polygon: [][2]float64{{th, 0}, {th, throttling(&e, th)}, {mx, throttling(&e, mx)}, {mx, 0}}},
				area{color: "#eef4ea", polygon: [][2]float64{{0, 0}, {0, throttling(&e, 0)}, {th, throttling(&e, th)}, {th, 0}}},
			)
			c.notes = append(c.notes,
				note{x: (th + mx) / 2, y: 0.12, text: fmt.Sprintf("trapezoid: area %gs = warm-up period", throttlingArea(&e, th, mx)), anchor: "middle"},
				note{x: th / 2, y: 0.12, text: fmt.Sprintf("rectangle: area %gs = half of it", throttlingArea(&e, 0, th)), anchor: "middle"},
			)
			c.guides = append(c.guides, guide{x: th, label: fmt.Sprintf("threshold %g", th)}, guide{x: mx, label: fmt.Sprintf("max %g (c=3)", mx)})
		} else {
			c.guides = append(c.guides, guide{x: mx, label: fmt.Sprintf("max %.2f (c=%g)", mx, cold)})
		}

		// What the engine charges: start cold (full) and reserve one
		// permit at a time at the same instant, so that nothing is
		// refilled in between; each reservation moves nextFreeTicket
		// by exactly its price.
		var measured [][2]float64
		for e.StoredPermits() >= 1 {
			stored := e.StoredPermits()
			before := e.NextFreeTicket()
			e.Reserve(1, 0)
			price := float64(e.NextFreeTicket()-before) / e.TicksPerSecond()
			want := throttlingArea(&e, stored-1, stored)
			// Each price is truncated to whole ticks up to twice
			// (the sloped part and the flat part).
			if d := math.Abs(price - want); d > 2/e.TicksPerSecond() {
				return nil, fmt.Errorf("cold factor %g: the engine charges %v s for the permit between %v and %v, the curve says %v s", cold, price, stored-1, stored, want)
			}
			measured = append(measured, [2]float64{stored - 0.5, price})
		}
		c.series = append(c.series, series{
			name:    fmt.Sprintf("cold factor %g: price of each whole permit charged by the engine (Reserve)", cold),
			color:   color,
			points:  measured,
			markers: true,
		})
	}
	return c, nil
}

// The cold-start plot's limiters: a rate high enough that 100 ms bins hold
// enough permits (100 at the stable rate) for the counts to read as a curve.
const (
	startQPS     = 1000.0
	startWarmup  = 2 * time.Second
	startHorizon = 3500 * time.Millisecond
	startBin     = 100 * time.Millisecond
)

// coldStart plots the permits granted per 100 ms by limiters under
// saturated demand (one goroutine calling Acquire(1) in a loop) from the
// moment they are made, on a fake clock.
func coldStart() (*chart, error) {
	c := &chart{
		title:  "Cold start under saturated demand (1000 permits/s, 2 s warm-up)",
		xLabel: "time since the limiter was made (s)",
		yLabel: "permits granted per 100 ms",
		xMin:   0, xMax: startHorizon.Seconds(),
		yMin: 0, yMax: 120,
		xTicks: []float64{0, 0.5, 1, 1.5, 2, 2.5, 3, 3.5},
		yTicks: []float64{0, 10, 20, 30, 40, 50, 60, 70, 80, 90, 100, 110},
	}
	limiters := []struct {
		name string
		make func(clk ratelimit.Clock) (*ratelimit.Limiter, error)
	}{
		{"NewWarmingUp, cold factor 3 (default)", func(clk ratelimit.Clock) (*ratelimit.Limiter, error) {
			return ratelimit.NewWarmingUp(startQPS, startWarmup, ratelimit.WithClock(clk))
		}},
		{"NewWarmingUp, cold factor 10", func(clk ratelimit.Clock) (*ratelimit.Limiter, error) {
			return ratelimit.NewWarmingUp(startQPS, startWarmup, ratelimit.WithClock(clk), ratelimit.WithColdFactor(10))
		}},
		{"NewBursty (starts empty): the stable rate from the start", func(clk ratelimit.Clock) (*ratelimit.Limiter, error) {
			return ratelimit.NewBursty(startQPS, ratelimit.WithClock(clk))
		}},
	}
	for i, l := range limiters {
		clk := clocktest.NewFake()
		lim, err := l.make(clk)
		if err != nil {
			return nil, err
		}
		bins := make([]float64, int(startHorizon/startBin))
		for {
			if _, err := lim.Acquire(context.Background(), 1); err != nil {
				return nil, err
			}
			// The permit may be used when Acquire returns: the fake
			// clock has moved by the wait.
			at := clk.Elapsed()
			if at >= startHorizon {
				break
			}
			bins[at/startBin]++
		}
		var pts [][2]float64
		for b, n := range bins {
			pts = append(pts, [2]float64{(time.Duration(b) * startBin).Seconds(), n})
		}
		pts = append(pts, [2]float64{startHorizon.Seconds(), bins[len(bins)-1]})
		s := series{name: l.name, color: palette[i], points: pts, steps: true}
		if i == 2 {
			s.dash = "6 4"
		}
		c.series = append(c.series, s)
	}
	c.guides = append(c.guides, guide{x: startWarmup.Seconds(), label: "warm-up period"})
	return c, nil
}
