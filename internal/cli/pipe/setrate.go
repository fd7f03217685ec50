package pipe

import (
	"flag"
	"fmt"
	"io"
	"os"
	"strconv"

	"github.com/smoothrate/ratelimit/internal/cli/command"
	"github.com/smoothrate/ratelimit/shape"
)

// remote is `ratelimit pipe -R PID RATE`: it asks the running pipe PID to go
// at RATE and prints what changed.
func remote(fs *flag.FlagSet, pidS, rateS string, words []string, stdout, stderr io.Writer) int {
	const prefix = "ratelimit pipe"
	for name := range command.Given(fs) {
		if name != "remote" && name != "R" && name != "rate" && name != "L" {
			dash := "--"
			if len(name) == 1 {
				dash = "-"
			}
			fmt.Fprintf(stderr, "%s: -R changes only the rate of a running pipe: %s%s does not go with it\n", prefix, dash, name)
			return command.ExitUsage
		}
	}
	pid, err := strconv.Atoi(pidS)
	if err != nil || pid <= 0 {
		fmt.Fprintf(stderr, "%s: -R %q: want the process ID of a running pipe, e.g. -R 4242\n", prefix, pidS)
		return command.ExitUsage
	}
	rate, _, err := rateFrom(rateS, words)
	if err != nil {
		fmt.Fprintf(stderr, "%s: -R %d: %v\n", prefix, pid, err)
		return command.ExitUsage
	}
	answer, status := requestRate(pid, rate)
	if status != command.ExitOK {
		fmt.Fprintf(stderr, "%s: -R %d: %s\n", prefix, pid, answer)
		return status
	}
	fmt.Fprintln(stdout, answer)
	return command.ExitOK
}

// retune is what the control socket does with a new rate: check it as the
// command line's, then change the limiter's (sharedName: the limit shared
// through Redis, "" for a local one) and say what changed.
func (c pipeConfig) retune(tuned *retunable, sharedName string) retuneFunc {
	pid := os.Getpid()
	return func(rate float64) (string, error) {
		if err := c.checkSlowest(rate, strconv.FormatFloat(rate, 'g', -1, 64)); err != nil {
			return "", badRate{err}
		}
		old, err := tuned.setRate(rate)
		if err != nil {
			return "", fmt.Errorf("the rate stays %s: %w", shape.FormatRate(old), err)
		}
		if sharedName != "" {
			return fmt.Sprintf("the limit %q that process %d shares through Redis is now %s, for every process that shares it (was %s)",
				sharedName, pid, shape.FormatRate(rate), shape.FormatRate(old)), nil
		}
		return fmt.Sprintf("process %d now copies at %s (was %s)", pid, shape.FormatRate(rate), shape.FormatRate(old)), nil
	}
}
