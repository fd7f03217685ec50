//go:build unix

package pipe

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/smoothrate/ratelimit/internal/cli/command"
)

// Changing a running pipe's rate, as pv -R PID -L RATE does. Each pipe
// listens on a Unix socket named after its process ID in a directory only
// its user can enter; `ratelimit pipe -R PID RATE` connects, sends the new
// rate and prints the pipe's answer. pv signals its target and leaves the
// new settings in a file; a socket gives the caller an answer (the rate is
// refused, the shared limit's Redis is down) and needs no signal handler.
//
// Only the pipe's user can change it: the directory is private to that
// user (it is refused otherwise), and on Linux the pipe also checks the
// caller's user ID on the connection (SO_PEERCRED).

// controlTimeout bounds one exchange on the control socket: a caller that
// connects and says nothing cannot hold the socket for longer.
const controlTimeout = 5 * time.Second

// maxRequest is the longest request line the control socket reads.
const maxRequest = 256

// controlDirs are the directories where pipes put their control sockets, in
// the order a pipe tries them and a caller looks: $XDG_RUNTIME_DIR (the
// user's runtime directory, private by definition), then a directory of the
// user's own under the temporary directory, for sessions without one (cron,
// ssh without a login manager).
func controlDirs() []string {
	var dirs []string
	if d := os.Getenv("XDG_RUNTIME_DIR"); filepath.IsAbs(d) {
		dirs = append(dirs, d)
	}
	return append(dirs, filepath.Join(os.TempDir(), "ratelimit-"+strconv.Itoa(os.Getuid())))
}

// socketName is the control socket of the pipe with process ID pid.
func socketName(pid int) string { return "ratelimit-pipe." + strconv.Itoa(pid) + ".sock" }

// privateDir checks that dir is a directory (not a link to one) that
// belongs to this user and that no one else may enter or list.
func privateDir(dir string) error {
	fi, err := os.Lstat(dir)
	if err != nil {
		return err
	}
	st, ok := fi.Sys().(*syscall.Stat_t)
	switch {
	case !fi.IsDir():
		return fmt.Errorf("%s is not a directory", dir)
	case !ok || int(st.Uid) != os.Getuid():
		return fmt.Errorf("%s belongs to another user", dir)
	case fi.Mode().Perm()&0o077 != 0:
		return fmt.Errorf("%s is open to other users (mode %#o)", dir, fi.Mode().Perm())
	}
	return nil
}

// sweep removes the control sockets in dir that no process listens on any
// more: those of pipes that were killed (SIGKILL) and could not remove
// their own. A socket that refuses a connection has no listener; one in
// use, or that answers otherwise, is left alone.
func sweep(dir string) {
	names, err := filepath.Glob(filepath.Join(dir, "ratelimit-pipe.*.sock"))
	if err != nil {
		return
	}
	for _, name := range names {
		c, err := net.DialTimeout("unix", name, time.Second)
		if err == nil {
			c.Close()
			continue
		}
		if errors.Is(err, syscall.ECONNREFUSED) {
			_ = os.Remove(name)
		}
	}
}

// control is a running pipe's control socket.
type control struct {
	ln net.Listener
	wg sync.WaitGroup
}

// retuneFunc applies a new rate and returns the line that tells the caller
// what changed, or why it did not: a badRate for a rate the pipe cannot run
// at, any other error for a failure.
type retuneFunc func(rate float64) (string, error)

// badRate is a rate a running pipe refuses as a value (too slow for its
// chunks): the caller exits with status 2, as for a bad argument.
type badRate struct{ error }

// listenControl opens the control socket of the process pid in the first
// private directory of controlDirs, making the one under the temporary
// directory if need be, and answers callers with retune until Close.
func listenControl(pid int, retune retuneFunc) (*control, error) {
	var errs []error
	dirs := controlDirs()
	for i, dir := range dirs {
		if i == len(dirs)-1 { // the user's own directory under the temporary one, which may not exist yet
			if err := os.Mkdir(dir, 0o700); err != nil && !errors.Is(err, fs.ErrExist) {
				errs = append(errs, err)
				continue
			}
		}
		if err := privateDir(dir); err != nil {
			errs = append(errs, err)
			continue
		}
		path := filepath.Join(dir, socketName(pid))
		// The path names this process: a file there is left by a
		// process of the same ID that was killed, unless something
		// answers on it (a pipe of another PID namespace sharing the
		// directory), which is left alone.
		if c, err := net.Dial("unix", path); err == nil {
			c.Close()
			errs = append(errs, fmt.Errorf("%s is in use", path))
			continue
		}
		_ = os.Remove(path)
		sweep(dir)
		ln, err := net.Listen("unix", path)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		c := &control{ln: ln}
		c.wg.Go(func() { c.serve(retune) })
		return c, nil
	}
	return nil, errors.Join(errs...)
}

