//go:build unix

package clitest

import (
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"syscall"
)

// buildShared builds the command in sharedDir, under the lock of that
// directory, and hard-links the result to out (see Binary). It reports
// false, and builds nothing, when the directory cannot be had safely: the
// caller then builds a binary of its own.
func buildShared(goTool, out string) (bool, error) {
	dir, err := sharedDir(goTool)
	if err != nil {
		return false, err
	}
	if !ownDir(filepath.Dir(dir)) || !ownDir(dir) {
		return false, nil
	}
	lock, err := os.OpenFile(filepath.Join(dir, "lock"), os.O_CREATE|os.O_RDWR|syscall.O_NOFOLLOW, 0o600)
	if err != nil {
		return false, nil
	}
	defer lock.Close() // and the lock with it
	if err := syscall.Flock(int(lock.Fd()), syscall.LOCK_EX); err != nil {
		return false, nil
	}
	bin := filepath.Join(dir, "ratelimit")
	if err := goBuild(goTool, bin); err != nil {
		return true, err
	}
	if err := os.Link(bin, out); err != nil {
		if err := copyFile(bin, out); err != nil {
			return true, fmt.Errorf("taking the binary: %v", err)
		}
	}
	return true, nil
}

// ownDir makes dir if need be and reports whether it is a directory (not
// a link to one) of this user's that no one else may write: $TMPDIR is
// everyone's.
func ownDir(dir string) bool {
	if err := os.Mkdir(dir, 0o700); err != nil && !errors.Is(err, os.ErrExist) {
		return false
	}
	fi, err := os.Lstat(dir)
	if err != nil || !fi.IsDir() || fi.Mode().Perm()&0o022 != 0 {
		return false
	}
	st, ok := fi.Sys().(*syscall.Stat_t)
	return ok && int(st.Uid) == os.Getuid()
}

func copyFile(from, to string) error {
	src, err := os.Open(from)
	if err != nil {
		return err
	}
	defer src.Close()
	dst, err := os.OpenFile(to, os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o755)
	if err != nil {
		return err
	}
	if _, err := io.Copy(dst, src); err != nil {
		dst.Close()
		return err
	}
	return dst.Close()
}
