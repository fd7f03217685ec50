// Command ratelimit is the command-line companion of the ratelimit module:
// it shows what a limiter does, without writing a program.
//
// Usage:
//
//	ratelimit <command> [flags] [arguments]
//	ratelimit help               # the list of commands
//	ratelimit help <command>     # a command's flags and arguments
//	ratelimit --version          # the module version it was built from
//
// For example, "ratelimit trace --warmup 2s" prints the schedule of a
// warming-up limiter at 4 permits per second on a fake clock.
//
// Each command lives in its own file and registers itself with one line in
// the commands table below. A command gets its arguments and the three
// standard streams and returns the exit status: 0 on success, 1 when the work
// itself failed, 2 for a usage error (bad flag, bad argument, a Redis that
// is set up wrong), 128+n when signal n stopped it. Every error is one line
// on standard error: "ratelimit <command>: <what is wrong>".
package main

import (
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"runtime/debug"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
)

// command is one subcommand: a one-line summary for the usage text and the
// function that runs it.
type command struct {
	summary string
	run     func(args []string, stdin io.Reader, stdout, stderr io.Writer) int
}

// commands is the table of subcommands. Adding a command is adding a file
// with its run function and one line here.
var commands = map[string]command{
	"trace": {"replay acquires, sleeps and rate changes on a fake clock and print the schedule", runTrace},
	"pipe":  {"copy standard input to standard output at a given rate (500k, 1MiB/s, 2Gbit)", runPipe},
	"run":   {"run a command per input line, like xargs, at a given rate and parallelism", runJobs},
	"proxy": {"serve a rate-limiting reverse proxy in front of an HTTP service", runProxy},
	"rls":   {"serve Envoy's global rate limit service (envoyproxy/ratelimit's configuration, memory or Redis)", runRLS},
}

// Exit statuses shared by every command.
const (
	exitOK    = 0
	exitFail  = 1
	exitUsage = 2
)

func main() {
	os.Exit(run(os.Args[1:], os.Stdin, os.Stdout, os.Stderr))
}

// run dispatches to a command. It is main without the process, so that tests
// can call it in-process.
func run(args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		usage(stderr)
		return exitUsage
	}
	name, rest := args[0], args[1:]
	switch name {
	case "version", "-version", "--version":
		fmt.Fprintln(stdout, version())
		return exitOK
	case "help", "-h", "-help", "--help":
		if len(rest) == 0 {
			usage(stdout)
			return exitOK
		}
		// "help trace" is "trace -h".
		if c, ok := commands[rest[0]]; ok {
			return c.run([]string{"-h"}, stdin, stdout, stdout)
		}
		fmt.Fprintf(stderr, "ratelimit: unknown command %q\n", rest[0])
		usage(stderr)
		return exitUsage
	}
	c, ok := commands[name]
	if !ok {
		fmt.Fprintf(stderr, "ratelimit: unknown command %q\n", name)
		usage(stderr)
		return exitUsage
	}
	return c.run(rest, stdin, stdout, stderr)
}

func usage(w io.Writer) {
	var b strings.Builder
	b.WriteString("Usage: ratelimit <command> [flags] [arguments]\n\nCommands:\n")
	names := make([]string, 0, len(commands))
	for n := range commands {
		names = append(names, n)
	}
	slices.Sort(names)
	width := 0
	for _, n := range names {
		width = max(width, len(n))
	}
	for _, n := range names {
		fmt.Fprintf(&b, "  %-*s  %s\n", width, n, commands[n].summary)
	}
	b.WriteString("\nRun 'ratelimit help <command>' for a command's flags and arguments.\n")
	io.WriteString(w, b.String())
}

// version is the module version the binary was built from, as the go tool
// recorded it: a tag (v1.2.0) for "go install ...@v1.2.0", a pseudo-version
// or "(devel)" for a build in a checkout, followed by the VCS revision when
// it was recorded.
func version() string {
	info, ok := debug.ReadBuildInfo()
	if !ok {
		return "ratelimit (no build information)"
	}
	s := "ratelimit " + info.Main.Path + " " + info.Main.Version
	for _, kv := range info.Settings {
		if kv.Key == "vcs.revision" {
			s += " " + kv.Value
		}
	}
	return s + " " + info.GoVersion
}