// Close stops answering and removes the socket. A nil control is closed.
func (c *control) Close() {
	if c == nil {
		return
	}
	c.ln.Close() // removes the socket file too
	c.wg.Wait()
}

// serve answers callers one at a time until the listener closes.
func (c *control) serve(retune retuneFunc) {
	for {
		conn, err := c.ln.Accept()
		if err != nil {
			if errors.Is(err, net.ErrClosed) {
				return
			}
			continue
		}
		answer(conn, retune)
		conn.Close()
	}
}

// answer reads one request, "rate BYTES_PER_SECOND", and writes one line:
// "ok WHAT CHANGED", "usage WHY" (a rate the pipe refuses) or "error WHY".
func answer(conn net.Conn, retune retuneFunc) {
	_ = conn.SetDeadline(time.Now().Add(controlTimeout))
	if uid, known := peerUID(conn); known && uid != os.Getuid() {
		fmt.Fprintf(conn, "error process %d belongs to another user\n", os.Getpid())
		return
	}
	line, err := bufio.NewReader(io.LimitReader(conn, maxRequest)).ReadString('\n')
	if err != nil {
		return
	}
	word, arg, _ := strings.Cut(strings.TrimSuffix(line, "\n"), " ")
	rate, err := strconv.ParseFloat(arg, 64)
	if word != "rate" || err != nil {
		fmt.Fprintf(conn, "error request %q not understood\n", line)
		return
	}
	msg, err := retune(rate)
	switch {
	case errors.As(err, new(badRate)):
		fmt.Fprintf(conn, "usage %s\n", oneLine(err.Error()))
	case err != nil:
		fmt.Fprintf(conn, "error %s\n", oneLine(err.Error()))
	default:
		fmt.Fprintf(conn, "ok %s\n", oneLine(msg))
	}
}

func oneLine(s string) string { return strings.ReplaceAll(s, "\n", " ") }

// requestRate asks the pipe with process ID pid to go at rate. It returns
// the pipe's answer (what changed) and command.ExitOK, or why not and the
// exit status: ExitUsage for a rate the pipe refused, ExitFail otherwise.
func requestRate(pid int, rate float64) (answer string, status int) {
	var path string
	for _, dir := range controlDirs() {
		p := filepath.Join(dir, socketName(pid))
		if fi, err := os.Lstat(p); err == nil && fi.Mode().Type() == fs.ModeSocket && privateDir(dir) == nil {
			path = p
			break
		}
	}
	if path == "" {
		return whyNoPipe(pid), command.ExitFail
	}
	conn, err := net.DialTimeout("unix", path, controlTimeout)
	if err != nil {
		return fmt.Sprintf("process %d does not answer on %s: %v", pid, path, err), command.ExitFail
	}
	defer conn.Close()
	_ = conn.SetDeadline(time.Now().Add(controlTimeout))
	if _, err := fmt.Fprintf(conn, "rate %s\n", strconv.FormatFloat(rate, 'g', -1, 64)); err != nil {
		return fmt.Sprintf("process %d: %v", pid, err), command.ExitFail
	}
	reply, err := bufio.NewReader(io.LimitReader(conn, 4096)).ReadString('\n')
	if err != nil {
		return fmt.Sprintf("process %d did not answer: %v", pid, err), command.ExitFail
	}
	kind, text, _ := strings.Cut(strings.TrimSuffix(reply, "\n"), " ")
	switch kind {
	case "ok":
		return text, command.ExitOK
	case "usage":
		return fmt.Sprintf("process %d refused: %s", pid, text), command.ExitUsage
	}
	return fmt.Sprintf("process %d: %s", pid, text), command.ExitFail
}

// whyNoPipe says why no control socket of pid was found.
func whyNoPipe(pid int) string {
	switch err := syscall.Kill(pid, 0); {
	case errors.Is(err, syscall.ESRCH):
		return fmt.Sprintf("no process %d", pid)
	case errors.Is(err, syscall.EPERM):
		return fmt.Sprintf("process %d belongs to another user: only its user can change its rate", pid)
	}
	return fmt.Sprintf("process %d is not a ratelimit pipe, or one started with another $XDG_RUNTIME_DIR or $TMPDIR (no %s in %s)",
		pid, socketName(pid), strings.Join(controlDirs(), " or "))
}
