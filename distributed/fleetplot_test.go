package distributed

import (
	"context"
	"flag"
	"fmt"
	"html"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/smoothrate/ratelimit/clocktest"
	"github.com/smoothrate/ratelimit/internal/redistest"
)

// writeFleetPlot makes TestFleetPlot write docs/distributed-fleet.svg:
//
//	go test ./distributed -run TestFleetPlot -plot
//
// Without it the test runs the same scenario and checks it, but writes
// nothing, so that an ordinary test run never rewrites the docs.
var writeFleetPlot = flag.Bool("plot", false, "TestFleetPlot writes ../docs/distributed-fleet.svg")

// fleetPhase is a demand that starts at from and holds until the next phase.
type fleetPhase struct {
	from      time.Duration
	perSecond float64
}

// fleetProc is one process of the plotted fleet: its own Redis connection,
// its own Limiter and process id, and a demand that changes over time.
type fleetProc struct {
	id     string
	label  string
	color  string
	demand []fleetPhase
}

func (p fleetProc) demandAt(t time.Duration) float64 {
	d := 0.0
	for _, ph := range p.demand {
		if t >= ph.from {
			d = ph.perSecond
		}
	}
	return d
}

// The scenario of the plot: four processes share 200 permits/s. A, B and D
// start at once (together they ask for 300/s); C is idle for the first
// third and then asks for 150/s; B drops to 20/s half-way; Redis is killed
// with SIGKILL and restarted empty on the same port two seconds later.
const (
	fleetRate     = 200.0
	fleetStep     = time.Millisecond
	fleetBucket   = 250 * time.Millisecond
	fleetDuration = 18 * time.Second
	fleetCJoins   = 5 * time.Second
	fleetBDrops   = 8 * time.Second
	fleetKill     = 12 * time.Second
	fleetRestart  = 14 * time.Second
)

var fleetProcs = []fleetProc{
	{id: "a", label: "A: 120/s throughout", color: "#1f77b4", demand: []fleetPhase{{0, 120}}},
	{id: "b", label: "B: 120/s, 20/s from 8 s", color: "#d62728", demand: []fleetPhase{{0, 120}, {fleetBDrops, 20}}},
	{id: "c", label: "C: idle, 150/s from 5 s", color: "#2ca02c", demand: []fleetPhase{{fleetCJoins, 150}}},
	{id: "d", label: "D: 60/s throughout", color: "#9467bd", demand: []fleetPhase{{0, 60}}},
}

// fleetRun is what the scenario produced.
type fleetRun struct {
	// counts[i][b] is what process i admitted in bucket b (fleetBucket
	// wide); cum[k] is what the fleet admitted up to and including the
	// calls of step k, made at k·fleetStep.
	counts [][]int64
	cum    []int64
	// fellBack[i] is when process i went into fallback (its first failed
	// call after the kill), resumed[i] when it leased again after the
	// restart; -1 if it never did.
	fellBack, resumed []time.Duration
	// heldAtKill is what the fleet held locally when Redis died.
	heldAtKill   int64
	largestLease int64
	stats        []Stats
}

