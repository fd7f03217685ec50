//go:build unix

package clitest

import (
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"time"
)

// buildShared builds the command in sharedDir, under the lock of that
// directory, and hard-links the result to out (see Binary). It reports
// false, and builds nothing, when the directory cannot be had safely: the
// caller then builds a binary of its own. Then it removes the other
// checkouts' binaries that no test has taken for a while (pruneShared).
func buildShared(goTool, out string) (bool, error) {
	dir, gomod, err := sharedDir(goTool)
	if err != nil {
		return false, err
	}
	parent := filepath.Dir(dir)
	lock := lockShared(parent, dir)
	if lock == nil {
		return false, nil
	}
	defer lock.Close() // and the lock with it
	// The lock file's time says when a test process last took the binary;
	// the recorded go.mod, whether the checkout is still there.
	now := time.Now()
	_ = os.Chtimes(lock.Name(), now, now)
	if b, err := os.ReadFile(filepath.Join(dir, gomodFile)); err != nil || string(b) != gomod {
		_ = os.WriteFile(filepath.Join(dir, gomodFile), []byte(gomod), 0o600)
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
	pruneShared(parent, dir, now)
	return true, nil
}

// gomodFile, in a shared directory, names the go.mod of its checkout.
const gomodFile = "gomod"

// unusedFor is how long a checkout's shared binary is kept when no test
// process takes it: as long as Go's build cache keeps an unused entry.
const unusedFor = 5 * 24 * time.Hour

// lockShared makes dir, a directory in parent, if need be, and returns its
// lock file locked, or nil if dir cannot be had safely. A process that
// waited for the lock while another removed dir (pruneShared) holds the
// lock of a file no longer there: it starts again, with a new dir.
func lockShared(parent, dir string) *os.File {
	for range 3 {
		if !ownDir(parent) || !ownDir(dir) {
			return nil
		}
		path := filepath.Join(dir, "lock")
		lock, err := os.OpenFile(path, os.O_CREATE|os.O_RDWR|syscall.O_NOFOLLOW, 0o600)
		if err != nil {
			return nil
		}
		if err := syscall.Flock(int(lock.Fd()), syscall.LOCK_EX); err != nil {
			lock.Close()
			return nil
		}
		if sameFile(lock, path) {
			return lock
		}
		lock.Close()
	}
	return nil
}

// sameFile reports whether f is the file at path.
func sameFile(f *os.File, path string) bool {
	held, err := f.Stat()
	if err != nil {
		return false
	}
	there, err := os.Lstat(path)
	return err == nil && os.SameFile(held, there)
}

// pruneShared removes the shared directories in parent, but own, whose
// binary no test process has taken for unusedFor before now, or whose
// checkout is gone (its go.mod removed): without it, each checkout ever
// tested here (a clone, a worktree) would leave its binary of tens of
// megabytes in $TMPDIR for good. A directory whose lock is held is in use
// and stays. A directory is renamed before it is removed, under its lock,
// so that a process of its checkout starting meanwhile makes a new one
// rather than building into one being removed.
func pruneShared(parent, own string, now time.Time) {
	entries, err := os.ReadDir(parent)
	if err != nil {
		return
	}
	for _, e := range entries {
		dir := filepath.Join(parent, e.Name())
		switch {
		case dir == own || !e.IsDir():
		case strings.HasPrefix(e.Name(), prunedPrefix):
			// The rest of a removal that was cut short.
			if fi, err := e.Info(); err == nil && now.Sub(fi.ModTime()) > time.Hour {
				_ = os.RemoveAll(dir)
			}
		default:
			pruneOne(parent, dir, now)
		}
	}
}

// prunedPrefix starts the name of a shared directory being removed.
const prunedPrefix = "pruned-"

// pruneOne removes dir if it is unused (see pruneShared).
func pruneOne(parent, dir string, now time.Time) {
	path := filepath.Join(dir, "lock")
	lock, err := os.OpenFile(path, os.O_RDWR|syscall.O_NOFOLLOW, 0)
	if err != nil {
		return
	}
	defer lock.Close()
	if err := syscall.Flock(int(lock.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil || !sameFile(lock, path) {
		return
	}
	fi, err := lock.Stat()
	if err != nil {
		return
	}
	unused := now.Sub(fi.ModTime()) > unusedFor
	if !unused {
		gomod, err := os.ReadFile(filepath.Join(dir, gomodFile))
		if err != nil {
			return
		}
		if _, err := os.Stat(string(gomod)); !errors.Is(err, os.ErrNotExist) {
			return
		}
	}
	gone := filepath.Join(parent, fmt.Sprintf("%s%s-%d", prunedPrefix, filepath.Base(dir), os.Getpid()))
	if os.Rename(dir, gone) == nil {
		_ = os.RemoveAll(gone)
	}
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
