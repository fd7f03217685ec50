package main

import (
	"bytes"
	"strings"
	"testing"

	"github.com/smoothrate/ratelimit/internal/cli/clitest"
)

func TestMain(m *testing.M) { clitest.Main(m) }

// TestDispatch: an unknown command or none is a usage error (exit 2) with
// the list of commands on stderr and nothing else done; help lists the
// commands, and "help COMMAND" prints a command's usage on stdout.
func TestDispatch(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		args []string
		msg  string // a piece of the message on stderr
	}{
		{"unknown command", []string{"trcae"}, `unknown command "trcae"`},
		{"no command", nil, "Usage: ratelimit"},
	} {
		var stdout, stderr bytes.Buffer
		code := dispatch(tc.args, strings.NewReader(""), &stdout, &stderr)
		if code != 2 {
			t.Errorf("%s: exit status %d, want 2", tc.name, code)
		}
		if !strings.Contains(stderr.String(), tc.msg) {
			t.Errorf("%s: stderr %q does not mention %q", tc.name, stderr.String(), tc.msg)
		}
		if strings.Contains(stdout.String(), "time(s)") {
			t.Errorf("%s: a table was printed despite the error:\n%s", tc.name, stdout.String())
		}
	}

	var stdout, stderr bytes.Buffer
	if code := dispatch([]string{"help"}, nil, &stdout, &stderr); code != 0 || !strings.Contains(stdout.String(), "trace") {
		t.Errorf("help: exit %d, %q", code, stdout.String())
	}
	stdout.Reset()
	if code := dispatch([]string{"help", "trace"}, nil, &stdout, &stderr); code != 0 || !strings.Contains(stdout.String(), "acquire:N") || !strings.Contains(stdout.String(), "-warmup") {
		t.Errorf("help trace: exit %d, help text:\n%s", code, stdout.String())
	}
}

// TestExitStatus: the process exits with the status dispatch returns, as
// the commands' in-process tests assume.
func TestExitStatus(t *testing.T) {
	t.Parallel()
	bin := clitest.Binary(t)
	for _, tc := range []struct {
		args   []string
		code   int
		stderr string
	}{
		{[]string{"trace", "--qps", "0"}, 2, "ratelimit trace: "},
		{[]string{"trcae"}, 2, `ratelimit: unknown command "trcae"`},
		{[]string{"trace", "acquire"}, 0, ""},
	} {
		_, stderr, code := clitest.Run(t, bin, "", tc.args...)
		if code != tc.code || !strings.HasPrefix(stderr, tc.stderr) || tc.stderr == "" && stderr != "" {
			t.Errorf("%q: status %d, stderr %q; want %d and %q", tc.args, code, stderr, tc.code, tc.stderr)
		}
	}
}
