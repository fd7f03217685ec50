package run

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/smoothrate/ratelimit/internal/cli/clitest"
	"github.com/smoothrate/ratelimit/internal/cli/command"
)

func TestMain(m *testing.M) { clitest.Main(m) }

func TestRunBinary(t *testing.T) {
	t.Parallel()
	bin := clitest.Binary(t)

	t.Run("stdin jobs with {}", func(t *testing.T) {
		dir := clitest.ScriptDir(t)
		var in strings.Builder
		want := map[string]string{}
		for i := range 30 {
			job := fmt.Sprintf("job%02d", i)
			fmt.Fprintf(&in, "%s\n", job)
			if i%10 == 0 {
				in.WriteString("\n  \r\n") // blank lines are skipped
			}
			want[job] = job + "\nx-" + job + "-y\n"
		}
		_, stderr, code, took := clitest.Exec(t, bin, []byte(in.String()), dir,
			"run", "--rate", "1000/s", "--parallel", "3", "--", "sh", "rec.sh", "{}", "x-{}-y")
		if code != 0 || stderr != "" {
			t.Fatalf("exit %d, stderr %q", code, stderr)
		}
		if got := clitest.Recorded(t, dir); !maps.Equal(got, want) {
			t.Errorf("ran %v\nwant %v", got, want)
		}
		// 30 starts at 1000/s from an empty limiter with a burst of one
		// job cannot take less than 29 intervals minus that one.
		if min := 28 * time.Millisecond; took < min {
			t.Errorf("30 jobs at 1000/s took %v, less than %v: not limited", took, min)
		}
	})

	t.Run("jobs after ::: are appended", func(t *testing.T) {
		dir := clitest.ScriptDir(t)
		stdout, stderr, code, _ := clitest.Exec(t, bin, nil, dir, "run", "--rate", "inf", "-P", "4", "sh", "rec.sh", ":::", "a", "b c", "d")
		if code != 0 || stderr != "" || len(stdout) != 0 {
			t.Fatalf("exit %d, stdout %q, stderr %q", code, stdout, stderr)
		}
		want := map[string]string{"a": "a\n", "b c": "b c\n", "d": "d\n"}
		if got := clitest.Recorded(t, dir); !maps.Equal(got, want) {
			t.Errorf("ran %v, want %v", got, want)
		}
	})

	t.Run("a failed job is exit 1", func(t *testing.T) {
		dir := clitest.ScriptDir(t)
		_, stderr, code, _ := clitest.Exec(t, bin, []byte("ok1\nbad\nok2\n"), dir, "run", "--rate", "1000", "sh", "rec.sh")
		if code != 1 {
			t.Errorf("exit %d, want 1", code)
		}
		for _, want := range []string{"job 2 (bad): exit status 3", "1 of 3 jobs failed"} {
			if !strings.Contains(stderr, want) {
				t.Errorf("stderr %q lacks %q", stderr, want)
			}
		}
		if got := clitest.Recorded(t, dir); len(got) != 3 {
			t.Errorf("ran %v, want all three", got)
		}
	})

	t.Run("--fail-fast starts nothing after a failure", func(t *testing.T) {
		dir := clitest.ScriptDir(t)
		_, stderr, code, _ := clitest.Exec(t, bin, []byte("ok1\nbad\nok2\nok3\n"), dir, "run", "--fail-fast", "--rate", "1000", "sh", "rec.sh")
		if code != 1 || !strings.Contains(stderr, "job 2 (bad)") {
			t.Errorf("exit %d, stderr %q", code, stderr)
		}
		got := clitest.Recorded(t, dir)
		if _, ok := got["ok2"]; ok || len(got) != 2 {
			t.Errorf("ran %v, want only ok1 and bad", got)
		}
	})

	t.Run("--verbose and output", func(t *testing.T) {
		stdout, stderr, code, _ := clitest.Exec(t, bin, []byte("hello world\n"), "", "run", "-v", "--rate", "10/s", "echo", "[{}]")
		if code != 0 || string(stdout) != "[hello world]\n" || stderr != "+ echo \"[hello world]\"\n" {
			t.Errorf("exit %d, stdout %q, stderr %q", code, stdout, stderr)
		}
	})

	t.Run("bad arguments are exit 2", func(t *testing.T) {
		for _, tc := range []struct {
			args []string
			want string
		}{
			{[]string{"echo"}, "--rate is required"},
			{[]string{"--rate", "0", "echo"}, "must be positive"},
			{[]string{"--rate", "5/y", "echo"}, "neither s, m, h, d"},
			{[]string{"--rate", "5", "--parallel", "0", "echo"}, "--parallel 0"},
			{[]string{"--rate", "5"}, "no command"},
			{[]string{"--rate", "5", "--", ":::", "a"}, "no command"},
			{[]string{"--rate", "5", ":::", "a"}, "no command"},
			{[]string{"--rate", "5", "--burst", "-1", "echo"}, "--burst -1"},
			{[]string{"--rate", "5", "--burst", "2", "--warmup", "1s", "echo"}, "cannot be combined"},
			{[]string{"--rate", "5", "--warmup", "-1s", "echo"}, "must not be negative"},
			{[]string{"--nosuch", "echo"}, "flag provided but not defined"},
		} {
			_, stderr, code, _ := clitest.Exec(t, bin, nil, "", append([]string{"run"}, tc.args...)...)
			if code != 2 || !strings.Contains(stderr, tc.want) {
				t.Errorf("run %q: exit %d, stderr %q; want 2 and %q", tc.args, code, stderr, tc.want)
			}
		}
		_, stderr, code, _ := clitest.Exec(t, bin, nil, "", "run", "--rate", "5", "no-such-command-here", ":::", "a")
		if code != 127 || !strings.Contains(stderr, "no-such-command-here") {
			t.Errorf("missing command: exit %d, stderr %q", code, stderr)
		}
	})
}

