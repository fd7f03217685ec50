package serve

import (
	"errors"
	"fmt"
	"io/fs"
	"net"
	"os"
	"syscall"
	"time"
)

// UnixPrefix begins an address that names a Unix socket ("unix:/run/rls.sock"),
// as gRPC's own targets name one.
const UnixPrefix = "unix:"

// ListenUnix listens on a Unix socket at path; closing the listener
// removes the file. A socket file left at path by a process that is gone
// (nothing accepts on it) is removed first, so that a restarted service
// starts; anything else at path is an error, the path not being ours to
// take: a file that is not a socket, or a socket another process still
// listens on. On failure it closes the listeners opened before, as Listen
// does.
func (ls *Listeners) ListenUnix(flagName, path string) (net.Listener, error) {
	return ls.add(flagName, func() (net.Listener, error) { return listenUnix(path) })
}

func listenUnix(path string) (net.Listener, error) {
	if path == "" {
		return nil, errors.New("a Unix socket needs a path")
	}
	if err := removeStaleSocket(path); err != nil {
		return nil, err
	}
	return net.Listen("unix", path)
}

// removeStaleSocket removes the socket file at path when no process
// accepts on it; it leaves alone, with an error, anything else.
func removeStaleSocket(path string) error {
	st, err := os.Lstat(path)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	if st.Mode()&fs.ModeSocket == 0 {
		return fmt.Errorf("%s exists and is not a socket: not removed", path)
	}
	c, err := net.DialTimeout("unix", path, time.Second)
	if err == nil {
		c.Close()
		return fmt.Errorf("%s: another process listens on this socket", path)
	}
	if !errors.Is(err, syscall.ECONNREFUSED) {
		return fmt.Errorf("%s: cannot tell whether the socket is in use: %w", path, err)
	}
	if err := os.Remove(path); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("removing the stale socket %s: %w", path, err)
	}
	return nil
}
