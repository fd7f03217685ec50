package rls

import (
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/smoothrate/ratelimit/internal/regularfile"
	"github.com/smoothrate/ratelimit/internal/units"
	"github.com/smoothrate/ratelimit/rls"
)

// Bounds on reading the configuration: what a file under --config can
// cost the service, whatever is put there.
const (
	// maxConfigFileBytes bounds one file: the largest configurations we
	// know of (thousands of descriptors) take a few hundred KiB.
	maxConfigFileBytes = 16 << 20
	// maxConfigBytes bounds all the files together.
	maxConfigBytes = 64 << 20
	// configReadTimeout bounds reading them all: a local filesystem
	// takes milliseconds; one that does not answer (a hung NFS or FUSE
	// mount) must not freeze reloading, --check or the shutdown.
	configReadTimeout = 10 * time.Second
)

// configSnapshot is what one look at --config read: the files, in the
// order rls.ParseConfig takes them, or the error that stopped the
// reading; a digest of both; the newest modification time among the
// files; and when the reading began.
type configSnapshot struct {
	files  []rls.File
	err    error
	sum    [sha256.Size]byte
	newest time.Time
	readAt time.Time
}

// readConfigFiles reads path as rls.LoadConfig does (a YAML file, or every
// file below a directory, recursively, in lexical order, except names
// starting with '.'; a link to a file is read, one to a directory not
// followed), but only regular files: a named pipe, a device or a socket is
// refused (*rls.ConfigError) without being read, since opening a pipe for
// reading waits for a writer, and reading a device may never end. Each
// file is bounded by maxConfigFileBytes and all of them by maxConfigBytes.
// The digest covers every name, content and error, so that a file that
// appears, disappears, changes or fails in any way changes it.
func readConfigFiles(path string) configSnapshot {
	s := configSnapshot{readAt: time.Now()}
	var total int64
	read := func(p string) error {
		b, st, err := regularfile.Read(p, min(maxConfigFileBytes, maxConfigBytes-total))
		if errors.Is(err, regularfile.ErrTooLarge) {
			err = fmt.Errorf("%w (at most %s a file, %s in all)", err, units.SizeText(maxConfigFileBytes), units.SizeText(maxConfigBytes))
		}
		if err != nil {
			return &rls.ConfigError{File: p, Reason: err.Error()}
		}
		total += int64(len(b))
		s.files = append(s.files, rls.File{Name: p, Content: b})
		if st.ModTime().After(s.newest) {
			s.newest = st.ModTime()
		}
		return nil
	}
	st, err := os.Stat(path)
	switch {
	case err != nil:
		s.err = &rls.ConfigError{File: path, Reason: err.Error()}
	case !st.IsDir():
		s.err = read(path)
	default:
		s.err = filepath.WalkDir(path, func(p string, d fs.DirEntry, err error) error {
			if err != nil {
				return &rls.ConfigError{File: p, Reason: err.Error()}
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
				return nil // a link to a directory: not followed
			}
			return read(p)
		})
	}
	h := sha256.New()
	add := func(s string) {
		var n [8]byte
		binary.LittleEndian.PutUint64(n[:], uint64(len(s)))
		h.Write(n[:])
		h.Write([]byte(s))
	}
	for _, f := range s.files {
		add(f.Name)
		add(string(f.Content))
	}
	if s.err != nil {
		add("error: " + s.err.Error())
	}
	h.Sum(s.sum[:0])
	return s
}

// readBounded runs read(path) within timeout: a read that takes longer is
// abandoned (its goroutine ends whenever the filesystem answers) and
// reported as not ok, as is one given up because stop was closed first.
// inFlight, when not nil, is a read still running from before: it is
// waited for rather than starting another, so that a filesystem that does
// not answer holds at most one goroutine; running is the read still in
// flight when ok is false.
func readBounded(read func(string) configSnapshot, path string, timeout time.Duration, inFlight <-chan configSnapshot, stop <-chan struct{}) (s configSnapshot, ok bool, running <-chan configSnapshot) {
	if inFlight == nil {
		ch := make(chan configSnapshot, 1)
		go func() { ch <- read(path) }()
		inFlight = ch
	}
	t := time.NewTimer(timeout)
	defer t.Stop()
	select {
	case s := <-inFlight:
		return s, true, nil
	case <-t.C:
		return configSnapshot{}, false, inFlight
	case <-stop:
		return configSnapshot{}, false, inFlight
	}
}
