//go:build unix

package clitest

import (
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"syscall"
	"testing"
	"time"
)

// TestPruneShared: the shared binaries of checkouts that are gone, or
// that no test has taken for unusedFor, are removed; those in use, the
// caller's own and anything that is not a shared directory stay.
func TestPruneShared(t *testing.T) {
	parent := t.TempDir()
	now := time.Now()
	checkout := filepath.Join(t.TempDir(), "go.mod")
	if err := os.WriteFile(checkout, []byte("module x\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	// shared makes a shared directory as buildShared leaves it: its lock
	// last touched at used, its binary, its checkout's go.mod recorded.
	shared := func(name string, used time.Time, gomod string) string {
		t.Helper()
		dir := filepath.Join(parent, name)
		if err := os.Mkdir(dir, 0o700); err != nil {
			t.Fatal(err)
		}
		for file, content := range map[string]string{"lock": "", "ratelimit": "binary", gomodFile: gomod} {
			if err := os.WriteFile(filepath.Join(dir, file), []byte(content), 0o600); err != nil {
				t.Fatal(err)
			}
		}
		if err := os.Chtimes(filepath.Join(dir, "lock"), used, used); err != nil {
			t.Fatal(err)
		}
		return dir
	}
	stale := now.Add(-unusedFor - time.Hour)
	recent := now.Add(-unusedFor + time.Hour)
	keep := []string{
		shared("recent", recent, checkout),
		shared("own", stale, filepath.Join(parent, "no-such", "go.mod")),
		shared("busy", stale, checkout),
	}
	remove := []string{
		shared("stale", stale, checkout),
		shared("gone", now, filepath.Join(parent, "no-such", "go.mod")),
	}
	// A removal cut short: removed once an hour old, kept before.
	for name, at := range map[string]time.Time{prunedPrefix + "old-1": now.Add(-2 * time.Hour), prunedPrefix + "new-1": now} {
		dir := filepath.Join(parent, name)
		if err := os.Mkdir(dir, 0o700); err != nil {
			t.Fatal(err)
		}
		if err := os.Chtimes(dir, at, at); err != nil {
			t.Fatal(err)
		}
		if at == now {
			keep = append(keep, dir)
		} else {
			remove = append(remove, dir)
		}
	}
	notShared := filepath.Join(parent, "a-file")
	if err := os.WriteFile(notShared, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	keep = append(keep, notShared)

	// A test process of the busy checkout holds its lock.
	busy, err := os.OpenFile(filepath.Join(parent, "busy", "lock"), os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer busy.Close()
	if err := syscall.Flock(int(busy.Fd()), syscall.LOCK_EX); err != nil {
		t.Fatal(err)
	}

	pruneShared(parent, filepath.Join(parent, "own"), now)

	for _, p := range keep {
		if _, err := os.Lstat(p); err != nil {
			t.Errorf("%s removed: %v", filepath.Base(p), err)
		}
	}
	for _, p := range remove {
		if _, err := os.Lstat(p); err == nil {
			t.Errorf("%s kept", filepath.Base(p))
		}
	}
	entries, err := os.ReadDir(parent)
	if err != nil {
		t.Fatal(err)
	}
	if len(entries) != len(keep) {
		var names []string
		for _, e := range entries {
			names = append(names, e.Name())
		}
		t.Errorf("left %v, want the %d kept", names, len(keep))
	}
}

// TestLockSharedStartsAgain: a process that waited for a shared
// directory's lock while another removed the directory does not build
// into the removed one: it makes the directory again and locks the new
// one's lock.
func TestLockSharedStartsAgain(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("waiters on a lock are seen in Linux's /proc/locks")
	}
	parent := filepath.Join(t.TempDir(), "shared")
	dir := filepath.Join(parent, "checkout")
	first := lockShared(parent, dir)
	if first == nil {
		t.Fatal("no lock")
	}
	got := make(chan *os.File)
	go func() { got <- lockShared(parent, dir) }()
	waitForWaiter(t, first)
	// Remove the directory as pruneOne does, holding its lock, while the
	// other waits for it.
	gone := filepath.Join(parent, prunedPrefix+"checkout")
	if err := os.Rename(dir, gone); err != nil {
		t.Fatal(err)
	}
	if err := os.RemoveAll(gone); err != nil {
		t.Fatal(err)
	}
	first.Close()
	second := <-got
	if second == nil {
		t.Fatal("no lock after the removal")
	}
	defer second.Close()
	if !sameFile(second, filepath.Join(dir, "lock")) {
		t.Error("the lock held is not the new directory's")
	}
}

// waitForWaiter returns once a process waits for f's lock, as
// /proc/locks shows it ("-> FLOCK ... dev:inode").
func waitForWaiter(t *testing.T, f *os.File) {
	t.Helper()
	fi, err := f.Stat()
	if err != nil {
		t.Fatal(err)
	}
	inode := fmt.Sprintf(":%d ", fi.Sys().(*syscall.Stat_t).Ino)
	deadline := time.Now().Add(time.Minute)
	for {
		locks, err := os.ReadFile("/proc/locks")
		if err != nil {
			t.Fatal(err)
		}
		for _, line := range strings.Split(string(locks), "\n") {
			if strings.Contains(line, "-> FLOCK") && strings.Contains(line, inode) {
				return
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("no waiter for the lock after a minute:\n%s", locks)
		}
		runtime.Gosched()
	}
}
