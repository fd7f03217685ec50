package trace

import (
	"bytes"
	"errors"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/smoothrate/ratelimit"
	"github.com/smoothrate/ratelimit/clocktest"
)

// tableRow is one data row of trace's output, split into its fields.
type tableRow struct{ at, op, wait, stored, left, next string }

// parseTable extracts the data rows (those after the "time(s)" header).
func parseTable(t *testing.T, out string) []tableRow {
	t.Helper()
	var rows []tableRow
	inTable := false
	for _, line := range strings.Split(out, "\n") {
		f := strings.Fields(line)
		if len(f) > 0 && f[0] == "time(s)" {
			inTable = true
			continue
		}
		if !inTable || len(f) == 0 {
			continue
		}
		if len(f) != 6 {
			t.Fatalf("row %q has %d fields, want 6", line, len(f))
		}
		rows = append(rows, tableRow{f[0], f[1], f[2], f[3], f[4], f[5]})
	}
	if !inTable {
		t.Fatalf("no table in output:\n%s", out)
	}
	return rows
}

// acquires keeps the acquire rows only: the requests of the article.
func acquires(rows []tableRow) []tableRow {
	var out []tableRow
	for _, r := range rows {
		if strings.HasPrefix(r.op, "acquire:") {
			out = append(out, r)
		}
	}
	return out
}

// The two tables of the classic walk-through of Guava's RateLimiter
// (seed article 003): 4 qps, requests of 1, 3, 10 and 1 permits with one
// second of the caller's own time between them.
var articleTables = []struct {
	name string
	args []string
	want []tableRow // at, op, wait, stored-before of each acquire
}{
	{
		name: "bursty",
		args: []string{"trace", "--qps", "4", "acquire:1", "sleep:1s", "acquire:3", "sleep:1s", "acquire:10", "sleep:1s", "acquire:1"},
		want: []tableRow{
			{at: "0", op: "acquire:1", wait: "0", stored: "0"},
			{at: "1", op: "acquire:3", wait: "0", stored: "3"},
			{at: "2", op: "acquire:10", wait: "0", stored: "4"},
			{at: "3", op: "acquire:1", wait: "0.5", stored: "0"},
		},
	},
	{
		// The warming-up limiter makes the third request wait, so the
		// fourth arrives at 3.6875 s, not 3 s, as the article explains.
		name: "warming up",
		args: []string{"trace", "--qps", "4", "--warmup", "2s", "acquire:1", "sleep:1s", "acquire:3", "sleep:1s", "acquire:10", "sleep:1s", "acquire:1"},
		want: []tableRow{
			{at: "0", op: "acquire:1", wait: "0", stored: "8"},
			{at: "1", op: "acquire:3", wait: "0", stored: "8"},
			{at: "2", op: "acquire:10", wait: "0.6875", stored: "5"},
			{at: "3.6875", op: "acquire:1", wait: "1.5625", stored: "0"},
		},
	},
}

func checkArticleTable(t *testing.T, out string, want []tableRow) {
	t.Helper()
	got := acquires(parseTable(t, out))
	if len(got) != len(want) {
		t.Fatalf("got %d acquire rows, want %d:\n%s", len(got), len(want), out)
	}
	for i, w := range want {
		g := got[i]
		if g.at != w.at || g.op != w.op || g.wait != w.wait || g.stored != w.stored {
			t.Errorf("request %d: got time %s, %s, wait %s, stored %s; want time %s, %s, wait %s, stored %s\n%s",
				i+1, g.at, g.op, g.wait, g.stored, w.at, w.op, w.wait, w.stored, out)
		}
	}
}

// runTrace runs `ratelimit trace` in process: args as on the command line
// after "ratelimit" (starting with "trace"), stdin as given. It returns
// stdout, stderr and the exit status, as a run of the binary would.
func runTrace(t *testing.T, stdin string, args ...string) (string, string, int) {
	t.Helper()
	if len(args) == 0 || args[0] != "trace" {
		t.Fatalf("runTrace %q: not a trace command line", args)
	}
	var stdout, stderr bytes.Buffer
	code := Run(args[1:], strings.NewReader(stdin), &stdout, &stderr)
	return stdout.String(), stderr.String(), code
}

