// Package metrics is what the serving commands (proxy, rls) share to serve
// their counters to Prometheus: the /metrics endpoint on its own address,
// in the text format (version 0.0.4), and a writer of that format's
// families and samples.
package metrics

import (
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"strconv"

	"github.com/smoothrate/ratelimit/internal/cli/serve"
)

// ContentType is the Prometheus text format's.
const ContentType = "text/plain; version=0.0.4; charset=utf-8"

// Handler serves GET /metrics: what write writes, in ContentType.
func Handler(write func(w io.Writer)) http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /metrics", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", ContentType)
		write(w)
	})
	return mux
}

// Server is the server of Handler(write), logging its errors on errLog.
func Server(write func(w io.Writer), errLog *log.Logger) *http.Server {
	return &http.Server{Handler: Handler(write), ReadHeaderTimeout: serve.ReadHeaderTimeout, ErrorLog: errLog}
}

// Banner is what a command's start-up line says of its metrics on ln.
func Banner(ln net.Listener) string {
	return fmt.Sprintf(", metrics on http://%s/metrics", ln.Addr())
}

// Writer writes the text format.
type Writer struct{ W io.Writer }

// Family starts a metric family: its help and type ("counter", "gauge")
// lines.
func (w Writer) Family(name, typ, help string) {
	io.WriteString(w.W, "# HELP "+name+" "+help+"\n# TYPE "+name+" "+typ+"\n")
}

// Sample writes one sample: series is the metric's name and its labels
// (name{label="value"}).
func (w Writer) Sample(series string, v int64) {
	io.WriteString(w.W, series+" "+strconv.FormatInt(v, 10)+"\n")
}