// runFleet drives the scenario in simulated time: one shared fake clock,
// the script running at that time (the Redis clock), each process calling
// TryAcquire(1, 0) at its current demand every millisecond, and redis-server
// killed and restarted at fixed simulated moments. The probe jitter is
// seeded, so the run is the same every time.
func runFleet(t *testing.T) fleetRun {
	t.Helper()
	srv := redistest.Start(t)
	base := clocktest.NewFake()
	n := len(fleetProcs)
	lims := make([]*Limiter, n)
	for i, p := range fleetProcs {
		// A 1 s call timeout: a slow round trip on a busy machine must
		// not look like an outage; the killed server refuses
		// connections at once anyway.
		l, err := New(newClient(t, srv), "fleetplot", fleetRate,
			withSim(base), WithLocalClock(base), WithProcessID(p.id), WithCallTimeout(time.Second))
		if err != nil {
			t.Fatal(err)
		}
		// New seeds the probe jitter from the wall clock; a fixed seed
		// makes the moments the processes find Redis again, and so the
		// picture, the same on every run.
		l.rng = rand.New(rand.NewPCG(uint64(i)+1, 0x5eed))
		lims[i] = l
	}
	steps := int(fleetDuration / fleetStep)
	perBucket := int(fleetBucket / fleetStep)
	run := fleetRun{
		counts:   make([][]int64, n),
		fellBack: make([]time.Duration, n),
		resumed:  make([]time.Duration, n),
	}
	for i := range run.counts {
		run.counts[i] = make([]int64, steps/perBucket)
		run.fellBack[i], run.resumed[i] = -1, -1
	}
	acc := make([]float64, n)
	var total int64
	for k := 0; k < steps; k++ {
		now := time.Duration(k) * fleetStep
		switch now {
		case fleetKill:
			for _, l := range lims {
				run.heldAtKill += l.Stats().Held
			}
			srv.Kill()
		case fleetRestart:
			srv.Restart()
		}
		for i, l := range lims {
			acc[i] += fleetProcs[i].demandAt(now) * fleetStep.Seconds()
			for ; acc[i] >= 1; acc[i]-- {
				if l.TryAcquire(1, 0) {
					run.counts[i][k/perBucket]++
					total++
				}
			}
			if now >= fleetKill {
				in := l.Stats().InFallback
				if in && run.fellBack[i] < 0 {
					run.fellBack[i] = now
				}
				if !in && run.fellBack[i] >= 0 && run.resumed[i] < 0 {
					run.resumed[i] = now
				}
			}
		}
		run.cum = append(run.cum, total)
		base.Jump(fleetStep)
	}
	for _, l := range lims {
		st := l.Stats()
		run.stats = append(run.stats, st)
		run.largestLease = max(run.largestLease, st.LargestLease)
		if err := l.Close(context.Background()); err != nil {
			t.Fatal(err)
		}
	}
	return run
}

// rate returns process i's admitted permits per second over [from, to),
// both multiples of fleetBucket.
func (r fleetRun) rate(i int, from, to time.Duration) float64 {
	var s int64
	for b := int(from / fleetBucket); b < int(to/fleetBucket); b++ {
		s += r.counts[i][b]
	}
	return float64(s) / (to - from).Seconds()
}

// admitted returns the fleet's admissions at times in [from, to),
// multiples of fleetStep.
func (r fleetRun) admitted(from, to time.Duration) int64 {
	at := func(d time.Duration) int64 {
		k := int(d/fleetStep) - 1
		if k < 0 {
			return 0
		}
		return r.cum[k]
	}
	return at(to) - at(from)
}