// TestTraceCommand runs trace as the command line does (in process: the
// binary's main only adds os.Exit, which cmd/ratelimit's tests check).
func TestTraceCommand(t *testing.T) {
	for _, tc := range articleTables {
		t.Run("article "+tc.name, func(t *testing.T) {
			stdout, stderr, code := runTrace(t, "", tc.args...)
			if code != 0 || stderr != "" {
				t.Fatalf("exit %d, stderr %q", code, stderr)
			}
			checkArticleTable(t, stdout, tc.want)
		})
	}

	t.Run("default is the article, in both kinds", func(t *testing.T) {
		stdout, _, code := runTrace(t, "", "trace")
		if code != 0 {
			t.Fatalf("exit %d", code)
		}
		checkArticleTable(t, stdout, articleTables[0].want)
		stdout, _, code = runTrace(t, "", "trace", "--warmup", "2s")
		if code != 0 {
			t.Fatalf("exit %d", code)
		}
		checkArticleTable(t, stdout, articleTables[1].want)
	})

	t.Run("Guava resolution gives the same tables", func(t *testing.T) {
		stdout, _, code := runTrace(t, "", "trace", "--guava", "--warmup", "2s")
		if code != 0 {
			t.Fatalf("exit %d", code)
		}
		checkArticleTable(t, stdout, articleTables[1].want)
	})

	t.Run("resolution: nanoseconds by default, microseconds with --guava", func(t *testing.T) {
		// At 80 000 permits/s a permit costs 12.5 µs; Guava books 12.
		for _, tc := range []struct {
			flag, want string
		}{{"--guava=false", "0.0000125"}, {"--guava", "0.000012"}} {
			stdout, stderr, code := runTrace(t, "", "trace", tc.flag, "--qps", "80000", "acquire", "acquire")
			if code != 0 {
				t.Fatalf("exit %d, stderr %q", code, stderr)
			}
			rows := parseTable(t, stdout)
			if len(rows) != 2 || rows[1].wait != tc.want {
				t.Errorf("%s: rows %+v, want the second acquire to wait %s", tc.flag, rows, tc.want)
			}
		}
	})

	t.Run("script on stdin", func(t *testing.T) {
		script := "# the article, warming up\nacquire:1 sleep:1s\nacquire:3 sleep:1s # second\nacquire:10\nsleep:1\nacquire\n"
		stdout, stderr, code := runTrace(t, script, "trace", "--warmup", "2s", "--script", "-")
		if code != 0 {
			t.Fatalf("exit %d, stderr %q", code, stderr)
		}
		checkArticleTable(t, stdout, articleTables[1].want)
	})

	t.Run("script file, flags after it", func(t *testing.T) {
		path := filepath.Join(t.TempDir(), "ops.txt")
		if err := os.WriteFile(path, []byte("acquire:1 sleep:1s acquire:3 sleep:1s acquire:10 sleep:1s acquire:1\n"), 0o644); err != nil {
			t.Fatal(err)
		}
		stdout, stderr, code := runTrace(t, "", "trace", "--script", path, "--qps", "4")
		if code != 0 {
			t.Fatalf("exit %d, stderr %q", code, stderr)
		}
		checkArticleTable(t, stdout, articleTables[0].want)
	})

	t.Run("try and rate", func(t *testing.T) {
		// 1 qps, full bucket of 2: two free permits, then a try that
		// is refused (next free in 1 s), one that waits for it, and a
		// rate change that makes the following wait 0.5 s.
		stdout, stderr, code := runTrace(t, "", "trace", "--qps", "1", "--burst", "2", "--full",
			"acquire:2", "acquire:1", "try:1", "try:1:1s", "rate:2", "acquire:1", "acquire:1")
		if code != 0 {
			t.Fatalf("exit %d, stderr %q", code, stderr)
		}
		rows := parseTable(t, stdout)
		var waits []string
		for _, r := range rows {
			waits = append(waits, r.op+"="+r.wait)
		}
		want := "acquire:2=0 acquire:1=0 try:1=refused try:1:1s=1 rate:2=- acquire:1=1 acquire:1=0.5"
		if got := strings.Join(waits, " "); got != want {
			t.Errorf("got  %s\nwant %s\n%s", got, want, stdout)
		}
	})

	bad := []struct {
		name string
		args []string
		msg  string // a piece of the message on stderr
	}{
		{"unknown operation", []string{"trace", "acquire:1", "jump:1s"}, `"jump:1s"`},
		{"bad permits", []string{"trace", "acquire:x"}, `"x" is not a whole number`},
		{"zero permits", []string{"trace", "acquire:0"}, "permits must be positive"},
		{"negative sleep", []string{"trace", "sleep:-1s"}, "must not be negative"},
		{"bad duration", []string{"trace", "sleep:soon"}, "is not a duration"},
		{"negative rate op", []string{"trace", "rate:-2"}, "rate must be positive"},
		{"bad rate op", []string{"trace", "rate:fast"}, `"fast": not a number`},
		{"negative qps", []string{"trace", "--qps", "-4"}, "rate must be positive"},
		{"zero qps", []string{"trace", "--qps", "0"}, "rate must be positive"},
		{"bad qps", []string{"trace", "--qps", "four"}, "invalid value"},
		{"unknown flag", []string{"trace", "--fast"}, "flag provided but not defined"},
		{"negative warm-up", []string{"trace", "--warmup", "-2s"}, "warm-up period must not be negative"},
		{"cold factor below 1", []string{"trace", "--warmup", "2s", "--cold-factor", "0.5"}, "cold factor"},
		{"cold factor on bursty", []string{"trace", "--cold-factor", "3"}, "does not apply"},
		{"burst on warming up", []string{"trace", "--warmup", "2s", "--burst", "2"}, "does not apply"},
		{"script and arguments", []string{"trace", "--script", "-", "acquire:1"}, "not both"},
		{"missing script", []string{"trace", "--script", "/nonexistent/ops.txt"}, "/nonexistent/ops.txt"},
	}
	for _, tc := range bad {
		t.Run("bad: "+tc.name, func(t *testing.T) {
			stdout, stderr, code := runTrace(t, "", tc.args...)
			if code != 2 {
				t.Errorf("exit status %d, want 2", code)
			}
			if !strings.Contains(stderr, tc.msg) {
				t.Errorf("stderr %q does not mention %q", stderr, tc.msg)
			}
			if strings.Contains(stdout, "time(s)") {
				t.Errorf("a table was printed despite the error:\n%s", stdout)
			}
		})
	}

	t.Run("bad script line is named", func(t *testing.T) {
		_, stderr, code := runTrace(t, "acquire:1\nsleep:1s acquire:-3\n", "trace", "--script", "-")
		if code != 2 || !strings.Contains(stderr, "standard input:2:") {
			t.Errorf("exit %d, stderr %q; want 2 and the line number", code, stderr)
		}
	})

	t.Run("help", func(t *testing.T) {
		// What "ratelimit help trace" runs: -h, both streams on stdout.
		var stdout bytes.Buffer
		code := Run([]string{"-h"}, nil, &stdout, &stdout)
		if code != 0 || !strings.Contains(stdout.String(), "acquire:N") || !strings.Contains(stdout.String(), "-warmup") {
			t.Errorf("exit %d, help text:\n%s", code, stdout.String())
		}
	})
}

