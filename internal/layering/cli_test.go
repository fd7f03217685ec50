package layering

import (
	"bytes"
	"fmt"
	"os/exec"
	"slices"
	"strings"
	"testing"
)

// The command line's arrows: cmd/ratelimit → a command (internal/cli/pipe,
// run, trace, proxy, rls, rlqs, …) → what several commands share (internal/cli/
// command, serve, outage, …) → the library. A command never imports
// another, a shared package never imports a command, nothing of the
// library imports the command line, and clitest (the binary the tests
// run) is imported by tests only. Test files are held to the same arrows.

const (
	cliMain = module + "/cmd/ratelimit"
	cliRoot = module + "/internal/cli/"
)

// cliCommands are the packages of the commands, one each; every other
// package under internal/cli must be in cliShared. A package in neither
// fails the test: say which it is here.
var cliCommands = []string{"pipe", "run", "trace", "proxy", "rls", "rlqs"}

// cliShared are the packages several commands share.
var cliShared = []string{"command", "clitest", "serve", "outage", "metrics", "metrics/metricstest", "redisflag", "sharedlimit"}

// cliTestOnly are the shared packages only tests may import.
var cliTestOnly = []string{"clitest", "metrics/metricstest"}

// listed is one package as go list describes it.
type listed struct {
	path        string
	imports     []string // of its non-test files
	testImports []string // of its test files, in the package and outside it
}

// listModule asks the go command for the imports of every package of the
// module, for one platform.
func listModule(t *testing.T, goos, goarch string) []listed {
	t.Helper()
	out := goList(t, goos, goarch, "-f",
		"{{.ImportPath}}|{{join .Imports \" \"}}|{{join .TestImports \" \"}} {{join .XTestImports \" \"}}", module+"/...")
	var pkgs []listed
	for line := range strings.Lines(string(out)) {
		f := strings.Split(strings.TrimSpace(line), "|")
		if len(f) != 3 {
			t.Fatalf("go list line %q", line)
		}
		pkgs = append(pkgs, listed{f[0], strings.Fields(f[1]), strings.Fields(f[2])})
	}
	return pkgs
}

// goList runs go list with args for one platform and returns its output.
func goList(t *testing.T, goos, goarch string, args ...string) []byte {
	t.Helper()
	cmd := exec.Command("go", append([]string{"list"}, args...)...)
	cmd.Env = append(cmd.Environ(), "GOOS="+goos, "GOARCH="+goarch)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go list for %s/%s: %v\n%s", goos, goarch, err, stderr.Bytes())
	}
	return out
}

// cliRole is where a package sits on the command line's arrows.
type cliRole int

const (
	roleLibrary cliRole = iota // the library, its internal packages, bench helpers: all but the below
	roleShared
	roleCommand
	roleMain
	roleUnknown // under internal/cli, in neither list
)

func (r cliRole) String() string {
	return [...]string{"the library", "a shared package of the command line", "a command", "the command line's main", "unclassified"}[r]
}

func roleOf(path string) cliRole {
	switch name, ok := strings.CutPrefix(path, cliRoot); {
	case path == cliMain:
		return roleMain
	case !ok:
		return roleLibrary
	case slices.Contains(cliCommands, name):
		return roleCommand
	case slices.Contains(cliShared, name):
		return roleShared
	}
	return roleUnknown
}

