package redisflag

import (
	"slices"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// The URL forms reach go-redis as the right client with the right nodes.
func TestParseRedisURL(t *testing.T) {
	for _, c := range []struct {
		url, where string
		cluster    bool
		addrs      []string
		user, pass string
		db         int
		tls        bool
	}{
		{url: "redis://127.0.0.1:6380/2", where: "127.0.0.1:6380", addrs: []string{"127.0.0.1:6380"}, db: 2},
		{url: "rediss://u:p@example.com:6390", where: "example.com:6390", addrs: []string{"example.com:6390"}, user: "u", pass: "p", tls: true},
		{url: "redis+cluster://a:1,b:2,c:3", where: "a:1,b:2,c:3", cluster: true, addrs: []string{"a:1", "b:2", "c:3"}},
		{url: "rediss+cluster://u:p@a:1,b:2/?dial_timeout=2s", where: "a:1,b:2", cluster: true, addrs: []string{"a:1", "b:2"}, user: "u", pass: "p", tls: true},
		// go-redis's own cluster form.
		{url: "redis+cluster://a:1?addr=b:2", where: "a:1,b:2", cluster: true, addrs: []string{"a:1", "b:2"}},
	} {
		newClient, where, err := ParseURL(c.url, "")
		if err != nil {
			t.Errorf("%s: %v", c.url, err)
			continue
		}
		if where != c.where {
			t.Errorf("%s: where %q, want %q", c.url, where, c.where)
		}
		client := newClient()
		var addrs []string
		var user, pass string
		var db int
		var tls, ctxTimeout bool
		switch cl := client.(type) {
		case *redis.Client:
			o := cl.Options()
			addrs, user, pass, db, tls, ctxTimeout = []string{o.Addr}, o.Username, o.Password, o.DB, o.TLSConfig != nil, o.ContextTimeoutEnabled
		case *redis.ClusterClient:
			o := cl.Options()
			addrs, user, pass, tls, ctxTimeout = o.Addrs, o.Username, o.Password, o.TLSConfig != nil, o.ContextTimeoutEnabled
			// A failover must be noticed within a second, not the
			// go-redis default of 60 s.
			if o.ClusterStateReloadInterval <= 0 || o.ClusterStateReloadInterval > time.Second {
				t.Errorf("%s: ClusterStateReloadInterval %v, want (0, 1s]", c.url, o.ClusterStateReloadInterval)
			}
		}
		_ = client.Close()
		_, isCluster := client.(*redis.ClusterClient)
		if isCluster != c.cluster || !slices.Equal(addrs, c.addrs) || user != c.user || pass != c.pass || db != c.db || tls != c.tls || !ctxTimeout {
			t.Errorf("%s: cluster %v, addrs %q, user %q, password %q, db %d, TLS %v, context timeouts %v; want %v %q %q %q %d %v true",
				c.url, isCluster, addrs, user, pass, db, tls, ctxTimeout, c.cluster, c.addrs, c.user, c.pass, c.db, c.tls)
		}
	}
}