func TestParseOp(t *testing.T) {
	good := []struct {
		in   string
		want op
		str  string
	}{
		{"acquire", op{kind: opAcquire, permits: 1}, "acquire:1"},
		{"acquire:10", op{kind: opAcquire, permits: 10}, "acquire:10"},
		{"try", op{kind: opTry, permits: 1}, "try:1"},
		{"try:3", op{kind: opTry, permits: 3}, "try:3"},
		{"try:3:250ms", op{kind: opTry, permits: 3, d: 250 * time.Millisecond}, "try:3:250ms"},
		{"try:1:0.5", op{kind: opTry, permits: 1, d: 500 * time.Millisecond}, "try:1:500ms"},
		{"sleep:1s", op{kind: opSleep, d: time.Second}, "sleep:1s"},
		{"sleep:1", op{kind: opSleep, d: time.Second}, "sleep:1s"},
		{"sleep:0.000000001", op{kind: opSleep, d: 1}, "sleep:1ns"},
		{"sleep:0", op{kind: opSleep}, "sleep:0s"},
		{"rate:2.5", op{kind: opRate, rate: 2.5}, "rate:2.5"},
		{"rate:inf", op{kind: opRate, rate: posInf}, "rate:+Inf"},
	}
	for _, tc := range good {
		got, err := parseOp(tc.in)
		if err != nil {
			t.Errorf("parseOp(%q): %v", tc.in, err)
			continue
		}
		if got != tc.want {
			t.Errorf("parseOp(%q) = %+v, want %+v", tc.in, got, tc.want)
		}
		if s := got.String(); s != tc.str {
			t.Errorf("parseOp(%q).String() = %q, want %q", tc.in, s, tc.str)
		}
	}

	bad := []string{
		"", "acquire:", "acquire:0", "acquire:-1", "acquire:1.5", "acquire:x",
		"try:0", "try:1:-1s", "try:1:x", "try:", "sleep", "sleep:", "sleep:-1",
		"sleep:1e300", "sleep:NaN", "rate", "rate:0", "rate:-1", "rate:NaN", "rate:-inf",
		"rate:x", "Acquire:1", "jump:1", "acquire 1",
	}
	for _, in := range bad {
		if got, err := parseOp(in); err == nil {
			t.Errorf("parseOp(%q) = %+v, want an error", in, got)
		} else if !strings.Contains(err.Error(), in) {
			t.Errorf("parseOp(%q) error %q does not quote the operation", in, err)
		}
	}
}

