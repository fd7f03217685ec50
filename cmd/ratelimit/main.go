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
// This package only dispatches: each command is a package of its own under
// internal/cli (trace, pipe, run, proxy, rls, rlqs), with one line in the
// commands table below, and what several commands share is a package of its
// own there too (internal/cli/command, serve, outage, metrics, redisflag,
// sharedlimit). A command gets its arguments and the three standard streams
// and returns the exit status: 0 on success, 1 when the work itself failed,
// 2 for a usage error (bad flag, bad argument, a Redis that is set up
// wrong), 128+n when signal n stopped it. Every error is one line on
// standard error: "ratelimit <command>: <what is wrong>".
package main

import (
	"fmt"
	"io"
	"os"
	"runtime/debug"
	"slices"
	"strings"

	"github.com/smoothrate/ratelimit/internal/cli/command"
	"github.com/smoothrate/ratelimit/internal/cli/pipe"
	"github.com/smoothrate/ratelimit/internal/cli/proxy"
	"github.com/smoothrate/ratelimit/internal/cli/rlqs"
	"github.com/smoothrate/ratelimit/internal/cli/rls"
	"github.com/smoothrate/ratelimit/internal/cli/run"
	"github.com/smoothrate/ratelimit/internal/cli/trace"
)

// subcommand is one command: a one-line summary for the usage text and the
// function that runs it.
type subcommand struct {
	summary string
	run     func(args []string, stdin io.Reader, stdout, stderr io.Writer) int
}

// commands is the table of subcommands. Adding a command is adding its
// package under internal/cli, with a Summary and a Run, and one line here.
var commands = map[string]subcommand{
	"trace": {trace.Summary, trace.Run},
	"pipe":  {pipe.Summary, pipe.Run},
	"run":   {run.Summary, run.Run},
	"proxy": {proxy.Summary, proxy.Run},
	"rls":   {rls.Summary, rls.Run},
	"rlqs":  {rlqs.Summary, rlqs.Run},
}

func main() {
	os.Exit(dispatch(os.Args[1:], os.Stdin, os.Stdout, os.Stderr))
}

// dispatch runs the command args[0] names with the rest of args. It is main
// without the process, so that tests can call it in-process.
func dispatch(args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		// The reference's image is started as its binary with no
		// arguments and the configuration in the environment (Envoy
		// Gateway, Istio's and Contour's samples): so is ours.
		if rls.ReferenceEnvironment(os.LookupEnv) {
			return rls.Run(nil, stdin, stdout, stderr)
		}
		usage(stderr)
		return command.ExitUsage
	}
	name, rest := args[0], args[1:]
	switch name {
	case "version", "-version", "--version":
		fmt.Fprintln(stdout, version())
		return command.ExitOK
	case "help", "-h", "-help", "--help":
		if len(rest) == 0 {
			usage(stdout)
			return command.ExitOK
		}
		// "help trace" is "trace -h".
		if c, ok := commands[rest[0]]; ok {
			return c.run([]string{"-h"}, stdin, stdout, stdout)
		}
		fmt.Fprintf(stderr, "ratelimit: unknown command %q\n", rest[0])
		usage(stderr)
		return command.ExitUsage
	}
	c, ok := commands[name]
	if !ok {
		fmt.Fprintf(stderr, "ratelimit: unknown command %q\n", name)
		usage(stderr)
		return command.ExitUsage
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
	fmt.Fprintf(&b, "With no command, in envoyproxy/ratelimit's environment (one of these set:\n%s),\nit runs 'ratelimit rls', as the reference's image does.\n", strings.Join(rls.ReferenceMarkers(), ", "))
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