// TestFleetPlot runs the fleet of docs/distributed-fleet.svg against a real
// redis-server and checks what the plot shows: the bound and the use of
// the rate while Redis is healthy, max-min fair shares after each change of
// demand, R/N_last per process once Redis is gone, and every process back
// to leasing after the restart. With -plot it also writes the SVG.
func TestFleetPlot(t *testing.T) {
	t.Parallel()
	r := runFleet(t)
	n := len(fleetProcs)
	for i, p := range fleetProcs {
		st := r.stats[i]
		t.Logf("%s: leases %d (largest %d), empty %d, refunds %d, lapsed %d, calls %d, errors %d, fallback %v admitted %d; fell back at %v, leasing again at %v",
			p.id, st.Leases, st.LargestLease, st.EmptyReplies, st.PermitsRefunded, st.PermitsLapsed, st.RedisCalls, st.RedisErrors,
			st.FallbackTime, st.FallbackAdmitted, r.fellBack[i], r.resumed[i])
	}
	phases := []struct {
		name     string
		from, to time.Duration
	}{
		{"A, B, D", 2 * time.Second, fleetCJoins},
		{"C joined", fleetCJoins + 1500*time.Millisecond, fleetBDrops},
		{"B dropped", fleetBDrops + 1500*time.Millisecond, fleetKill},
		{"Redis down", fleetKill + time.Second, fleetRestart},
		{"Redis back", fleetRestart + 1500*time.Millisecond, fleetDuration},
	}
	for _, ph := range phases {
		var rates []float64
		sum := 0.0
		for i := range fleetProcs {
			rates = append(rates, math.Round(r.rate(i, ph.from, ph.to)*10)/10)
			sum += rates[i]
		}
		t.Logf("%-10s [%v, %v): per-process permits/s %v, fleet %.1f", ph.name, ph.from, ph.to, rates, sum)
		// Healthy and asking for more than R, the fleet uses R in every
		// phase, including the one after B's drop: B reports its demand
		// to the registry fast enough that the others get its freed
		// share within 1.5 s (189.2/s there when it reported its 1 s
		// average).
		asked := 0.0
		for _, p := range fleetProcs {
			asked += p.demandAt(ph.from)
		}
		if ph.name != "Redis down" && asked >= fleetRate && sum < 0.97*fleetRate {
			t.Errorf("%s: the fleet admitted %.1f/s, want about R = %v/s", ph.name, sum, fleetRate)
		}
	}

	// Healthy, from the start: admitted(0, T] ≤ R·T + B + largest lease
	// for every T before the kill (B = R × 1 s).
	bound := fleetRate + float64(r.largestLease)
	worst := math.Inf(-1)
	for k := 0; k < int(fleetKill/fleetStep); k++ {
		// Step k's calls run at k·fleetStep.
		T := time.Duration(k) * fleetStep
		worst = max(worst, float64(r.cum[k])-fleetRate*T.Seconds())
	}
	t.Logf("before the kill: worst admitted(0,T] − R·T = %.1f (bound B + largest lease = %.0f)", worst, bound)
	if worst > bound {
		t.Errorf("admitted(0,T] exceeded R·T + B + largest lease by %.1f", worst-bound)
	}
	// The rate is used while the fleet asks for more than R.
	for _, ph := range []struct{ from, to time.Duration }{{2 * time.Second, fleetKill}, {fleetRestart + 1500*time.Millisecond, fleetDuration}} {
		u := float64(r.admitted(ph.from, ph.to)) / (fleetRate * (ph.to - ph.from).Seconds())
		t.Logf("utilization [%v, %v): %.3f", ph.from, ph.to, u)
		if u < 0.95 || u > 1.05 {
			t.Errorf("utilization %.3f over [%v, %v), want about 1", u, ph.from, ph.to)
		}
	}
	// Max-min fair shares once demand estimates have settled (each
	// phase's window starts 1.5 s or more after the change; a process's
	// report follows a rise through its 1 s average and a fall within
	// 0.5 s).
	for _, ph := range phases {
		if ph.name == "Redis down" {
			continue
		}
		var demands []float64
		for _, p := range fleetProcs {
			demands = append(demands, p.demandAt(ph.from))
		}
		want := maxMinShares(demands, fleetRate)
		for i := range fleetProcs {
			if got := r.rate(i, ph.from, ph.to); math.Abs(got-want[i]) > 0.1*fleetRate/float64(n) {
				t.Errorf("%s: process %s got %.1f/s, want its max-min share %.1f/s", ph.name, fleetProcs[i].id, got, want[i])
			}
		}
	}
	// Redis down: every process falls back to a local smooth limiter at
	// R / N_last = 50/s once its leases are spent, and admits
	// min(demand, 50)/s whatever its polling period. (A fallback without
	// burst gave a caller polling every s seconds one permit per
	// ⌈(1/50)/s⌉·s: A 40/s, D 30/s.)
	share := fleetRate / float64(n)
	for i, p := range fleetProcs {
		if r.fellBack[i] < fleetKill || r.fellBack[i] > fleetKill+time.Second {
			t.Errorf("process %s fell back at %v, Redis died at %v", p.id, r.fellBack[i], fleetKill)
		}
		d := p.demandAt(fleetKill)
		want := min(d, share)
		// Measured from 1 s after the kill: leases are valid for 1 s.
		got := r.rate(i, fleetKill+time.Second, fleetRestart)
		t.Logf("Redis down: %s admitted %.1f/s (demand %v/s, fallback share %v/s, want %.1f/s)", p.id, got, d, share, want)
		if math.Abs(got-want) > 1 {
			t.Errorf("Redis down: process %s admitted %.1f/s, want min(demand, share) = %.1f/s", p.id, got, want)
		}
	}
	out := r.admitted(fleetKill, fleetRestart)
	if lim := int64(fleetRate*(fleetRestart-fleetKill).Seconds()) + r.heldAtKill + int64(n); out > lim {
		t.Errorf("the outage admitted %d permits, more than R·T + held (%d) + %d", out, r.heldAtKill, n)
	}
	// Redis back, until the last process has found it: the registry
	// starts empty, so those already leasing share the whole R while the
	// others still run at R/4 each (the partition case, R·(1 + k/N)).
	last := fleetRestart
	for _, d := range r.resumed {
		last = max(last, d)
	}
	w := (last - fleetRestart).Seconds()
	rec := float64(r.admitted(fleetRestart, last))
	recBound := fleetRate*w + share*w*float64(n-1) + float64(int64(n)*r.largestLease)
	t.Logf("recovery [%v, %v): fleet admitted %.0f permits, %.1f/s (R·W = %.0f, bound R·W·(1 + (N−1)/N) + N leases = %.0f)",
		fleetRestart, last, rec, rec/w, fleetRate*w, recBound)
	if rec > recBound {
		t.Errorf("recovery admitted %.0f permits, more than %.0f", rec, recBound)
	}
	// Then the bound holds again, counted from there: the new state
	// started empty, and each process holds at most about two leases.
	worst = math.Inf(-1)
	for T := last + fleetStep; T <= fleetDuration; T += fleetStep {
		worst = max(worst, float64(r.admitted(last, T))-fleetRate*(T-last).Seconds())
	}
	after := fleetRate + float64(2*int64(n)*r.largestLease)
	t.Logf("after recovery: worst admitted(%v, T] − R·(T − %v) = %.1f (bound B + 2N leases = %.0f)", last, last, worst, after)
	if worst > after {
		t.Errorf("after recovery the fleet exceeded R·T + B + 2N leases by %.1f", worst-after)
	}
	// Redis back: every process leases again within the probe pause
	// (at most 1.5 s), and admits something afterwards.
	for i, p := range fleetProcs {
		if r.resumed[i] < fleetRestart || r.resumed[i] > fleetRestart+1500*time.Millisecond {
			t.Errorf("process %s resumed leasing at %v, Redis restarted at %v", p.id, r.resumed[i], fleetRestart)
		}
		if got := r.rate(i, fleetRestart+1500*time.Millisecond, fleetDuration); got < 10 {
			t.Errorf("process %s admitted %.1f/s after the restart", p.id, got)
		}
	}
	if !*writeFleetPlot {
		return
	}
	path := filepath.Join("..", "docs", "distributed-fleet.svg")
	if err := os.WriteFile(path, []byte(fleetChart(r).svg()), 0o644); err != nil {
		t.Fatal(err)
	}
	t.Logf("wrote %s", path)
}

