// Package clitest holds what the tests of the command line share: the
// ratelimit binary, built once per test process, and the ways they run it
// (to its end, with a time limit, with standard input as bytes), random
// input, and the job script whose runs they count. Only tests import it.
//
// The binary is built with the race detector when the tests run with it:
// the dependencies compiled for the tests then serve the binary too (no
// second compile of gRPC and Envoy's protos), and the binary's own
// goroutines are checked for races as the tests drive it.
package clitest

import (
	"bytes"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/net/http2"

	"github.com/smoothrate/ratelimit/internal/redistest"
)

// mainPackage is the command the tests build.
const mainPackage = "github.com/smoothrate/ratelimit/cmd/ratelimit"

// Main is the TestMain of a package whose tests run the binary: it lets
// the race-built binary exit at once, runs more parallel tests at once
// than there are processors (see waitingParallel) and removes the binary
// after the tests.
func Main(m *testing.M) { main(m, false) }

// waitingParallel is how many of its parallel tests (t.Parallel) a
// package of Main's runs at once per processor, unless -parallel says
// otherwise (go test's default is one per processor). Its tests mostly
// wait: on the processes they started, on a reload's next look, on a
// drain window, on a schedule of arrivals.
const waitingParallel = 4

// MainWithRuntimeDir is Main for the packages whose tests run pipes, and
// kill some: the pipes put their control sockets in a runtime directory
// ($XDG_RUNTIME_DIR) of the tests' own, removed after the tests with the
// sockets of the pipes that were killed, which could not remove their own.
func MainWithRuntimeDir(m *testing.M) { main(m, true) }

func main(m *testing.M, runtimeDir bool) {
	if raceBuild {
		// A race-built program sleeps a second at exit by default (for
		// late reports from other goroutines); the binary's runs here
		// are many and short. A GORACE of the caller's still wins.
		os.Setenv("GORACE", strings.TrimSpace("atexit_sleep_ms=0 "+os.Getenv("GORACE")))
	}
	flag.Parse()
	given := false
	flag.Visit(func(f *flag.Flag) { given = given || f.Name == "test.parallel" })
	if p := flag.Lookup("test.parallel"); p != nil && !given {
		_ = p.Value.Set(strconv.Itoa(waitingParallel * runtime.GOMAXPROCS(0)))
	}
	rtDir := ""
	if runtimeDir {
		if dir, err := os.MkdirTemp("", "ratelimit-runtime-"); err == nil { // private: 0700
			rtDir = dir
			os.Setenv("XDG_RUNTIME_DIR", dir)
		}
	}
	code := m.Run()
	if built.dir != "" {
		os.RemoveAll(built.dir)
	}
	if rtDir != "" {
		os.RemoveAll(rtDir)
	}
	os.Exit(code)
}

// Binary compiles the command, once per test process, so that the tests
// exercise exactly what a user runs: flag parsing, exit status and output
// streams included.
//
// The test processes of one go test (a process per package, several at
// once) share one link: each runs go build -o on the same file of a
// directory in $TMPDIR named after the checkout and the build's kind,
// one at a time under a lock on that directory, and takes a hard link to
// the result into a directory of its own. go build -o relinks only when
// the file is not what the sources and flags build (it compares the build
// ID the file carries with the inputs'), so the first process links and
// the others find it up to date; what a process runs is the snapshot it
// linked to, which a later build for changed sources replaces with a new
// file, never in place. Where no such lock is had (buildShared reports false),
// each process builds its own binary.
func Binary(t *testing.T) string {
	t.Helper()
	built.once.Do(func() {
		goTool, err := exec.LookPath("go")
		if err != nil {
			built.err = fmt.Errorf("the go tool is needed to build the binary: %v", err)
			return
		}
		if built.dir, err = os.MkdirTemp("", "ratelimit-bin-"); err != nil {
			built.err = err
			return
		}
		built.bin = filepath.Join(built.dir, "ratelimit")
		shared, err := buildShared(goTool, built.bin)
		if shared || err != nil {
			built.err = err
			return
		}
		built.err = goBuild(goTool, built.bin)
	})
	if built.err != nil {
		t.Fatal(built.err)
	}
	return built.bin
}