var posInf = math.Inf(1)

func TestParseScript(t *testing.T) {
	ops, err := parseScript(strings.NewReader("acquire:1 # first\n\n  sleep:1s\tacquire:3\n# done\n"), "s")
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, o := range ops {
		got = append(got, o.String())
	}
	if want := "acquire:1 sleep:1s acquire:3"; strings.Join(got, " ") != want {
		t.Errorf("got %q, want %q", strings.Join(got, " "), want)
	}

	_, err = parseScript(strings.NewReader("acquire:1\n\nsleep:x\n"), "ops.txt")
	if err == nil || !strings.HasPrefix(err.Error(), "ops.txt:3: ") {
		t.Errorf("error %v, want one that starts with ops.txt:3:", err)
	}
}

func TestFormat(t *testing.T) {
	for d, want := range map[time.Duration]string{
		0:                          "0",
		687500 * time.Microsecond:  "0.6875",
		1562500 * time.Microsecond: "1.5625",
		time.Second / 3:            "0.333333333",
		3 * time.Second:            "3",
		-1500 * time.Millisecond:   "-1.5",
		time.Duration(-1 << 63):    "-9223372036.854775808",
	} {
		if got := formatDuration(d); got != want {
			t.Errorf("formatDuration(%d) = %q, want %q", d, got, want)
		}
	}
	for x, want := range map[float64]string{0: "0", 3.0122119: "3.012212", 8: "8", -0.0000001: "-1e-07", 0.0000006: "0.000001", 1e300: "1e+300", 123456789012345: "123456789012345", posInf: "+Inf"} {
		if got := formatFloat(x); got != want {
			t.Errorf("formatFloat(%v) = %q, want %q", x, got, want)
		}
	}
}

func TestRunInProcess(t *testing.T) {
	var stdout, stderr bytes.Buffer
	code := Run([]string{"--warmup", "2s"}, strings.NewReader(""), &stdout, &stderr)
	if code != 0 {
		t.Fatalf("exit %d: %s", code, stderr.String())
	}
	checkArticleTable(t, stdout.String(), articleTables[1].want)
}

// replay reports a call the limiter rejects (the parser keeps such
// operations out, so this is the safety net) instead of printing a row.
func TestReplayReportsRejectedCalls(t *testing.T) {
	clk := clocktest.NewFake()
	lim, err := ratelimit.NewBursty(4, ratelimit.WithClock(clk))
	if err != nil {
		t.Fatal(err)
	}
	for _, o := range []op{{kind: opAcquire, permits: 0}, {kind: opRate, rate: -1}} {
		if _, err := replay(lim, clk, []op{{kind: opAcquire, permits: 1}, o}); err == nil {
			t.Errorf("replay of %v: no error", o)
		} else if !errors.Is(err, ratelimit.ErrInvalidPermits) && !errors.Is(err, ratelimit.ErrInvalidRate) {
			t.Errorf("replay of %v: %v, want a wrapped sentinel", o, err)
		}
	}
}

// The heading's cold interval saturates like the stable interval instead of
// wrapping: at 1e-9 permits/s with cold factor 10 it is 1e19 ns, beyond a
// Duration, and a plain conversion printed it as -9223372036.854775808 s.
func TestDescribeHugeColdInterval(t *testing.T) {
	var stdout, stderr bytes.Buffer
	code := Run([]string{"--qps", "1e-9", "--cold-factor", "10", "--warmup", "1000000h", "acquire:1"},
		strings.NewReader(""), &stdout, &stderr)
	if code != 0 {
		t.Fatalf("exit %d: %s", code, stderr.String())
	}
	if want := "cold interval 9223372036.854775807 s"; !strings.Contains(stdout.String(), want) {
		t.Errorf("heading %q does not say %q", strings.SplitN(stdout.String(), "\n", 2)[0], want)
	}
}
