// Package metricstest reads Prometheus pages for tests: one page's series
// as name{labels} → value, and the difference between two pages' families
// (ours and envoyproxy/ratelimit's, say). Only tests import it.
package metricstest

import (
	"bytes"
	"fmt"
	"io"
	"maps"
	"math"
	"net/http"
	"slices"
	"sort"
	"strconv"
	"strings"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
)

// Page is a scraped page: its families by name.
type Page map[string]*dto.MetricFamily

// Parse reads a page in the text format.
func Parse(text []byte) (Page, error) {
	p := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := p.TextToMetricFamilies(bytes.NewReader(text))
	if err != nil {
		return nil, fmt.Errorf("metricstest: %w", err)
	}
	return fams, nil
}

// Scrape gets url (a /metrics page) in the text format and parses it.
func Scrape(url string) (Page, []byte, error) {
	req, err := http.NewRequest(http.MethodGet, url, nil)
	if err != nil {
		return nil, nil, err
	}
	req.Header.Set("Accept", "text/plain; version=0.0.4")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil, nil, err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		return nil, nil, err
	}
	if resp.StatusCode != http.StatusOK {
		return nil, body, fmt.Errorf("GET %s: %s", url, resp.Status)
	}
	p, err := Parse(body)
	return p, body, err
}

// Series returns the samples of the families whose names start with
// prefix, each as `name{a="x",b="y"}` (labels sorted by name; no braces
// without labels) → value. A histogram gives its _bucket (with le), _sum
// and _count series, a summary its quantiles, _sum and _count.
func (p Page) Series(prefix string) map[string]float64 {
	out := map[string]float64{}
	for name, f := range p {
		if !strings.HasPrefix(name, prefix) {
			continue
		}
		for _, m := range f.GetMetric() {
			labels := m.GetLabel()
			switch f.GetType() {
			case dto.MetricType_COUNTER:
				out[key(name, labels)] = m.GetCounter().GetValue()
			case dto.MetricType_GAUGE:
				out[key(name, labels)] = m.GetGauge().GetValue()
			case dto.MetricType_UNTYPED:
				out[key(name, labels)] = m.GetUntyped().GetValue()
			case dto.MetricType_HISTOGRAM:
				h := m.GetHistogram()
				for _, b := range h.GetBucket() {
					out[key(name+"_bucket", labels, "le", formatFloat(b.GetUpperBound()))] = float64(b.GetCumulativeCount())
				}
				out[key(name+"_bucket", labels, "le", "+Inf")] = float64(h.GetSampleCount())
				out[key(name+"_sum", labels)] = h.GetSampleSum()
				out[key(name+"_count", labels)] = float64(h.GetSampleCount())
			case dto.MetricType_SUMMARY:
				s := m.GetSummary()
				for _, q := range s.GetQuantile() {
					out[key(name, labels, "quantile", formatFloat(q.GetQuantile()))] = q.GetValue()
				}
				out[key(name+"_sum", labels)] = s.GetSampleSum()
				out[key(name+"_count", labels)] = float64(s.GetSampleCount())
			}
		}
	}
	return out
}

// Value is what the page says of name: one series, written as Series
// writes its keys (`family{a="x",b="y"}`, labels sorted), or a family,
// whose series are summed; 0 when the page has none.
func (p Page) Value(name string) float64 {
	family, _, labelled := strings.Cut(name, "{")
	var sum float64
	for k, v := range p.Series(family) {
		if k == name || !labelled && (k == family || strings.HasPrefix(k, family+"{")) {
			sum += v
		}
	}
	return sum
}

// Type is the type of family name ("counter", "gauge", "histogram",
// "summary", "untyped"), or "" when the page has none.
func (p Page) Type(name string) string {
	f, ok := p[name]
	if !ok {
		return ""
	}
	return strings.ToLower(f.GetType().String())
}

func key(name string, labels []*dto.LabelPair, extra ...string) string {
	pairs := make([]string, 0, len(labels)+1)
	for _, l := range labels {
		pairs = append(pairs, l.GetName()+"="+strconv.Quote(l.GetValue()))
	}
	for i := 0; i+1 < len(extra); i += 2 {
		pairs = append(pairs, extra[i]+"="+strconv.Quote(extra[i+1]))
	}
	if len(pairs) == 0 {
		return name
	}
	sort.Strings(pairs)
	return name + "{" + strings.Join(pairs, ",") + "}"
}

func formatFloat(f float64) string {
	if math.IsInf(f, +1) {
		return "+Inf"
	}
	return strconv.FormatFloat(f, 'g', -1, 64)
}

// Diff compares the families whose names start with prefix on two pages:
// each family's type, and each series' presence and value. It returns one
// line per difference, sorted; none when they agree. HELP texts are not
// compared.
func Diff(want, got Page, prefix string) []string {
	var diffs []string
	names := map[string]bool{}
	for n := range want {
		names[n] = true
	}
	for n := range got {
		names[n] = true
	}
	for _, n := range slices.Sorted(maps.Keys(names)) {
		if !strings.HasPrefix(n, prefix) {
			continue
		}
		if wt, gt := want.Type(n), got.Type(n); wt != gt && wt != "" && gt != "" {
			diffs = append(diffs, fmt.Sprintf("%s: type %s, want %s", n, gt, wt))
		}
	}
	ws, gs := want.Series(prefix), got.Series(prefix)
	for k, w := range ws {
		g, ok := gs[k]
		switch {
		case !ok:
			diffs = append(diffs, fmt.Sprintf("%s: missing, want %v", k, w))
		case g != w:
			diffs = append(diffs, fmt.Sprintf("%s: %v, want %v", k, g, w))
		}
	}
	for k, g := range gs {
		if _, ok := ws[k]; !ok {
			diffs = append(diffs, fmt.Sprintf("%s: %v, want no such series", k, g))
		}
	}
	sort.Strings(diffs)
	return diffs
}