// maxMinShares is water filling: every demand below the level is met, the
// rest share what is left equally.
func maxMinShares(demands []float64, rate float64) []float64 {
	out := make([]float64, len(demands))
	left, open := rate, 0
	for _, d := range demands {
		if d > 0 {
			open++
		}
	}
	for open > 0 {
		level := left / float64(open)
		done := true
		for i, d := range demands {
			if d > 0 && out[i] == 0 && d <= level {
				out[i], left, open, done = d, left-d, open-1, false
			}
		}
		if done {
			for i, d := range demands {
				if d > 0 && out[i] == 0 {
					out[i] = level
				}
			}
			break
		}
	}
	return out
}

// fleetChart turns a run into the plot: one line per process and the
// fleet total, in permits/s per bucket, with R, the outage and the demand
// changes marked.
func fleetChart(r fleetRun) *plotChart {
	c := &plotChart{
		title:  fmt.Sprintf("Four processes sharing %.0f permits/s through one Redis (simulated time, real redis-server)", fleetRate),
		xLabel: fmt.Sprintf("time (s); permits admitted in each %v, shown as permits/s", fleetBucket),
		yLabel: "admitted permits/s",
		xMax:   fleetDuration.Seconds(),
	}
	totals := make([]float64, len(r.counts[0]))
	for i, p := range fleetProcs {
		s := plotSeries{name: p.label, color: p.color, width: 1.8}
		for b, v := range r.counts[i] {
			rate := float64(v) / fleetBucket.Seconds()
			totals[b] += rate
			s.points = append(s.points, [2]float64{(time.Duration(b) * fleetBucket).Seconds(), rate})
		}
		c.series = append(c.series, s.steps())
	}
	tot := plotSeries{name: "fleet total", color: "#222", width: 2.4}
	for b, v := range totals {
		tot.points = append(tot.points, [2]float64{(time.Duration(b) * fleetBucket).Seconds(), v})
		// Room above the highest bucket for the band labels.
		c.yMax = max(c.yMax, 50*math.Ceil(v/50)+50)
	}
	c.series = append(c.series, tot.steps(),
		plotSeries{name: fmt.Sprintf("R = %.0f/s", fleetRate), color: "#888", dash: "7 5", width: 1.6,
			points: [][2]float64{{0, fleetRate}, {c.xMax, fleetRate}}})
	for x := 0.0; x <= c.xMax; x++ {
		c.xTicks = append(c.xTicks, x)
	}
	for y := 0.0; y <= c.yMax; y += 50 {
		c.yTicks = append(c.yTicks, y)
	}
	last := fleetRestart
	for _, d := range r.resumed {
		last = max(last, d)
	}
	c.bands = []plotBand{
		{fleetKill.Seconds(), fleetRestart.Seconds(), "#f4c7c3", "Redis down", "fallback:\nR/4 each"},
		{fleetRestart.Seconds(), last.Seconds(), "#fbe7c6", "restarted", ""},
	}
	c.guides = []plotGuide{
		{fleetCJoins.Seconds(), "C joins (150/s)"},
		{fleetBDrops.Seconds(), "B drops to 20/s"},
	}
	return c
}

