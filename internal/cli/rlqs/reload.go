package rlqs

import (
	"crypto/sha256"
	"fmt"
	"log"
	"sync"
	"sync/atomic"

	"github.com/smoothrate/ratelimit/internal/cli/command"
	"github.com/smoothrate/ratelimit/internal/cli/serve"
	"github.com/smoothrate/ratelimit/rlqs"
)

// maxConfigBytes bounds the file: a configuration of thousands of buckets
// is a few hundred kilobytes.
const maxConfigBytes = 16 << 20

// configFile is the file as one read found it: its content, or why it
// could not be read, and their digest.
type configFile struct {
	content []byte
	err     error
	sum     [sha256.Size]byte
}

// readConfig reads the file at path: a regular file (not a pipe or a
// device, whose read could block or never end) of at most maxConfigBytes.
func readConfig(path string) configFile {
	var f configFile
	f.content, f.err = readRegular(path)
	h := sha256.New()
	if f.err != nil {
		h.Write([]byte("error: " + f.err.Error()))
	} else {
		h.Write([]byte("content: "))
		h.Write(f.content)
	}
	h.Sum(f.sum[:0])
	return f
}

func readRegular(path string) ([]byte, error) {
	b, _, err := serve.ReadRegular(path, maxConfigBytes)
	return b, err
}

// parse turns what a read found into a configuration; errors name the
// file, on one line.
func (f configFile) parse(path string) (*rlqs.Config, error) {
	if f.err != nil {
		return nil, &rlqs.ConfigError{File: path, Reason: f.err.Error()}
	}
	return rlqs.ParseConfig(path, f.content)
}

// configWatcher reloads the configuration when the file changes, and on
// SIGHUP. It polls: a poll sees every way a file can change (written in
// place, replaced by a rename, a Kubernetes ConfigMap swapping its ..data
// link, an NFS mount) without a dependency on inotify or a watch that a
// swapped directory silently outlives.
//
// A change is loaded once it has read the same at two looks in a row (one
// --reload-interval apart): a file being written may be cut at a line
// boundary and still parse, and the buckets it has not got yet would run
// under the blanket rule. SIGHUP is the operator saying the file is
// complete: it loads at once. A file that does not load keeps the
// previous configuration: the error is logged once and counted.
type configWatcher struct {
	path   string
	srv    *rlqs.Server
	log    *log.Logger
	failed *atomic.Uint64 // failed loads, for the metrics

	mu              sync.Mutex // one look at a time
	loaded, pending [sha256.Size]byte
	havePending     bool
}

func newConfigWatcher(path string, srv *rlqs.Server, loaded configFile, l *log.Logger, failed *atomic.Uint64) *configWatcher {
	return &configWatcher{path: path, srv: srv, log: l, failed: failed, loaded: loaded.sum}
}

// look reads the file and loads it when it changed and read the same at
// the previous look, or always when forced (SIGHUP).
func (w *configWatcher) look(force bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	f := readConfig(w.path)
	switch {
	case force:
	case f.sum == w.loaded:
		w.havePending = false
		return
	case w.havePending && f.sum == w.pending:
	default:
		w.pending, w.havePending = f.sum, true
		return
	}
	// Remembered even when the load fails: a bad file is reported once,
	// not at every look, and the next change is tried again.
	w.loaded, w.havePending = f.sum, false
	cfg, err := f.parse(w.path)
	if err == nil {
		err = w.srv.SetConfig(cfg)
	}
	if err != nil {
		w.failed.Add(1)
		w.log.Printf("the configuration does not load, keeping the previous one: %v", err)
		return
	}
	w.log.Printf("configuration reloaded: %s", describeConfig(cfg))
}

// describeConfig names a configuration's domain and buckets, for messages.
func describeConfig(cfg *rlqs.Config) string {
	n := cfg.Buckets()
	return fmt.Sprintf("domain %s, %d bucket %s, others %s", cfg.Domain(), n, command.Plural(int64(n), "entry", "entries"), cfg.BlanketRule())
}
