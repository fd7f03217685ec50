package rls

import "sync/atomic"

// Default bounds of WithMetricSeriesLimit.
const (
	// DefaultMaxMetricSeries is how many series of each kind made from
	// requests a Service keeps apart.
	DefaultMaxMetricSeries = 4096
	// DefaultMaxMetricLabelBytes is how many bytes their labels may take,
	// for each kind (and a 256th of it, 4 KiB, one label).
	DefaultMaxMetricLabelBytes = 1 << 20
)

// otherSeries names the series folded together past a seriesLimit: the
// rules' counters under their domain's OtherRuleKey, "domain.(other)",
// the unknown domains under "(other)".
const otherSeries = "(other)"

// seriesLimit bounds a set of metric labels that requests make (the values
// of detailed_metric and value_to_metric keys and of limit overrides, or
// unknown domains): at most maxSeries labels, of at most maxBytes bytes
// together, none longer than maxBytes/256 (at least 64: 4 KiB at the
// default), so that a few huge labels cannot take the whole budget (a
// series' label is written once per counter of its rule). A label past
// any bound is folded into its kind's other label, which is always
// admitted: the counts stay whole, only their split is lost.
// The bounds are apart from how the series are written, so that any
// exposition (this package's text writer, a Prometheus registry) keeps
// them.
type seriesLimit struct {
	maxSeries, maxBytes int64
	series, bytes       atomic.Int64
}

// label returns the label a new series of name gets: name, with its room
// reserved (admitted true), or other. A caller whose name turns out to be
// there already (it lost a race to store it) gives the room back with
// release.
func (l *seriesLimit) label(name, other string) (label string, admitted bool) {
	if name == other || int64(len(name)) > max(l.maxBytes/256, 64) {
		return other, false
	}
	if l.series.Add(1) > l.maxSeries {
		l.series.Add(-1)
		return other, false
	}
	if l.bytes.Add(int64(len(name))) > l.maxBytes {
		l.bytes.Add(-int64(len(name)))
		l.series.Add(-1)
		return other, false
	}
	return name, true
}

// release gives back the room label reserved for name.
func (l *seriesLimit) release(name string) {
	l.series.Add(-1)
	l.bytes.Add(-int64(len(name)))
}