// parseFlags parses a command's flags the same way for every command: help
// (-h) prints the command's usage on stdout and exits 0; a bad flag prints
// one line, "ratelimit <command>: <what is wrong>", on stderr and exits 2.
// With interspersed, flags may come among the words (parseInterspersed);
// otherwise they end at the first word. It returns the words, or done and
// the status to exit with.
func parseFlags(fs *flag.FlagSet, args []string, interspersed bool, stdout, stderr io.Writer) (words []string, done bool, status int) {
	usage := fs.Usage
	fs.SetOutput(io.Discard)
	fs.Usage = func() {}
	var err error
	if interspersed {
		words, err = parseInterspersed(fs, args)
	} else if err = fs.Parse(args); err == nil {
		words = fs.Args()
	}
	switch {
	case err == flag.ErrHelp:
		fs.SetOutput(stdout)
		usage()
		return nil, true, exitOK
	case err != nil:
		fmt.Fprintf(stderr, "ratelimit %s: %v (see ratelimit help %s)\n", fs.Name(), err, fs.Name())
		return nil, true, exitUsage
	}
	fs.SetOutput(stderr)
	return words, false, exitOK
}

// floatFlag is a flag.Value holding a number read by one of the command
// line's parsers (units.Number, units.JobRate) rather than strconv's, so
// that every flag reads numbers as the arguments do: 1e3 yes, NaN and 0x10
// no.
type floatFlag struct {
	p     *float64
	parse func(string) (float64, error)
}

func (f floatFlag) String() string {
	if f.p == nil { // the flag package's zero value, for its defaults
		return "0"
	}
	return strconv.FormatFloat(*f.p, 'g', -1, 64)
}

func (f floatFlag) Set(s string) error {
	v, err := f.parse(s)
	if err != nil {
		return err
	}
	*f.p = v
	return nil
}

// exitOnSignal makes SIGINT and SIGTERM run cleanup and end the process
// with status 128 + the signal's number, as a shell reports a process the
// signal killed; for commands whose work cannot stop by itself (pipe, in
// the middle of a copy). cleanup runs at most once, whether through the
// signal or through the returned function, which also stops the watch.
func exitOnSignal(cleanup func()) (stop func()) {
	once := sync.OnceFunc(cleanup)
	ch := make(chan os.Signal, 1)
	signal.Notify(ch, os.Interrupt, syscall.SIGTERM)
	done := make(chan struct{})
	go func() {
		select {
		case sig := <-ch:
			once()
			os.Exit(signalStatus(sig))
		case <-done:
		}
	}()
	return func() {
		signal.Stop(ch)
		close(done)
		once()
	}
}

// signalStatus is the exit status of a process stopped by sig: 128 + its
// number (130 for SIGINT).
func signalStatus(sig os.Signal) int {
	if n, ok := sig.(syscall.Signal); ok {
		return 128 + int(n)
	}
	return 128 + int(syscall.SIGINT)
}

// parseInterspersed parses flags that may appear anywhere among the
// positional words (the flag package stops at the first word). A "--" ends
// the flags.
// isNegativeNumber reports whether s is a minus sign followed by what
// starts a number ("-5k", "-.5", "-1e3"): never a flag name.
func isNegativeNumber(s string) bool {
	return len(s) > 1 && s[0] == '-' && (s[1] >= '0' && s[1] <= '9' || s[1] == '.')
}

func parseInterspersed(fs *flag.FlagSet, args []string) ([]string, error) {
	var words []string
	for {
		if err := fs.Parse(args); err != nil {
			// A negative number ("-5k") is a word, to be refused by what
			// reads it ("a rate must be positive"), not an unknown flag.
			// The flag package has consumed it: it is the argument just
			// before what is left.
			rest := fs.Args()
			if i := len(args) - len(rest) - 1; i >= 0 && isNegativeNumber(args[i]) && strings.HasSuffix(err.Error(), args[i]) {
				words = append(words, args[i])
				args = rest
				continue
			}
			return nil, err
		}
		rest := fs.Args()
		if len(rest) == 0 {
			return words, nil
		}
		if consumed := len(args) - len(rest); consumed > 0 && args[consumed-1] == "--" {
			return append(words, rest...), nil
		}
		words = append(words, rest[0])
		args = rest[1:]
	}
}
