package metrics

import (
	"io"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/smoothrate/ratelimit/internal/cli/metrics/metricstest"
)

// TestHandler: GET on the path answers the registry's families in the
// text format, with Go's and the process's collectors; another method or
// path is refused.
func TestHandler(t *testing.T) {
	c := prometheus.NewCounterVec(prometheus.CounterOpts{Name: "x_total", Help: "Xs seen."}, []string{"kind"})
	c.WithLabelValues("a").Add(3)
	reg, err := NewRegistry(c)
	if err != nil {
		t.Fatal(err)
	}
	for _, path := range []string{"", "/stats/prometheus"} {
		h := Handler(reg, path, nil)
		if path == "" {
			path = DefaultPath
		}
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, httptest.NewRequest("GET", path, nil))
		if rec.Code != 200 {
			t.Fatalf("GET %s: %d", path, rec.Code)
		}
		body, _ := io.ReadAll(rec.Body)
		page, err := metricstest.Parse(body)
		if err != nil {
			t.Fatalf("GET %s: %v\n%s", path, err, body)
		}
		if got := page.Series("x_"); len(got) != 1 || got[`x_total{kind="a"}`] != 3 || page.Type("x_total") != "counter" {
			t.Errorf("GET %s: x_total %v (%s)", path, got, page.Type("x_total"))
		}
		for _, name := range []string{"go_goroutines", "go_memstats_alloc_bytes", "process_cpu_seconds_total", "process_resident_memory_bytes", "promhttp_metric_handler_requests_total"} {
			if page.Type(name) == "" {
				t.Errorf("GET %s: no %s", path, name)
			}
		}
		for _, r := range []*http.Request{httptest.NewRequest("POST", path, nil), httptest.NewRequest("GET", "/other", nil)} {
			rec := httptest.NewRecorder()
			h.ServeHTTP(rec, r)
			if rec.Code == 200 {
				t.Errorf("%s %s: 200", r.Method, r.URL.Path)
			}
		}
	}
}

// TestDiff: a page differs from another by a missing, an extra or a
// changed series, and by a family's type; families outside the prefix
// and HELP texts are not compared.
func TestDiff(t *testing.T) {
	want, err := metricstest.Parse([]byte(`# HELP a_x Help.
# TYPE a_x counter
a_x{k="1"} 2
a_x{k="2"} 3
# TYPE a_h histogram
a_h_bucket{le="0.5"} 1
a_h_bucket{le="+Inf"} 2
a_h_sum 0.7
a_h_count 2
# TYPE b_y counter
b_y 1
`))
	if err != nil {
		t.Fatal(err)
	}
	got, err := metricstest.Parse([]byte(`# HELP a_x Other help.
# TYPE a_x counter
a_x{k="2"} 4
a_x{k="3"} 1
# TYPE a_h histogram
a_h_bucket{le="0.5"} 1
a_h_bucket{le="+Inf"} 2
a_h_sum 0.7
a_h_count 2
# TYPE b_y gauge
b_y 9
`))
	if err != nil {
		t.Fatal(err)
	}
	if d := metricstest.Diff(want, want, "a_"); len(d) != 0 {
		t.Errorf("a page differs from itself: %q", d)
	}
	d := metricstest.Diff(want, got, "a_")
	wantDiff := []string{`a_x{k="1"}: missing, want 2`, `a_x{k="2"}: 4, want 3`, `a_x{k="3"}: 1, want no such series`}
	if len(d) != len(wantDiff) {
		t.Fatalf("Diff = %q, want %q", d, wantDiff)
	}
	for i := range d {
		if d[i] != wantDiff[i] {
			t.Errorf("Diff[%d] = %q, want %q", i, d[i], wantDiff[i])
		}
	}
	if d := metricstest.Diff(want, got, "b_"); len(d) != 2 || d[0] != "b_y: 9, want 1" || d[1] != "b_y: type gauge, want counter" {
		t.Errorf("Diff of b_ = %q", d)
	}
	if s := want.Series("a_h"); s[`a_h_bucket{le="0.5"}`] != 1 || s[`a_h_bucket{le="+Inf"}`] != 2 || s["a_h_sum"] != 0.7 || s["a_h_count"] != 2 || len(s) != 4 {
		t.Errorf("histogram series: %v", s)
	}
}

// TestValue: a series by its key, a family summed, a family whose name
// begins another's not mixed with it, and 0 for what the page lacks.
func TestValue(t *testing.T) {
	p, err := metricstest.Parse([]byte(`# TYPE a counter
a{k="1",z="x"} 2
a{k="2",z="x"} 3
# TYPE a_b gauge
a_b 7
`))
	if err != nil {
		t.Fatal(err)
	}
	for name, want := range map[string]float64{`a{k="1",z="x"}`: 2, "a": 5, "a_b": 7, `a{k="9"}`: 0, "c": 0} {
		if got := p.Value(name); got != want {
			t.Errorf("Value(%s) = %v, want %v", name, got, want)
		}
	}
}