// goBuild builds the command into out, with the race detector when the
// tests run with it.
func goBuild(goTool, out string) error {
	args := []string{"build", "-o", out}
	if raceBuild {
		args = append(args, "-race")
	}
	if b, err := exec.Command(goTool, append(args, mainPackage)...).CombinedOutput(); err != nil {
		return fmt.Errorf("go build: %v\n%s", err, b)
	}
	return nil
}

// sharedDir is the directory where the test processes of this checkout
// share the binary of this kind (race or not, GOOS and GOARCH): one name
// per checkout, so that two checkouts tested at once do not relink over
// each other's. The name only spares links; whether the file there is up
// to date is go build's to decide. gomod is the checkout's go.mod, which
// the directory records so that it can be removed once the checkout is
// gone (pruneShared).
func sharedDir(goTool string) (dir, gomod string, err error) {
	out, err := exec.Command(goTool, "env", "GOMOD").Output()
	if err != nil {
		return "", "", fmt.Errorf("go env GOMOD: %v", err)
	}
	gomod = string(bytes.TrimSpace(out))
	sum := sha256.Sum256(fmt.Appendf(nil, "%s\x00race=%v\x00%s/%s", gomod, raceBuild, runtime.GOOS, runtime.GOARCH))
	return filepath.Join(os.TempDir(), fmt.Sprintf("ratelimit-clitest-%d", os.Getuid()), hex.EncodeToString(sum[:8])), gomod, nil
}

// built is the binary Binary made, removed by Main.
var built struct {
	once     sync.Once
	dir, bin string
	err      error
}

// runLimit bounds Run and Exec: a command that should have exited but
// serves instead (a server that should have refused to start) is killed
// and fails its test, rather than holding the test binary until go test's
// own timeout, which leaves the process running.
const runLimit = 2 * time.Minute

// bounded runs cmd, killing it after limit; exited is false if it had to.
func bounded(cmd *exec.Cmd, limit time.Duration) (exited bool, err error) {
	if err := cmd.Start(); err != nil {
		return true, err
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	select {
	case err := <-done:
		return true, err
	case <-time.After(limit):
		_ = cmd.Process.Kill()
		return false, <-done
	}
}

// Run runs bin with args and stdin and returns stdout, stderr and the exit
// status. One still running after runLimit is killed and fails the test.
func Run(t *testing.T, bin, stdin string, args ...string) (string, string, int) {
	t.Helper()
	cmd := exec.Command(bin, args...)
	cmd.Stdin = strings.NewReader(stdin)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	exited, err := bounded(cmd, runLimit)
	if !exited {
		t.Fatalf("%v still running after %v; stderr: %s", args, runLimit, stderr.String())
	}
	code := 0
	if err != nil {
		var exit *exec.ExitError
		if !errors.As(err, &exit) {
			t.Fatalf("running %v: %v", args, err)
		}
		code = exit.ExitCode()
	}
	return stdout.String(), stderr.String(), code
}

// Exec runs bin with args, stdin as given, in dir ("" for the test's), and
// returns stdout, stderr, the exit status and the wall time the process
// took. One still running after runLimit is killed and fails the test.
func Exec(t *testing.T, bin string, stdin []byte, dir string, args ...string) (stdout []byte, stderr string, code int, took time.Duration) {
	t.Helper()
	cmd := exec.Command(bin, args...)
	cmd.Stdin = bytes.NewReader(stdin)
	cmd.Dir = dir
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	start := time.Now()
	exited, err := bounded(cmd, runLimit)
	took = time.Since(start)
	if !exited {
		t.Fatalf("%v still running after %v; stderr: %s", args, runLimit, errb.String())
	}
	if err != nil {
		var exit *exec.ExitError
		if !errors.As(err, &exit) {
			t.Fatalf("running %v: %v", args, err)
		}
		code = exit.ExitCode()
	}
	return out.Bytes(), errb.String(), code, took
}

// RunToExit runs bin with args and more environment variables, a process
// expected to exit by itself (a server that refuses to start), and returns
// its standard error and exit status. One still running after limit is
// killed and fails the test.
func RunToExit(t *testing.T, bin string, env []string, limit time.Duration, args ...string) (stderr string, code int) {
	t.Helper()
	cmd := exec.Command(bin, args...)
	cmd.Env = append(os.Environ(), env...)
	var out strings.Builder
	cmd.Stderr = &out
	exited, err := bounded(cmd, limit)
	if !exited {
		t.Fatalf("%v still running after %v; stderr: %s", args, limit, out.String())
	}
	var exit *exec.ExitError
	if errors.As(err, &exit) {
		return out.String(), exit.ExitCode()
	}
	if err != nil {
		t.Fatal(err)
	}
	return out.String(), 0
}

// RandomInput is n random bytes.
func RandomInput(t *testing.T, n int) []byte {
	t.Helper()
	b := make([]byte, n)
	if _, err := rand.Read(b); err != nil {
		t.Fatal(err)
	}
	return b
}

// RedisURL is the URL of s's database 0.
func RedisURL(s *redistest.Server) string { return "redis://" + s.Addr() + "/0" }

// recordScript is a job that records what it ran: its arguments, one per
// line, in a file named after its first argument; it fails with status 3
// when that argument is "bad".
const recordScript = `#!/bin/sh
printf '%s\n' "$@" > "$1.ran"
[ "$1" != bad ] || exit 3
`

// ScriptDir is a new directory holding rec.sh, a job that records what it
// ran (read with Recorded) and fails with status 3 when its first argument
// is "bad".
func ScriptDir(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "rec.sh"), []byte(recordScript), 0o755); err != nil {
		t.Fatal(err)
	}
	return dir
}