func TestExpandCommand(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		tmpl []string
		job  string
		want []string
	}{
		{[]string{"echo"}, "a b", []string{"echo", "a b"}},
		{[]string{"cp", "{}", "{}.bak"}, "f", []string{"cp", "f", "f.bak"}},
		{[]string{"curl", "-o", "out/{}", "https://x/{}"}, "p", []string{"curl", "-o", "out/p", "https://x/p"}},
		{[]string{"echo", "{}{}"}, "", []string{"echo", ""}},
	} {
		if got := expandCommand(tc.tmpl, tc.job); !slices.Equal(got, tc.want) {
			t.Errorf("expandCommand(%q, %q) = %q, want %q", tc.tmpl, tc.job, got, tc.want)
		}
	}
}

func TestFeedJobs(t *testing.T) {
	t.Parallel()
	items := make(chan string, 10)
	var given atomic.Int64
	err := feedJobs(context.Background(), nil, strings.NewReader("a\r\n\n  \nb c\nlast"), items, &given)
	close(items)
	var got []string
	for it := range items {
		got = append(got, it)
	}
	if err != nil || !slices.Equal(got, []string{"a", "b c", "last"}) || given.Load() != 3 {
		t.Errorf("feedJobs = %q, %v, counted %d", got, err, given.Load())
	}
	// A line longer than 1 MiB is an error, not a silent truncation.
	long := strings.Repeat("x", 2<<20)
	if err := feedJobs(context.Background(), nil, strings.NewReader(long), make(chan string, 1), &given); err == nil {
		t.Error("a 2 MiB line was accepted")
	}
	// A cancelled context stops the feed.
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	given.Store(0)
	if err := feedJobs(ctx, []string{"a", "b"}, nil, make(chan string), &given); err == nil {
		t.Error("feedJobs ignored the cancelled context")
	}
	if given.Load() != 2 {
		t.Errorf("a list of 2 jobs counted %d", given.Load())
	}
}

// In process, with buffers for the streams: the jobs' output goes through a
// lock (run under -race), and the exit status says whether all succeeded.
func TestRunInProcessParallelOutput(t *testing.T) {
	t.Parallel()
	var stdout, stderr bytes.Buffer
	var in strings.Builder
	for i := range 20 {
		fmt.Fprintf(&in, "%d\n", i)
	}
	code := Run([]string{"--rate", "inf", "-P", "4", "echo", "n={}"}, strings.NewReader(in.String()), &stdout, &stderr)
	if code != 0 || stderr.Len() != 0 {
		t.Fatalf("exit %d, stderr %q", code, stderr.String())
	}
	lines := strings.Split(strings.TrimSpace(stdout.String()), "\n")
	slices.Sort(lines)
	var want []string
	for i := range 20 {
		want = append(want, fmt.Sprintf("n=%d", i))
	}
	slices.Sort(want)
	if !slices.Equal(lines, want) {
		t.Errorf("output lines %q", lines)
	}
}

