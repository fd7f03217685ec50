package redistest

import (
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"
)

// Cluster is a Redis Cluster of primaries only (no replicas), all on
// loopback.
type Cluster struct {
	Servers []*Server
}

// Addrs returns the "host:port" of every node, for redis.ClusterOptions.
func (c *Cluster) Addrs() []string {
	a := make([]string, len(c.Servers))
	for i, s := range c.Servers {
		a[i] = s.Addr()
	}
	return a
}

// StartCluster starts n (at least 3) cluster-enabled servers, joins them
// with redis-cli --cluster create and returns once every node reports
// cluster_state:ok. The nodes are killed when the test ends.
func StartCluster(t testing.TB, n int) *Cluster {
	t.Helper()
	if n < 3 {
		t.Fatalf("redistest: a cluster needs at least 3 primaries, not %d", n)
	}
	c := &Cluster{}
	for i := 0; i < n; i++ {
		c.Servers = append(c.Servers, Start(t,
			"--cluster-enabled", "yes",
			"--cluster-config-file", "nodes.conf",
			"--cluster-node-timeout", "15000"))
	}
	args := append([]string{"--cluster", "create"}, c.Addrs()...)
	args = append(args, "--cluster-replicas", "0", "--cluster-yes")
	out, err := runCLI(c.Servers[0].cli, c.Servers[0].Port, args...)
	if err != nil {
		t.Fatalf("redistest: redis-cli --cluster create: %v\n%s", err, out)
	}
	c.WaitOK(t)
	return c
}

// WaitOK polls CLUSTER INFO on every node until each reports
// cluster_state:ok (the nodes agree on the slot map only after a few
// gossip rounds). It fails the test after 20 s.
func (c *Cluster) WaitOK(t testing.TB) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	for {
		ok := true
		var last string
		for _, s := range c.Servers {
			out, err := runCLI(s.cli, s.Port, "CLUSTER", "INFO")
			if err != nil || !strings.Contains(out, "cluster_state:ok") {
				ok, last = false, fmt.Sprintf("node %s: %v %s", s.Addr(), err, firstLine(out))
				break
			}
		}
		if ok {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("redistest: cluster not ok after 20 s: %s", last)
		}
		<-tick.C
	}
}

// NodeForKey returns the node that serves key's slot.
func (c *Cluster) NodeForKey(t testing.TB, key string) *Server {
	t.Helper()
	slotStr := c.Servers[0].CLI("CLUSTER", "KEYSLOT", key)
	slot, err := strconv.Atoi(strings.TrimSpace(slotStr))
	if err != nil {
		t.Fatalf("redistest: CLUSTER KEYSLOT %q: %q", key, slotStr)
	}
	for _, s := range c.Servers {
		// The node that owns the slot reports itself as "myself" in
		// CLUSTER NODES with the slot range.
		nodes := s.CLI("CLUSTER", "NODES")
		for _, line := range strings.Split(nodes, "\n") {
			f := strings.Fields(line)
			if len(f) < 9 || !strings.Contains(f[2], "myself") {
				continue
			}
			for _, r := range f[8:] {
				lo, hi, found := strings.Cut(r, "-")
				if !found {
					hi = lo
				}
				a, err1 := strconv.Atoi(lo)
				b, err2 := strconv.Atoi(hi)
				if err1 == nil && err2 == nil && a <= slot && slot <= b {
					return s
				}
			}
		}
	}
	t.Fatalf("redistest: no node owns slot %d", slot)
	return nil
}

func firstLine(s string) string {
	l, _, _ := strings.Cut(s, "\n")
	return l
}
