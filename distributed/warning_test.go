package distributed

import (
	"bytes"
	"log/slog"
	"strings"
	"testing"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestWarnsWithoutContextTimeout: WithCallTimeout cannot bound a call to a
// hung server unless the client lets contexts bound its socket I/O; New
// says so once, through the optional logger, and only then.
func TestWarnsWithoutContextTimeout(t *testing.T) {
	t.Parallel()
	var logs bytes.Buffer
	logger := slog.New(slog.NewTextHandler(&logs, nil))
	for _, tc := range []struct {
		name   string
		client redis.UniversalClient
		warns  bool
	}{
		{"client without", redis.NewClient(&redis.Options{Addr: "127.0.0.1:1"}), true},
		{"client with", redis.NewClient(&redis.Options{Addr: "127.0.0.1:1", ContextTimeoutEnabled: true}), false},
		{"cluster without", redis.NewClusterClient(&redis.ClusterOptions{Addrs: []string{"127.0.0.1:1"}}), true},
		{"cluster with", redis.NewClusterClient(&redis.ClusterOptions{Addrs: []string{"127.0.0.1:1"}, ContextTimeoutEnabled: true}), false},
	} {
		logs.Reset()
		l, err := New(tc.client, "x", 1, WithLogger(logger))
		require.NoError(t, err, tc.name)
		assert.Equal(t, tc.warns, strings.Count(logs.String(), "ContextTimeoutEnabled") == 1, "%s: %q", tc.name, logs.String())
		if tc.warns {
			assert.Contains(t, logs.String(), "level=WARN", tc.name)
		}
		_ = tc.client.Close()
		_ = l
	}
	// No logger, no output anywhere (and no panic).
	_, err := New(redis.NewClient(&redis.Options{Addr: "127.0.0.1:1"}), "x", 1)
	require.NoError(t, err)
}