// Recorded returns the files the record script wrote in dir, name → content.
func Recorded(t *testing.T, dir string) map[string]string {
	t.Helper()
	files, err := filepath.Glob(filepath.Join(dir, "*.ran"))
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]string{}
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		got[strings.TrimSuffix(filepath.Base(f), ".ran")] = string(b)
	}
	return got
}

// LockedBuffer is a bytes.Buffer that one goroutine (a process's output,
// a server's log) writes while the test reads it.
type LockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *LockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *LockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// Copying is a ratelimit process that copies its input to its standard
// output, which the test keeps as it comes: a pipe it acts on while it
// copies. (A serving command is a Proc.)
type Copying struct {
	Cmd            *exec.Cmd
	Stdout, Stderr LockedBuffer
	ended          chan error // cmd.Wait's result
}

// StartCopying starts bin with args, stdin as given and more environment
// variables, and returns once the first byte of its standard output came
// (it fails the test if none comes within limit). The process is killed at
// the end of the test if it is still running.
func StartCopying(t *testing.T, bin string, env []string, stdin []byte, limit time.Duration, args ...string) *Copying {
	t.Helper()
	s := &Copying{Cmd: exec.Command(bin, args...), ended: make(chan error, 1)}
	s.Cmd.Env = append(os.Environ(), env...)
	s.Cmd.Stdin = bytes.NewReader(stdin)
	s.Cmd.Stderr = &s.Stderr
	first := make(chan struct{})
	s.Cmd.Stdout = &firstWrite{w: &s.Stdout, first: first}
	if err := s.Cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Cmd.Process.Kill() })
	go func() { s.ended <- s.Cmd.Wait() }()
	select {
	case <-first:
	case err := <-s.ended:
		s.ended <- err
		t.Fatalf("%v: exited without output (%v); stderr %q", args, err, s.Stderr.String())
	case <-time.After(limit):
		t.Fatalf("%v: no output within %v; stderr %q", args, limit, s.Stderr.String())
	}
	return s
}

// firstWrite closes first at the first write of at least a byte.
type firstWrite struct {
	w     io.Writer
	first chan struct{}
	once  sync.Once
}

func (f *firstWrite) Write(p []byte) (int, error) {
	n, err := f.w.Write(p)
	if n > 0 {
		f.once.Do(func() { close(f.first) })
	}
	return n, err
}

// Finish waits, at most limit, for the process to end, and returns its exit
// status. One still running is killed and fails the test.
func (s *Copying) Finish(t *testing.T, limit time.Duration) (code int) {
	t.Helper()
	select {
	case err := <-s.ended:
		var exit *exec.ExitError
		if errors.As(err, &exit) {
			return exit.ExitCode()
		} else if err != nil {
			t.Fatalf("%v: %v", s.Cmd.Args[1:], err)
		}
		return 0
	case <-time.After(limit):
		_ = s.Cmd.Process.Kill()
		t.Fatalf("%v still running after %v, %d bytes out; stderr %q", s.Cmd.Args[1:], limit, len(s.Stdout.String()), s.Stderr.String())
		return -1
	}
}