func TestQuoteWords(t *testing.T) {
	t.Parallel()
	got := strings.Join(quoteWords([]string{"echo", "a b", "", "it's", "plain-word"}), " ")
	if want := `echo "a b" "" "it's" plain-word`; got != want {
		t.Errorf("quoteWords = %s, want %s", got, want)
	}
}

// TestRunCannotExecute: a command that exists but cannot be executed is
// status 126, as with xargs (127 stays for one that does not exist), both
// when run finds it at start and when a job's command is a template.
func TestRunCannotExecute(t *testing.T) {
	t.Parallel()
	bin := clitest.Binary(t)
	dir := t.TempDir()
	require.NoError(t, os.WriteFile(filepath.Join(dir, "noexec.sh"), []byte("#!/bin/sh\necho hi\n"), 0o644))

	_, stderr, code, _ := clitest.Exec(t, bin, nil, dir, "run", "--rate", "inf", "./noexec.sh", ":::", "a")
	assert.Equal(t, exitCannotRun, code, stderr)
	assert.Contains(t, stderr, "permission denied")

	_, stderr, code, _ = clitest.Exec(t, bin, nil, dir, "run", "--rate", "inf", "./{}", ":::", "noexec.sh")
	assert.Equal(t, exitCannotRun, code, stderr)

	_, stderr, code, _ = clitest.Exec(t, bin, nil, dir, "run", "--rate", "inf", "./{}", ":::", "missing.sh")
	assert.Equal(t, exitNotFound, code, stderr)
}

// TestRunSummaryCountsEveryJob: stopped by --fail-fast after the second of
// four jobs, the summary still counts the four given.
func TestRunSummaryCountsEveryJob(t *testing.T) {
	t.Parallel()
	bin := clitest.Binary(t)
	dir := clitest.ScriptDir(t)
	_, stderr, code, _ := clitest.Exec(t, bin, nil, dir, "run", "--fail-fast", "--rate", "inf", "sh", "rec.sh", ":::", "ok1", "bad", "ok2", "ok3")
	assert.Equal(t, command.ExitFail, code)
	assert.Contains(t, stderr, "ratelimit run: 1 of 4 jobs failed, 2 not started\n")
}

// TestRunInterrupted: SIGINT stops run from starting jobs and it exits 130
// (128 + SIGINT), as a shell reports a process that Ctrl-C stopped, with
// the jobs not started counted.
func TestRunInterrupted(t *testing.T) {
	t.Parallel()
	bin := clitest.Binary(t)
	// The first job interrupts its parent, the ratelimit process; the
	// second cannot start before a second has passed, so it never does.
	_, stderr, code, _ := clitest.Exec(t, bin, nil, "", "run", "--rate", "1/s", "--burst", "0",
		"sh", "-c", `kill -INT $PPID`, "sh", ":::", "a", "b", "c")
	assert.Equal(t, 130, code, stderr)
	assert.Contains(t, stderr, "ratelimit run: 0 of 3 jobs failed, 2 not started\n")
}

// TestStopReason: when dispatch is stopped (the shared limit refuses,
// failing closed; --fail-fast; a signal), Stream may return on the jobs'
// end (the feeder ends them on the same stop, or had handed them all
// over): run says the stop's cause, not the feeder's "context canceled",
// nor nothing. Jobs that ran out without a stop stay so.
func TestStopReason(t *testing.T) {
	t.Parallel()
	why := errors.New("redis unavailable: the limiter fails closed")
	stopped, cancel := context.WithCancelCause(context.Background())
	cancel(why)
	other := errors.New("a job failed (--fail-fast)")
	for _, c := range []struct {
		ctx       context.Context
		streamErr error
		want      error
	}{
		{stopped, nil, why},
		{stopped, other, other},
		{context.Background(), nil, nil},
	} {
		if got := stopReason(c.ctx, c.streamErr); got != c.want {
			t.Errorf("stopReason(ctx err %v, %v) = %v, want %v", c.ctx.Err(), c.streamErr, got, c.want)
		}
	}
}
