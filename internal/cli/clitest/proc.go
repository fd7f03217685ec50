package clitest

import (
	"bufio"
	"errors"
	"io"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"
)

// Proc is a serving command the test started (Start): the first line it
// wrote on standard output (its banner, naming the addresses it serves
// on), its standard error as it grows, and its exit status once it ends.
// The test's cleanup kills it if it still runs.
type Proc struct {
	Cmd    *exec.Cmd
	Banner string
	Stderr LockedBuffer

	exited chan struct{}
	status int
}

// Start runs bin with args and the extra environment env, and returns once
// the process has written its first line on standard output. A process
// that exits first, or writes none within limit, fails the test.
func Start(t *testing.T, bin string, env []string, limit time.Duration, args ...string) *Proc {
	t.Helper()
	cmd := exec.Command(bin, args...)
	cmd.Env = append(os.Environ(), env...)
	return Attach(t, cmd, limit)
}

// Attach is Start for a command the test made itself (the binary under an
// environment of its own, or in a container): it starts cmd and returns
// once it has written its first line on standard output.
func Attach(t *testing.T, cmd *exec.Cmd, limit time.Duration) *Proc {
	t.Helper()
	args := cmd.Args[1:]
	p := &Proc{Cmd: cmd, exited: make(chan struct{})}
	p.Cmd.Stderr = &p.Stderr
	out, err := p.Cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := p.Cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() {
		err := p.Cmd.Wait()
		if exit, ok := errors.AsType[*exec.ExitError](err); ok {
			p.status = exit.ExitCode()
			if ws, ok := exit.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
				p.status = 128 + int(ws.Signal())
			}
		}
		close(p.exited)
	}()
	t.Cleanup(func() {
		select {
		case <-p.exited:
		default:
			_ = p.Cmd.Process.Kill()
			<-p.exited
		}
	})
	line := make(chan string, 1)
	go func() {
		r := bufio.NewReader(out)
		s, _ := r.ReadString('\n')
		line <- s
		_, _ = io.Copy(io.Discard, r)
	}()
	select {
	case s := <-line:
		if s == "" {
			<-p.exited
			t.Fatalf("%q exited with status %d before its first line; stderr: %s", args, p.status, p.Stderr.String())
		}
		p.Banner = strings.TrimSuffix(s, "\n")
	case <-time.After(limit):
		t.Fatalf("%q: no line on standard output within %v; stderr: %s", args, limit, p.Stderr.String())
	}
	return p
}

// Exited is closed once the process has exited; Status is then its exit
// status.
func (p *Proc) Exited() <-chan struct{} { return p.exited }

// Status is the exit status of a process that has exited (Exited).
func (p *Proc) Status() int { return p.status }

// Signal sends sig to the process.
func (p *Proc) Signal(t *testing.T, sig os.Signal) {
	t.Helper()
	if err := p.Cmd.Process.Signal(sig); err != nil {
		t.Fatalf("signal %v: %v", sig, err)
	}
}

// Wait waits for the process to exit, at most limit, and returns its exit
// status (128 + n when signal n killed it). One still running fails the
// test.
func (p *Proc) Wait(t *testing.T, limit time.Duration) int {
	t.Helper()
	select {
	case <-p.exited:
		return p.status
	case <-time.After(limit):
		t.Fatalf("%q still running %v after it was told to stop; stderr: %s", p.Cmd.Args[1:], limit, p.Stderr.String())
		return -1
	}
}

// WaitStderr waits, at most limit, until the process has written want on
// its standard error, and reports whether it did; the test fails if not.
func (p *Proc) WaitStderr(t *testing.T, want string, limit time.Duration) bool {
	t.Helper()
	deadline := time.Now().Add(limit)
	for !strings.Contains(p.Stderr.String(), want) {
		if time.Now().After(deadline) {
			t.Errorf("%q never written within %v; stderr: %s", want, limit, p.Stderr.String())
			return false
		}
		time.Sleep(10 * time.Millisecond) // a poll, bounded by the deadline
	}
	return true
}
