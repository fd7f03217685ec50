// Package command holds what every command of the ratelimit command line
// shares: its exit statuses, the one way its flags are read (flags among the
// words, help on standard output, a bad flag as one line on standard error),
// the flag values that read numbers as the arguments do, and the exit status
// of a command a signal stopped.
//
// Every error a command reports is one line on standard error,
// "ratelimit <command>: <what is wrong>", and its exit status says what
// kind of failure it was: ExitFail when the work failed, ExitUsage when what
// was asked cannot be done as asked.
package command

import (
	"flag"
	"fmt"
	"io"
	"strconv"
	"strings"

	"github.com/smoothrate/ratelimit/internal/units"
)

// Exit statuses shared by every command.
const (
	ExitOK    = 0
	ExitFail  = 1 // the work itself failed
	ExitUsage = 2 // a bad flag, a bad argument, a Redis that is set up wrong
)

// ParseFlags parses a command's flags the same way for every command: help
// (-h) prints the command's usage on stdout and exits 0; a bad flag prints
// one line, "ratelimit <command>: <what is wrong>", on stderr and exits 2.
// With interspersed, flags may come among the words (ParseInterspersed);
// otherwise they end at the first word. It returns the words, or done and
// the status to exit with.
func ParseFlags(fs *flag.FlagSet, args []string, interspersed bool, stdout, stderr io.Writer) (words []string, done bool, status int) {
	usage := fs.Usage
	fs.SetOutput(io.Discard)
	fs.Usage = func() {}
	var err error
	if interspersed {
		words, err = ParseInterspersed(fs, args)
	} else if err = fs.Parse(args); err == nil {
		words = fs.Args()
	}
	switch {
	case err == flag.ErrHelp:
		fs.SetOutput(stdout)
		usage()
		return nil, true, ExitOK
	case err != nil:
		fmt.Fprintf(stderr, "ratelimit %s: %v (see ratelimit help %s)\n", fs.Name(), err, fs.Name())
		return nil, true, ExitUsage
	}
	fs.SetOutput(stderr)
	return words, false, ExitOK
}

// ParseInterspersed parses flags that may appear anywhere among the
// positional words (the flag package stops at the first word). A "--" ends
// the flags.
func ParseInterspersed(fs *flag.FlagSet, args []string) ([]string, error) {
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

// isNegativeNumber reports whether s is a minus sign followed by what
// starts a number ("-5k", "-.5", "-1e3"): never a flag name.
func isNegativeNumber(s string) bool {
	return len(s) > 1 && s[0] == '-' && (s[1] >= '0' && s[1] <= '9' || s[1] == '.')
}

// Given reports which flags the command line set.
func Given(fs *flag.FlagSet) map[string]bool {
	set := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { set[f.Name] = true })
	return set
}

// Float is a flag.Value holding a number read by one of the command line's
// parsers (units.Number, units.JobRate) rather than strconv's, so that
// every flag reads numbers as the arguments do: 1e3 yes, NaN and 0x10 no.
type Float struct {
	P     *float64
	Parse func(string) (float64, error)
}

func (f Float) String() string {
	if f.P == nil { // the flag package's zero value, for its defaults
		return "0"
	}
	return strconv.FormatFloat(*f.P, 'g', -1, 64)
}

func (f Float) Set(s string) error {
	v, err := f.Parse(s)
	if err != nil {
		return err
	}
	*f.P = v
	return nil
}

// Size is a flag.Value holding a byte count read as the command line reads
// sizes (units.Size: "32KiB", "1MB", "4096"), refused outside [Min, Max].
type Size struct {
	P        *int64
	Min, Max int64
}

func (s Size) String() string {
	if s.P == nil { // the flag package's zero value, for its defaults
		return "0"
	}
	return units.SizeText(*s.P)
}

func (s Size) Set(v string) error {
	n, err := units.Size(v)
	if err != nil {
		return err
	}
	if n < s.Min || n > s.Max {
		return fmt.Errorf("want between %s and %s", units.SizeText(s.Min), units.SizeText(s.Max))
	}
	*s.P = n
	return nil
}

// Plural is one or many, as n says.
func Plural(n int64, one, many string) string {
	if n == 1 {
		return one
	}
	return many
}