// cliViolations returns, for each import against the arrows, a line that
// says which and why.
func cliViolations(pkgs []listed) []string {
	var bad []string
	for _, p := range pkgs {
		from := roleOf(p.path)
		if from == roleUnknown {
			bad = append(bad, fmt.Sprintf("%s is under internal/cli but neither a command nor a shared package: add it to cliCommands or cliShared", p.path))
			continue
		}
		check := func(imp string, test bool) {
			if !strings.HasPrefix(imp, module+"/") && imp != module {
				return
			}
			to := roleOf(imp)
			var why string
			switch {
			case to == roleMain:
				why = "nothing imports the command line's main"
			case from == roleLibrary && to != roleLibrary:
				why = "the library never depends on the command line"
			case from == roleShared && to == roleCommand:
				why = "a shared package never imports a command"
			case from == roleCommand && to == roleCommand && imp != p.path:
				why = "a command never imports another"
			case !test && slices.Contains(cliTestOnly, strings.TrimPrefix(imp, cliRoot)) && strings.HasPrefix(imp, cliRoot):
				why = "only tests import it"
			default:
				return
			}
			files := "non-test files"
			if test {
				files = "tests"
			}
			bad = append(bad, fmt.Sprintf("%s (%s) imports %s (%s) in its %s: %s", p.path, from, imp, to, files, why))
		}
		for _, imp := range p.imports {
			check(imp, false)
		}
		for _, imp := range p.testImports {
			check(imp, true)
		}
	}
	return bad
}

func TestCLIImportsGoOneWay(t *testing.T) {
	for _, pl := range platforms {
		pkgs := listModule(t, pl[0], pl[1])
		// The test must be looking: main imports every command, and
		// every listed package exists.
		var mainImports []string
		have := map[string]bool{}
		for _, p := range pkgs {
			have[p.path] = true
			if p.path == cliMain {
				mainImports = p.imports
			}
		}
		for _, name := range slices.Concat(cliCommands, cliShared) {
			if !have[cliRoot+name] {
				t.Errorf("%s/%s: %s%s is listed here but go list does not know it", pl[0], pl[1], cliRoot, name)
			}
		}
		for _, name := range cliCommands {
			if !slices.Contains(mainImports, cliRoot+name) {
				t.Errorf("%s/%s: %s does not import the command %s%s", pl[0], pl[1], cliMain, cliRoot, name)
			}
		}
		for _, v := range cliViolations(pkgs) {
			t.Errorf("%s/%s: %s", pl[0], pl[1], v)
		}
	}
}

// TestCLIViolations pins the rules on a made-up module, so that a change
// to them cannot make the test above look at nothing.
func TestCLIViolations(t *testing.T) {
	cli := func(name string) string { return cliRoot + name }
	pkgs := []listed{
		{cliMain, []string{cli("pipe"), cli("command"), "fmt"}, []string{cli("clitest")}},
		{cli("pipe"), []string{cli("command"), cli("sharedlimit"), module + "/shape"}, []string{cli("clitest")}},
		{cli("run"), []string{cli("pipe")}, nil},                                      // command → command
		{cli("proxy"), nil, []string{cli("rls")}},                                     // command → command, in a test
		{cli("serve"), []string{cli("command"), cli("proxy")}, nil},                   // shared → command
		{cli("outage"), []string{cli("clitest")}, nil},                                // clitest outside tests
		{cli("metrics"), []string{cliMain}, nil},                                      // anything → main
		{module + "/throttle", []string{module + "/internal/sat", cli("serve")}, nil}, // library → shared
		{cli("newthing"), nil, nil},                                                   // unclassified
	}
	got := cliViolations(pkgs)
	want := []string{
		cli("run") + " (a command) imports " + cli("pipe") + " (a command) in its non-test files: a command never imports another",
		cli("proxy") + " (a command) imports " + cli("rls") + " (a command) in its tests: a command never imports another",
		cli("serve") + " (a shared package of the command line) imports " + cli("proxy") + " (a command) in its non-test files: a shared package never imports a command",
		cli("outage") + " (a shared package of the command line) imports " + cli("clitest") + " (a shared package of the command line) in its non-test files: only tests import it",
		cli("metrics") + " (a shared package of the command line) imports " + cliMain + " (the command line's main) in its non-test files: nothing imports the command line's main",
		module + "/throttle (the library) imports " + cli("serve") + " (a shared package of the command line) in its non-test files: the library never depends on the command line",
		cli("newthing") + " is under internal/cli but neither a command nor a shared package: add it to cliCommands or cliShared",
	}
	if !slices.Equal(got, want) {
		t.Errorf("cliViolations:\n got %q\nwant %q", got, want)
	}
}