// A small hand-written SVG line chart in the style of bench/cmd/plots (which is
// a main package and cannot be imported): linear axes, lines, shaded bands
// with a label, dashed vertical guides and a legend under the plot.
type plotChart struct {
	title, xLabel, yLabel string
	xMax, yMax            float64 // both axes start at 0
	xTicks, yTicks        []float64
	series                []plotSeries
	bands                 []plotBand
	guides                []plotGuide
}

type plotSeries struct {
	name, color, dash string
	width             float64
	points            [][2]float64
}

// steps returns s drawn as a staircase: each value holds until the next
// point, and the last one for one more interval (the points are buckets).
func (s plotSeries) steps() plotSeries {
	ps := s.points
	var out [][2]float64
	for i, p := range ps {
		if i > 0 {
			out = append(out, [2]float64{p[0], ps[i-1][1]})
		}
		out = append(out, p)
	}
	if n := len(ps); n > 1 {
		out = append(out, [2]float64{2*ps[n-1][0] - ps[n-2][0], ps[n-1][1]})
	}
	s.points = out
	return s
}

// plotBand shades [from, to] on the x axis over the whole plot height,
// with a label above the plot and a note (lines split at \n) inside it.
type plotBand struct {
	from, to           float64
	color, label, note string
}

// plotGuide is a dashed vertical line with a label above the plot.
type plotGuide struct {
	x     float64
	label string
}

const (
	plotWidth, plotMarginL, plotMarginR = 900, 70, 20
	plotMarginT, plotMarginB, plotH     = 56, 56, 380
	plotInnerW                          = plotWidth - plotMarginL - plotMarginR
	plotFont                            = "DejaVu Sans, Helvetica, Arial, sans-serif"
	plotLegendRow, plotLegendCols       = 20, 2
)

func (c *plotChart) px(x float64) string {
	return strconv.FormatFloat(plotMarginL+x/c.xMax*plotInnerW, 'f', 1, 64)
}

func (c *plotChart) py(y float64) string {
	y = min(max(y, 0), c.yMax) // clip to the plot
	return strconv.FormatFloat(plotMarginT+plotH-y/c.yMax*plotH, 'f', 1, 64)
}

