package proxy

import (
	"os"
	"path/filepath"
	"syscall"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/smoothrate/ratelimit/internal/cli/clitest"
	"github.com/smoothrate/ratelimit/internal/cli/command"
	"github.com/smoothrate/ratelimit/internal/redistest"
)

// The lines docs/http.md quotes are the ones the proxy prints, for the
// page's own commands: the start-up line, a bad --limit, a reload of a bad
// --config file, a Redis whose password is wrong.
func TestProxyDocQuotes(t *testing.T) {
	t.Parallel()
	const doc = "docs/http.md"
	bin := clitest.Binary(t)

	p := startProxy(t, bin, "--limit", "100/min", "http://127.0.0.1:3000")
	assert.Equal(t, clitest.DocQuote(t, doc, "ratelimit proxy: listening on", "[::]:8080", p.addr), p.started)

	stderr, code := runProxyEnv(t, bin, nil, "--limit", "100", "http://127.0.0.1:3000")
	assert.Equal(t, command.ExitUsage, code)
	assert.Equal(t, clitest.DocQuote(t, doc, "ratelimit proxy: --limit")+"\n", stderr)

	// The page's --config file, then a bad one.
	dir := t.TempDir()
	write := func(s string) { require.NoError(t, os.WriteFile(filepath.Join(dir, "limits"), []byte(s), 0o644)) }
	write("# the API's limits\n--limit 100/min --burst 20\n--key header:X-Api-Key\n")
	p = startProxyWith(t, procSetup{dir: dir}, bin, "--config", "limits", "http://127.0.0.1:3000")
	write("--limit 2/fortnight\n")
	require.NoError(t, p.cmd.Process.Signal(syscall.SIGHUP))
	assert.Equal(t, clitest.DocQuote(t, doc, "ratelimit proxy: SIGHUP: not reloaded"), waitStderrLine(t, p, "SIGHUP"))

	srv := redistest.Start(t)
	srv.CLI("CONFIG", "SET", "requirepass", "s3cret")
	stderr, code = runProxyEnv(t, bin, nil, "--redis", "redis://:nope@"+srv.Addr()+"/0", "--limit", "100/min", "http://127.0.0.1:3000")
	assert.Equal(t, command.ExitUsage, code)
	assert.Equal(t, clitest.DocQuote(t, doc, "ratelimit proxy: redis at", "127.0.0.1:6379", srv.Addr())+"\n", stderr)
}
