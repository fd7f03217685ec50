// Package regularfile reads configuration files that may sit where anyone
// can put anything: only regular files, bounded in size, never waiting on a
// named pipe or a device. The rate limit services and their commands read
// their configurations with it.
package regularfile

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"syscall"

	"github.com/smoothrate/ratelimit/internal/units"
)

// ErrNotRegular is a configuration file that is not a regular file: a
// directory, a named pipe, a socket or a device.
var ErrNotRegular = errors.New("not a regular file")

// ErrTooLarge is a configuration file larger than its bound.
var ErrTooLarge = errors.New("too large")

// Read reads the regular file at path (a link to one is followed),
// at most limit bytes, and returns its contents and what the opened file
// said of itself (its modification time among them). Anything else is
// refused (ErrNotRegular) before it is opened, since opening a named pipe
// for reading waits for a writer and a device may never end; and again
// after, from the opened file, since what was a regular file when looked
// at may have been swapped for a pipe in between: O_NONBLOCK keeps that
// open from waiting. A file over limit is refused (ErrTooLarge) after
// reading limit+1 bytes, however long it is.
func Read(path string, limit int64) ([]byte, fs.FileInfo, error) {
	st, err := os.Stat(path)
	if err != nil {
		return nil, nil, err
	}
	if !st.Mode().IsRegular() {
		return nil, nil, notRegular(st.Mode())
	}
	f, err := os.OpenFile(path, os.O_RDONLY|syscall.O_NONBLOCK, 0)
	if err != nil {
		return nil, nil, err
	}
	defer f.Close()
	if st, err = f.Stat(); err != nil {
		return nil, nil, err
	}
	if !st.Mode().IsRegular() {
		return nil, nil, notRegular(st.Mode())
	}
	b, err := io.ReadAll(io.LimitReader(f, limit+1))
	if err != nil {
		return nil, nil, err
	}
	if int64(len(b)) > limit {
		return nil, nil, &tooLarge{limit}
	}
	return b, st, nil
}

// tooLarge is ErrTooLarge with the bound: "larger than 16MiB: refused".
type tooLarge struct{ limit int64 }

func (e *tooLarge) Error() string        { return "larger than " + units.SizeText(e.limit) + ": refused" }
func (e *tooLarge) Is(target error) bool { return target == ErrTooLarge }

// notRegular names what a file is instead of a regular file.
func notRegular(m fs.FileMode) error {
	kind := "not a regular file"
	switch {
	case m.IsDir():
		return fmt.Errorf("a directory, not a file (%w)", ErrNotRegular)
	case m&fs.ModeNamedPipe != 0:
		kind = "a named pipe (FIFO)"
	case m&fs.ModeSocket != 0:
		kind = "a socket"
	case m&fs.ModeCharDevice != 0:
		kind = "a character device"
	case m&fs.ModeDevice != 0:
		kind = "a device"
	}
	return fmt.Errorf("%s, %w: refused (only regular files are read)", kind, ErrNotRegular)
}
