package layering

import (
	"slices"
	"strings"
	"testing"
)

const module = "github.com/smoothrate/ratelimit"

// library lists the packages a user of the library compiles; none of them
// may depend on gRPC or Envoy's protos.
var library = []string{
	module,
	module + "/smooth",
	module + "/throttle",
	module + "/httplimit",
	module + "/shape",
	module + "/jobs",
	module + "/distributed",
}

// forbiddenInLibrary are the path prefixes of the modules that only rls,
// rlqs, grpclimit and cmd may bring in, and the services themselves: no
// library package may import rls or rlqs (they would bring gRPC along).
var forbiddenInLibrary = []string{
	"google.golang.org/grpc",
	"github.com/envoyproxy/",
	"google.golang.org/genproto/",
	module + "/rls",
	module + "/rlqs",
}

// services are the library's service packages: they may compile gRPC and
// Envoy's protos, but no more than the library a metrics library.
var services = []string{
	module + "/rls",
	module + "/rls/xds",
	module + "/rlqs",
	module + "/grpclimit",
}

// forbiddenOutsideCLI are the path prefixes only the command line (cmd,
// internal/cli) may bring in: a maintained Prometheus library serves the
// CLI's metrics pages; the library exposes counters and lets its user
// choose how to publish them.
var forbiddenOutsideCLI = []string{
	"github.com/prometheus/",
}

// keyed lists the packages that must stand without the Guava side.
var keyed = []string{module + "/throttle", module + "/httplimit"}

var guava = []string{module, module + "/smooth"}

// platforms are the targets whose build constraints are followed: the ones
// the tests run on and the ones with files of their own (tsc, prefetch,
// redistest's signals).
var platforms = [][2]string{
	{"linux", "amd64"},
	{"linux", "arm64"},
	{"darwin", "arm64"},
	{"windows", "amd64"},
}

// deps asks the go command for the full (non-test) dependency list of each
// package, for one platform.
func deps(t *testing.T, goos, goarch string, pkgs []string) map[string][]string {
	t.Helper()
	out := goList(t, goos, goarch, append([]string{"-f", "{{.ImportPath}}{{range .Deps}} {{.}}{{end}}"}, pkgs...)...)
	got := map[string][]string{}
	for line := range strings.Lines(string(out)) {
		fields := strings.Fields(line)
		if len(fields) == 0 {
			continue
		}
		got[fields[0]] = fields[1:]
	}
	for _, p := range pkgs {
		if _, ok := got[p]; !ok {
			t.Fatalf("go list for %s/%s did not list %s:\n%s", goos, goarch, p, out)
		}
	}
	return got
}

// violations returns the dependencies of pkg that match one of the
// forbidden paths (exactly, or as a prefix when it ends in "/", or as the
// module path of the dependency).
func violations(depsOf []string, forbidden []string) []string {
	var bad []string
	for _, d := range depsOf {
		for _, f := range forbidden {
			if d == f || (strings.HasSuffix(f, "/") && strings.HasPrefix(d, f)) ||
				(!strings.HasSuffix(f, "/") && strings.HasPrefix(d, f+"/")) {
				bad = append(bad, d)
				break
			}
		}
	}
	return bad
}

func TestLibraryDoesNotCompileGRPC(t *testing.T) {
	checkNoDeps(t, library, forbiddenInLibrary, "gRPC, Envoy's protos and the services built on them belong to rls, rlqs, grpclimit and cmd only")
}

func TestLibraryDoesNotCompilePrometheus(t *testing.T) {
	checkNoDeps(t, append(slices.Clone(library), services...), forbiddenOutsideCLI, "Prometheus belongs to the command line only")
}

// checkNoDeps fails for each of pkgs that depends, on any platform, on a
// forbidden path, saying why it must not.
func checkNoDeps(t *testing.T, pkgs, forbidden []string, why string) {
	t.Helper()
	for _, pl := range platforms {
		got := deps(t, pl[0], pl[1], pkgs)
		for _, p := range pkgs {
			if len(got[p]) == 0 {
				t.Fatalf("%s/%s: %s has no dependencies listed: the test is not looking", pl[0], pl[1], p)
			}
			if bad := violations(got[p], forbidden); len(bad) > 0 {
				t.Errorf("%s/%s: %s depends on %s (%s)", pl[0], pl[1], p, strings.Join(bad, ", "), why)
			}
		}
	}
}

func TestKeyedSideStandsAlone(t *testing.T) {
	for _, pl := range platforms {
		got := deps(t, pl[0], pl[1], keyed)
		if !contains(got[module+"/httplimit"], module+"/throttle") {
			t.Fatalf("%s/%s: httplimit does not depend on throttle: the test is not looking", pl[0], pl[1])
		}
		for _, p := range keyed {
			for _, d := range got[p] {
				if contains(guava, d) {
					t.Errorf("%s/%s: %s depends on %s (the keyed side must not compile the Guava engine)",
						pl[0], pl[1], p, d)
				}
			}
		}
	}
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

// TestViolations pins the matcher, so that a change to it cannot make the
// tests above look at nothing.
func TestViolations(t *testing.T) {
	deps := []string{
		"fmt",
		"google.golang.org/grpc",
		"google.golang.org/grpc/codes",
		"google.golang.org/grpcx",
		"github.com/envoyproxy/go-control-plane/envoy/type/v3",
		"google.golang.org/genproto/googleapis/rpc/status",
		"google.golang.org/protobuf/proto",
		module + "/rlqs",
		module + "/rlqsx",
		module + "/internal/rlqstest",
	}
	got := violations(deps, forbiddenInLibrary)
	want := []string{
		"google.golang.org/grpc",
		"google.golang.org/grpc/codes",
		"github.com/envoyproxy/go-control-plane/envoy/type/v3",
		"google.golang.org/genproto/googleapis/rpc/status",
		module + "/rlqs",
	}
	if strings.Join(got, " ") != strings.Join(want, " ") {
		t.Errorf("violations = %q, want %q", got, want)
	}
	prom := []string{"github.com/prometheus/client_golang/prometheus", "github.com/prometheusx/y", "fmt"}
	if got := violations(prom, forbiddenOutsideCLI); len(got) != 1 || got[0] != prom[0] {
		t.Errorf("violations of %q = %q, want the first only", prom, got)
	}
}
