package rls

import (
	"crypto/sha256"
	"log"
	"time"

	"github.com/smoothrate/ratelimit/internal/cli/serve"
	"github.com/smoothrate/ratelimit/rls"
)

// configWatcher reloads the configuration when the files under --config
// change, and on SIGHUP. It polls: the files are few and small, and a poll
// sees every way a file can change (written in place, replaced by a
// rename, a Kubernetes ConfigMap swapping its ..data link, an NFS mount)
// without a dependency on inotify or a watch that a swapped directory
// silently outlives.
//
// A change is loaded only once it has read the same at two looks in a
// row (one --reload-interval apart), or at once when every file was last
// modified before the previous look began (mtimeSlack before, for coarse
// timestamps): a file being written (by
// an editor, a copy, a configuration tool) may be cut at a line boundary
// and parse, and the rules it has not got yet would answer OK without a
// limit. SIGHUP is the operator saying the files are complete: it loads
// what they hold at once. Each look reads only regular files, bounded in
// size and time (readConfigFiles), and never blocks the shutdown. A
// configuration that does not load keeps the previous one: the error is
// logged once and counted (config_load_error).
type configWatcher struct {
	c        *rlsConfig
	svc      *rls.Service
	log      *log.Logger
	interval time.Duration
	now      func() time.Time
	stop     chan struct{}
	// read reads the configuration (readConfigFiles), within readTimeout.
	read        func(path string) configSnapshot
	readTimeout time.Duration

	// loaded is the digest of the snapshot last loaded or refused;
	// pending that of a change seen once, waiting to be seen again.
	loaded, pending [sha256.Size]byte
	havePending     bool
	// lastLook is when the last read that ended began.
	lastLook time.Time
	// reading is a read that outlived configReadTimeout, still running.
	reading    <-chan configSnapshot
	stuckSince time.Time
	// onLoad, if not nil, is told of each configuration put in use.
	onLoad func(*rls.Config)
}

// mtimeSlack is how much earlier than the write itself a file's
// modification time may read: filesystems keep it in coarse steps (a
// kernel tick, up to 1 s on some NFS and macOS filesystems, 2 s on FAT).
const mtimeSlack = 2 * time.Second

func newConfigWatcher(c *rlsConfig, svc *rls.Service, loaded configSnapshot, l *log.Logger) *configWatcher {
	return &configWatcher{c: c, svc: svc, log: l, interval: c.reloadInterval, now: time.Now, stop: make(chan struct{}),
		read: readConfigFiles, readTimeout: configReadTimeout, loaded: loaded.sum, lastLook: loaded.readAt}
}

// start looks every interval and reloads on SIGHUP (serve.Reload) until
// the returned function is called; that function returns at once, even
// while a look waits on a read stuck on a filesystem that does not answer.
func (w *configWatcher) start() (stop func()) {
	stopReload := serve.Reload(w.interval, w.look)
	return func() {
		close(w.stop) // ends a look waiting on a read
		stopReload()
	}
}

// look reads the configuration and loads it when the rules of
// configWatcher say so; forced (SIGHUP), whatever it holds.
func (w *configWatcher) look(force bool) {
	stuck := w.reading != nil
	s, ok, running := readBounded(w.read, w.c.configPath, w.readTimeout, w.reading, w.stop)
	w.reading = running
	if !ok {
		if !stuck {
			w.stuckSince = w.now()
			w.log.Printf("reading the configuration under %s takes more than %v (a filesystem that does not answer?); keeping the current one until a read ends", w.c.configPath, w.readTimeout)
		}
		return
	}
	if stuck {
		w.log.Printf("reading the configuration under %s ended after %v", w.c.configPath, w.now().Sub(w.stuckSince).Round(time.Millisecond))
	}
	prevLook := w.lastLook
	w.lastLook = s.readAt
	switch {
	case force:
	case s.sum == w.loaded:
		w.havePending = false
		return
	case w.havePending && s.sum == w.pending:
	case s.err == nil && len(s.files) > 0 && s.newest.Before(prevLook.Add(-mtimeSlack)):
		// Every file was last written before the previous look began:
		// renamed into place, or copied with its times kept.
	default:
		if !w.havePending {
			w.log.Printf("the configuration under %s changed; loading it once it reads the same at the next look (in %v)", w.c.configPath, w.interval)
		}
		w.pending, w.havePending = s.sum, true
		return
	}
	w.load(s)
}

// load puts the configuration s holds in force, or keeps the previous one
// and says why.
func (w *configWatcher) load(s configSnapshot) {
	// Remembered even when the load fails: a bad file is reported once,
	// not at every look, and the next change is tried again.
	w.loaded, w.havePending = s.sum, false
	cfg, err := w.c.parse(s)
	if err == nil {
		err = w.svc.SetConfig(cfg) // counts the success
	}
	if err != nil {
		w.svc.ConfigLoadFailed()
		w.log.Printf("the configuration does not load, keeping the previous one: %v", err)
		return
	}
	if w.onLoad != nil {
		w.onLoad(cfg)
	}
	w.log.Printf("configuration reloaded: %s", describeConfig(cfg))
}
