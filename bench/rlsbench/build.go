package rlsbench

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
)

// Dirs locates the bench module and the project's module from the
// working directory (anywhere inside bench/).
func Dirs() (bench, root string, err error) {
	out, err := exec.Command("go", "env", "GOMOD").Output()
	if err != nil {
		return "", "", fmt.Errorf("go env GOMOD: %w", err)
	}
	mod := strings.TrimSpace(string(out))
	if mod == "" || mod == os.DevNull {
		return "", "", errors.New("not inside the bench module")
	}
	bench = filepath.Dir(mod)
	if _, err := os.Stat(filepath.Join(bench, "envoyref", "go.mod")); err != nil {
		return "", "", fmt.Errorf("%s is not the bench module (no envoyref/go.mod)", bench)
	}
	return bench, filepath.Dir(bench), nil
}

// BinDir is where the builds go: bench/.bin, ignored by git.
func BinDir(bench string) string { return filepath.Join(bench, ".bin") }

// BuildReference builds envoyproxy/ratelimit's service, unchanged, from
// the module pinned in bench/envoyref/go.mod (fetched from the Go module
// proxy on the first build) and returns the binary's path.
func BuildReference(bench string) (string, error) {
	bin := filepath.Join(BinDir(bench), "envoyref")
	return bin, goBuild(filepath.Join(bench, "envoyref"), bin, ".")
}

// BuildOurs builds the project's command (cmd/ratelimit) from the
// working tree and returns the binary's path.
func BuildOurs(root string) (string, error) {
	bin := filepath.Join(root, "bench", ".bin", "ratelimit")
	return bin, goBuild(root, bin, "./cmd/ratelimit")
}

func goBuild(dir, out, pkg string) error {
	cmd := exec.Command("go", "build", "-mod=readonly", "-o", out, pkg)
	cmd.Dir = dir
	if b, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("go build %s in %s: %w\n%s", pkg, dir, err, b)
	}
	return nil
}