// RuntimeDir is the environment of a process whose runtime directory
// ($XDG_RUNTIME_DIR, where a pipe puts its control socket) is a new one of
// the test's, private to the user as the real one is: tests never meet a
// user's pipes.
func RuntimeDir(t *testing.T) []string {
	t.Helper()
	dir := t.TempDir()
	if err := os.Chmod(dir, 0o700); err != nil { // t.TempDir's are open to all
		t.Fatal(err)
	}
	return []string{"XDG_RUNTIME_DIR=" + dir}
}

// DocQuote returns the message that doc (a file of the module, such as
// "docs/http.md") quotes with the line that starts with prefix, in a code
// block or `in backquotes`, with each pair of replacements applied (the
// doc's address for the test's server, say): what the command must print,
// for a test to compare with what it does print. The doc must hold exactly
// one such line.
func DocQuote(t *testing.T, doc, prefix string, replacements ...string) string {
	t.Helper()
	root, err := exec.Command("go", "env", "GOMOD").Output()
	if err != nil {
		t.Fatalf("go env GOMOD: %v", err)
	}
	text, err := os.ReadFile(filepath.Join(filepath.Dir(strings.TrimSpace(string(root))), filepath.FromSlash(doc)))
	if err != nil {
		t.Fatal(err)
	}
	var found []string
	for line := range strings.Lines(string(text)) {
		line = strings.TrimRight(line, "\n")
		if quoted, ok := strings.CutPrefix(line, "`"); ok {
			line, _, _ = strings.Cut(quoted, "`")
		}
		if strings.HasPrefix(line, prefix) {
			found = append(found, line)
		}
	}
	if len(found) != 1 {
		t.Fatalf("%s: %d lines start with %q, want 1: %q", doc, len(found), prefix, found)
	}
	return strings.NewReplacer(replacements...).Replace(found[0])
}

// HoldConns opens n connections as one client hogging a server would, 50
// dials at a time: the i-th to addr(i), with first(i) written on it once
// open (the start of a request; "" for nothing). A dial that fails (the
// server's backlog full) holds nothing and is left out. The connections
// stay open until the test ends.
func HoldConns(t *testing.T, n int, addr func(i int) string, first func(i int) string) {
	t.Helper()
	conns := make([]net.Conn, n)
	t.Cleanup(func() {
		for _, c := range conns {
			if c != nil {
				c.Close()
			}
		}
	})
	var wg sync.WaitGroup
	var next atomic.Int64
	for range 50 {
		wg.Go(func() {
			for i := int(next.Add(1) - 1); i < n; i = int(next.Add(1) - 1) {
				c, err := net.DialTimeout("tcp", addr(i), 15*time.Second)
				if err != nil {
					continue
				}
				conns[i] = c
				if s := first(i); s != "" {
					_, _ = io.WriteString(c, s)
				}
			}
		})
	}
	wg.Wait()
}

// MaxStreams reads the HTTP/2 settings a gRPC server at addr (plain text)
// sends first, and returns its SETTINGS_MAX_CONCURRENT_STREAMS and whether
// it sent one.
func MaxStreams(t *testing.T, addr string) (uint32, bool) {
	t.Helper()
	conn, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	if err := conn.SetDeadline(time.Now().Add(30 * time.Second)); err != nil {
		t.Fatal(err)
	}
	if _, err := io.WriteString(conn, http2.ClientPreface); err != nil {
		t.Fatal(err)
	}
	fr := http2.NewFramer(conn, conn)
	if err := fr.WriteSettings(); err != nil {
		t.Fatal(err)
	}
	f, err := fr.ReadFrame()
	if err != nil {
		t.Fatal(err)
	}
	settings, ok := f.(*http2.SettingsFrame)
	if !ok {
		t.Fatalf("%s: the server's first frame is %v, not its settings", addr, f)
	}
	return settings.Value(http2.SettingMaxConcurrentStreams)
}
