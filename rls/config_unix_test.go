//go:build unix

package rls

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
)

// TestLoadConfigRegularFilesOnly: a named pipe under the configuration
// (whose open would wait for a writer for good) is refused without being
// opened, given alone or found in a directory; so is a file over the bound.
func TestLoadConfigRegularFilesOnly(t *testing.T) {
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "a.yaml"), []byte("domain: a\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	fifo := filepath.Join(dir, "b.yaml")
	if err := syscall.Mkfifo(fifo, 0o644); err != nil {
		t.Fatal(err)
	}
	for _, path := range []string{fifo, dir} {
		_, err := LoadConfig(path)
		var ce *ConfigError
		if !errors.As(err, &ce) || ce.File != fifo || !strings.Contains(ce.Reason, "a named pipe (FIFO), not a regular file: refused") {
			t.Errorf("LoadConfig(%s): %v, want a ConfigError naming the pipe", path, err)
		}
	}
	big := filepath.Join(t.TempDir(), "big.yaml")
	if err := os.WriteFile(big, make([]byte, MaxConfigFileBytes+1), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := LoadConfig(big); err == nil || !strings.Contains(err.Error(), "larger than 16MiB") {
		t.Errorf("a file over MaxConfigFileBytes: %v", err)
	}
}
