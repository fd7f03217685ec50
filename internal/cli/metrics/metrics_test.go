package metrics

import (
	"io"
	"net/http"
	"net/http/httptest"
	"testing"
)

// TestHandler: GET /metrics answers the families and samples written, in
// the text format's content type; another method or path is refused.
func TestHandler(t *testing.T) {
	h := Handler(func(out io.Writer) {
		w := Writer{W: out}
		w.Family("x_total", "counter", "Xs seen.")
		w.Sample(`x_total{kind="a"}`, 3)
		w.Sample(`x_total{kind="b"}`, -1)
	})
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest("GET", "/metrics", nil))
	want := "# HELP x_total Xs seen.\n# TYPE x_total counter\nx_total{kind=\"a\"} 3\nx_total{kind=\"b\"} -1\n"
	if rec.Code != 200 || rec.Body.String() != want || rec.Header().Get("Content-Type") != ContentType {
		t.Errorf("GET /metrics: %d %q (%s), want 200 %q (%s)", rec.Code, rec.Body.String(), rec.Header().Get("Content-Type"), want, ContentType)
	}
	for _, r := range []*http.Request{httptest.NewRequest("POST", "/metrics", nil), httptest.NewRequest("GET", "/other", nil)} {
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, r)
		if rec.Code == 200 {
			t.Errorf("%s %s: 200", r.Method, r.URL.Path)
		}
	}
}
