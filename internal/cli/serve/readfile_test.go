//go:build unix

package serve

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
)

// TestReadRegular: a regular file is read whole within its bound; a named
// pipe (whose open would wait for a writer), a device that never ends and
// a directory are refused without being read; a file over the bound is
// refused after bound+1 bytes.
func TestReadRegular(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "a.yaml")
	if err := os.WriteFile(file, []byte("domain: a\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	b, st, err := ReadRegular(file, 10)
	if err != nil || string(b) != "domain: a\n" || st.ModTime().IsZero() {
		t.Errorf("a regular file of 10 bytes, bound 10: %q, %v", b, err)
	}
	if _, _, err := ReadRegular(file, 9); !errors.Is(err, ErrTooLarge) || err.Error() != "larger than 9: refused" {
		t.Errorf("a file of 10 bytes, bound 9: %v, want ErrTooLarge", err)
	}
	fifo := filepath.Join(dir, "fifo.yaml")
	if err := syscall.Mkfifo(fifo, 0o644); err != nil {
		t.Fatal(err)
	}
	for path, want := range map[string]string{
		fifo:        "a named pipe (FIFO), not a regular file: refused",
		"/dev/zero": "a character device, not a regular file: refused",
		dir:         "a directory, not a file",
	} {
		if _, _, err := ReadRegular(path, 1<<20); !errors.Is(err, ErrNotRegular) || !strings.HasPrefix(err.Error(), want) {
			t.Errorf("%s: %v, want ErrNotRegular saying %q", path, err, want)
		}
	}
}
