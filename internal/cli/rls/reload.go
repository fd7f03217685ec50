package rls

import (
	"crypto/sha256"
	"encoding/binary"
	"io/fs"
	"log"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/smoothrate/ratelimit/rls"
)

// configWatcher reloads the configuration when the files under --config
// change, and on SIGHUP. It polls: the files are few and small, and a poll
// sees every way a file can change (written in place, replaced by a
// rename, a Kubernetes ConfigMap swapping its ..data link, an NFS mount)
// without a dependency on inotify or a watch that a swapped directory
// silently outlives. A configuration that does not load keeps the
// previous one: the error is logged once and counted (config_load_error).
type configWatcher struct {
	c    *rlsConfig
	svc  *rls.Service
	log  *log.Logger
	mu   sync.Mutex // one reload at a time
	last [sha256.Size]byte
	// loaded, if not nil, is told of each configuration put in use.
	loaded func(*rls.Config)
}

func newConfigWatcher(c *rlsConfig, svc *rls.Service, loaded [sha256.Size]byte, l *log.Logger) *configWatcher {
	return &configWatcher{c: c, svc: svc, log: l, last: loaded}
}

// start polls every interval and reloads on SIGHUP until the returned
// function is called.
func (w *configWatcher) start(interval time.Duration) (stop func()) {
	hup := make(chan os.Signal, 1)
	signal.Notify(hup, syscall.SIGHUP)
	done := make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() {
		t := time.NewTicker(interval)
		defer t.Stop()
		for {
			select {
			case <-t.C:
				w.reload(false)
			case <-hup:
				w.reload(true)
			case <-done:
				return
			}
		}
	})
	return func() {
		signal.Stop(hup)
		close(done)
		wg.Wait()
	}
}

// reload loads the configuration when its files changed since the last
// attempt, or always when forced (SIGHUP).
func (w *configWatcher) reload(force bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	fp := configFingerprint(w.c.configPath)
	if !force && fp == w.last {
		return
	}
	// Remembered even when the load fails: a bad file is reported once,
	// not at every poll, and the next change is tried again.
	w.last = fp
	cfg, err := w.c.load()
	if err == nil {
		err = w.svc.SetConfig(cfg) // counts the success
	}
	if err != nil {
		w.svc.ConfigLoadFailed()
		w.log.Printf("the configuration does not load, keeping the previous one: %v", err)
		return
	}
	if w.loaded != nil {
		w.loaded(cfg)
	}
	w.log.Printf("configuration reloaded: %s", describeConfig(cfg))
}

// configFingerprint hashes the names and contents of the files
// rls.LoadConfig reads under path (every regular file, recursively, but
// names starting with '.'), and any error met on the way, so that a file
// that appears, disappears or changes in any way changes the fingerprint.
func configFingerprint(path string) [sha256.Size]byte {
	h := sha256.New()
	add := func(s string) {
		var n [8]byte
		binary.LittleEndian.PutUint64(n[:], uint64(len(s)))
		h.Write(n[:])
		h.Write([]byte(s))
	}
	file := func(p string) {
		b, err := os.ReadFile(p)
		add(p)
		if err != nil {
			add("error: " + err.Error())
			return
		}
		add(string(b))
	}
	st, err := os.Stat(path)
	switch {
	case err != nil:
		add("error: " + err.Error())
	case !st.IsDir():
		file(path)
	default:
		_ = filepath.WalkDir(path, func(p string, d fs.DirEntry, err error) error {
			if err != nil {
				add(p)
				add("error: " + err.Error())
				return nil
			}
			if p != path && strings.HasPrefix(d.Name(), ".") {
				if d.IsDir() {
					return filepath.SkipDir
				}
				return nil
			}
			if d.IsDir() {
				return nil
			}
			if st, err := os.Stat(p); err == nil && st.IsDir() {
				return nil
			}
			file(p)
			return nil
		})
	}
	var sum [sha256.Size]byte
	h.Sum(sum[:0])
	return sum
}