func (c *plotChart) svg() string {
	rows := (len(c.series) + plotLegendCols - 1) / plotLegendCols
	height := plotMarginT + plotH + plotMarginB + rows*plotLegendRow + 16
	var b strings.Builder
	fmt.Fprintf(&b, `<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" viewBox="0 0 %d %d" font-family="%s" font-size="13" fill="#222">`+"\n",
		plotWidth, height, plotWidth, height, plotFont)
	fmt.Fprintf(&b, `<rect width="%d" height="%d" fill="white"/>`+"\n", plotWidth, height)
	fmt.Fprintf(&b, `<text x="%d" y="24" font-size="15" font-weight="bold" text-anchor="middle">%s</text>`+"\n", plotWidth/2, html.EscapeString(c.title))
	top, bottom := strconv.Itoa(plotMarginT), strconv.Itoa(plotMarginT+plotH)
	for _, band := range c.bands {
		x0 := c.px(band.from)
		fmt.Fprintf(&b, `<rect x="%s" y="%s" width="%.1f" height="%d" fill="%s"/>`+"\n", x0, top, (band.to-band.from)/c.xMax*plotInnerW, plotH, band.color)
		mid := plotMarginL + (band.from+band.to)/2/c.xMax*plotInnerW
		// A label wider than its band (about 7.5 units a character at
		// font-size 13) starts at the band's left edge instead, so that it
		// does not run into the label of the band before it.
		lx, anchor := mid, "middle"
		if w := (band.to - band.from) / c.xMax * plotInnerW; 7.5*float64(len(band.label)) > w {
			lx, anchor = plotMarginL+band.from/c.xMax*plotInnerW+3, "start"
		}
		fmt.Fprintf(&b, `<text x="%.1f" y="%d" text-anchor="%s" fill="#733">%s</text>`+"\n", lx, plotMarginT-8, anchor, html.EscapeString(band.label))
		for j, line := range strings.Split(band.note, "\n") {
			fmt.Fprintf(&b, `<text x="%.1f" y="%d" font-size="12" text-anchor="middle" fill="#733">%s</text>`+"\n", mid, plotMarginT+18+15*j, html.EscapeString(line))
		}
	}
	for _, x := range c.xTicks {
		X := c.px(x)
		fmt.Fprintf(&b, `<line x1="%s" y1="%s" x2="%s" y2="%s" stroke="#e3e3e3"/>`+"\n", X, top, X, bottom)
		fmt.Fprintf(&b, `<text x="%s" y="%d" text-anchor="middle">%s</text>`+"\n", X, plotMarginT+plotH+18, strconv.FormatFloat(x, 'f', -1, 64))
	}
	for _, y := range c.yTicks {
		Y := c.py(y)
		fmt.Fprintf(&b, `<line x1="%d" y1="%s" x2="%d" y2="%s" stroke="#e3e3e3"/>`+"\n", plotMarginL, Y, plotMarginL+plotInnerW, Y)
		fmt.Fprintf(&b, `<text x="%d" y="%s" text-anchor="end" dominant-baseline="middle">%s</text>`+"\n", plotMarginL-8, Y, strconv.FormatFloat(y, 'f', -1, 64))
	}
	fmt.Fprintf(&b, `<rect x="%d" y="%d" width="%d" height="%d" fill="none" stroke="#444"/>`+"\n", plotMarginL, plotMarginT, plotInnerW, plotH)
	fmt.Fprintf(&b, `<text x="%d" y="%d" text-anchor="middle">%s</text>`+"\n", plotMarginL+plotInnerW/2, plotMarginT+plotH+40, html.EscapeString(c.xLabel))
	fmt.Fprintf(&b, `<text transform="translate(18 %d) rotate(-90)" text-anchor="middle">%s</text>`+"\n", plotMarginT+plotH/2, html.EscapeString(c.yLabel))
	for _, g := range c.guides {
		X := c.px(g.x)
		fmt.Fprintf(&b, `<line x1="%s" y1="%s" x2="%s" y2="%s" stroke="#666" stroke-dasharray="5 4"/>`+"\n", X, top, X, bottom)
		fmt.Fprintf(&b, `<text x="%s" y="%d" text-anchor="middle" fill="#444">%s</text>`+"\n", X, plotMarginT-8, html.EscapeString(g.label))
	}
	for _, s := range c.series {
		pts := make([]string, len(s.points))
		for i, p := range s.points {
			pts[i] = c.px(p[0]) + "," + c.py(p[1])
		}
		dash := ""
		if s.dash != "" {
			dash = ` stroke-dasharray="` + s.dash + `"`
		}
		fmt.Fprintf(&b, `<polyline points="%s" fill="none" stroke="%s" stroke-width="%.1f" stroke-linejoin="round"%s/>`+"\n",
			strings.Join(pts, " "), s.color, s.width, dash)
	}
	// The legend, under the x-axis label, in columns.
	y0 := plotMarginT + plotH + plotMarginB
	colW := plotInnerW / plotLegendCols
	for i, s := range c.series {
		x := plotMarginL + (i/rows)*colW
		y := y0 + (i%rows)*plotLegendRow + 8
		dash := ""
		if s.dash != "" {
			dash = ` stroke-dasharray="` + s.dash + `"`
		}
		fmt.Fprintf(&b, `<line x1="%d" y1="%d" x2="%d" y2="%d" stroke="%s" stroke-width="%.1f"%s/>`+"\n", x, y, x+28, y, s.color, s.width, dash)
		fmt.Fprintf(&b, `<text x="%d" y="%d" dominant-baseline="middle">%s</text>`+"\n", x+38, y, html.EscapeString(s.name))
	}
	b.WriteString("</svg>\n")
	return b.String()
}
