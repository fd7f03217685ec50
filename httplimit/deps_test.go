package httplimit

import (
	gobuild "go/build"
	"path/filepath"
	"strings"
	"testing"
)

// TestStandsAlone: httplimit, and throttle under it, compile none of the
// Guava side (the root package and smooth), so that a user of the keyed
// limiters does not build the engine. It follows the module's own imports
// from this package's directory (build constraints of this platform).
func TestStandsAlone(t *testing.T) {
	const module = "github.com/smoothrate/ratelimit"
	root, err := filepath.Abs("..")
	if err != nil {
		t.Fatal(err)
	}
	seen := map[string]bool{}
	var walk func(path string)
	walk = func(path string) {
		if seen[path] {
			return
		}
		seen[path] = true
		if path == module || path == module+"/smooth" {
			t.Errorf("%s is a dependency of httplimit", path)
			return
		}
		dir := filepath.Join(root, strings.TrimPrefix(strings.TrimPrefix(path, module), "/"))
		pkg, err := gobuild.ImportDir(dir, 0)
		if err != nil {
			t.Fatalf("%s: %v", path, err)
		}
		for _, imp := range pkg.Imports {
			if imp == module || strings.HasPrefix(imp, module+"/") {
				walk(imp)
			}
		}
	}
	walk(module + "/httplimit")
	if !seen[module+"/throttle"] {
		t.Fatal("the walk did not reach throttle: the test is not looking")
	}
}
